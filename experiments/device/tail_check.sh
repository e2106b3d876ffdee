#!/usr/bin/env bash
# On the GPU machine (device tool, carry .devbundle; `bash experiments/device/lean_tree.sh out`
# first), written 2026-11-29 (twenty-first session): tail_split (_hopper_tail: a persistent
# walk's last, partial round cut into k slices that add into an output slice 0 zeroes first).
# 1. Correctness: random tail_split configurations (2, 4, 8; every other knob free: epilogues,
#    ping-pong, ring depths) of GEMMs and a bmm with a partial last round, each built, run and
#    compared with the reference by the runner (`bocast measure --sample`); expectation: all ok.
# 2. Across launches (tail_relaunch.py): sampled tail kernels relaunched into a NaN-poisoned
#    output, each launch checked, the flags read back (all 0), then a burst and a last check.
# 3. The picks of skinny_picks.py's set tail, re-timed beside cuBLAS (its expectation there).
# A wrong result, a hang or a flag left non-zero is a bug, and no timing of section 3 counts.
#   BOCAST_GIT_SHA=<sha> bash experiments/device/tail_check.sh     # about 5 minutes
set -uo pipefail
source .devbundle/unpack.sh
export BOCAST_GIT_SHA=${BOCAST_GIT_SHA:-unknown}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
SAMPLE=${SAMPLE:-16} EACH_S=${EACH_S:-20}
root=runs/tail_check
mkdir -p "$root"
TAILS="--fix tail_split=2 --fix tail_split=4 --fix tail_split=8"
while IFS='|' read -r name op shape dtype; do
  [ -z "$name" ] && continue
  t0=$(date +%s)
  # shellcheck disable=SC2086
  timeout $(( EACH_S + 25 )) python3 -m bocast.cli measure "$op" --shape "$shape" \
    --dtype "$dtype" --space v3 --sample "$SAMPLE" $TAILS --seed 0 \
    --max-seconds "$EACH_S" --store "$root/$name.db" --json > "$root/$name.log" 2>&1
  echo "$name: exit $? in $(( $(date +%s) - t0 )) s"
done <<EOT
gemm_2048x28672x8192|gemm|2048,28672,8192|fp16:fp32
gemm_8192x4096x4096|gemm|8192,4096,4096|fp16:fp32
gemm_ragged|gemm|1000,3000,2048|fp16:fp32
gemm_bf16|gemm|2048,4096,4096|bf16:fp32
gemm_fp8|gemm|2048,4096,4096|e4m3:fp32
bmm|bmm|12,512,512,1024|fp16:fp32
EOT
t0=$(date +%s)
timeout 150 python3 experiments/device/tail_relaunch.py "$root/relaunch.json" \
  "2048,28672,8192 1000,3000,2048" > "$root/relaunch.txt" 2> "$root/relaunch.log"
echo "relaunch: exit $? in $(( $(date +%s) - t0 )) s"
tar -czf "$OUT/tail_check.tar.gz" --exclude='*.db-wal' --exclude='*.db-shm' "$root"
SET=tail bash experiments/device/picks_remeasure.sh > "$OUT/tail_picks.txt" 2>&1
python3 - "$root" <<'PY'
import glob, json, sys
from collections import Counter
sys.path.insert(0, "experiments/device")
from store_rows import store, worst_ok  # noqa: E402

print("| check | tail_split measured | statuses | worst ok rel_error |")
print("| --- | --- | --- | --- |")
bad = []
for db in sorted(glob.glob(f"{sys.argv[1]}/*.db")):
    w, _, rows = store(db)
    tails = Counter(c.get("tail_split", 1) for c, _, _ in rows)
    print(f"| {db.split('/')[-1][:-3]} {w.get('dtype')} | {dict(sorted(tails.items()))} | "
          f"{dict(Counter(st for _, st, _ in rows))} | {worst_ok(rows)} |")
    bad += [(w.get("shape"), st, c) for c, st, _ in rows if st != "ok"]
for shape, st, c in bad:
    print(f"not ok: {shape} {st} {json.dumps(c, sort_keys=True)}")
PY
cat "$root/relaunch.txt"; tail -n 3 "$root/relaunch.log"
tail -n 20 "$OUT/tail_picks.txt"
