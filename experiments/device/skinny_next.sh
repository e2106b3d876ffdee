#!/usr/bin/env bash
# On the GPU machine (device tool, carry .devbundle, after `bash experiments/device/lean_tree.sh
# out`): the deep ring (stages 8-16) checked on random configurations, then tuned (at ed84b5a it
# checked split_reduce zero_first too, since reverted: experiments/results/deep_ring_h200).
# deep_ring_check.sh and zero_first_check.sh (their twins and re-timings) came first; their
# random-configuration sections measured nothing then (`--all --fix` enumerated 23-31 million
# structural configurations past its 25 s); `--sample --fix` draws without enumerating.
# 1. Correctness: SAMPLE random configurations with stages >= 8 (every other knob free) of GEMM
#    100x1000x4040 (ragged M, N, K) and 16x6144x4096; each built, run into a poisoned output,
#    checked against float64 (seed 1: other draws than deep_ring_check.sh's seed 0).
# 2. The tunes of JOBS (default jobs/skinny_next.txt) through parallel_tunes.sh, in the time left
#    of BUDGET_S.
# Tables last: statuses per check, then parallel_tunes.sh's.
#   bash experiments/device/skinny_next.sh          # about 8 minutes on one H200
set -uo pipefail
source .devbundle/unpack.sh
export BOCAST_GIT_SHA=${BOCAST_GIT_SHA:-unknown}
SAMPLE=${SAMPLE:-16} BUDGET_S=${BUDGET_S:-540}
JOBS=${JOBS-experiments/device/jobs/skinny_next.txt}
root=runs/skinny_next
mkdir -p "$root"
t_start=$(date +%s)
check() {  # $1 name, $2 shape, then --fix arguments
  local name=$1 shape=$2 t0; shift 2
  [ "$SAMPLE" -gt 0 ] || return
  t0=$(date +%s)
  timeout "${MEASURE_S:-45}" python3 -m bocast.cli measure gemm --shape "$shape" --space v3 \
    --sample "$SAMPLE" "$@" --seed 1 --store "$root/${name}_${shape//,/x}.db" --json \
    > "$root/${name}_${shape//,/x}.log" 2>&1
  echo "measure $name gemm $shape: exit $? in $(( $(date +%s) - t0 )) s"
}
DEEP=(--fix stages=8 --fix stages=10 --fix stages=12 --fix stages=16)
check deep 100,1000,4040 "${DEEP[@]}"
check deep 16,6144,4096 "${DEEP[@]}"
tar -czf "$OUT/skinny_next.tar.gz" --exclude='*.db-wal' --exclude='*.db-shm' "$root"
if [ -n "$JOBS" ]; then
  BUDGET_S=$(( BUDGET_S - ($(date +%s) - t_start) )) JOBS=$JOBS SEARCH_S=${SEARCH_S:-45} \
    RUN_S=${RUN_S:-70} bash experiments/device/parallel_tunes.sh > "$OUT/tunes.txt" 2>&1
fi
python3 - "$root" <<'PY'
import glob, json, os, sys
from collections import Counter
sys.path.insert(0, "experiments/device")
from store_rows import store, worst_ok  # noqa: E402
root = sys.argv[1]
print("| check | shape | stages | split_reduce | statuses | worst ok rel_error |")
print("| --- | --- | --- | --- | --- | --- |")
for db in sorted(glob.glob(f"{root}/*.db")):
    w, _, rows = store(db)
    name = os.path.basename(db).split("_")[0]
    print(f"| {name} | {','.join(map(str, w.get('shape', [])))} | "
          f"{sorted({c['stages'] for c, _, _ in rows})} | "
          f"{dict(Counter(c.get('split_reduce') for c, _, _ in rows))} | "
          f"{dict(Counter(st for _, st, _ in rows))} | {worst_ok(rows)} |")
    for c, st, _ in rows:
        if st != "ok":
            print(f"not ok: {st} {json.dumps(c, sort_keys=True)}")
PY
[ -f "$OUT/tunes.txt" ] && tail -n 12 "$OUT/tunes.txt"
