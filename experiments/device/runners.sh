#!/usr/bin/env bash
# On the GPU machine (device tool, carry .devbundle): the local runner's paths after runners
# declared what they are (bocast/measure/kinds.py: the commands ask a runner's class, not its
# name). Each case runs once, cold (an empty records library but where said, --warm-start none):
# 1. tune:    `bocast tune gemm --shape 4096,4096,4096 --trials 16` (the local GPU: needs_gpu,
#             compiles; space v3 on this GPU's SM count)
# 2. object:  bocast.tune(..., runner=make_runner("local", ...)) (a GpuRunner object: the
#             same decisions from its class), 8 trials
# 3. measure: `bocast measure gemm --shape 4096,4096,4096 --space v3 --sample 8` (local)
# 4. class:   `--runner wave_model_runner:WaveModelRunner` (examples/extending: no GPU used,
#             no nvcc, synthetic: its store stays out of the library), 8 trials
# One table last: case, exit, trials, best TFLOPS, best / reference, runner recorded, the
# workload's sm_count, library copy.
#   bash experiments/device/runners.sh     # about 3 minutes on a 16-core H200
# Everything lands under $OUT (runners.tar.gz: logs, records, summaries).
set -uo pipefail
source .devbundle/unpack.sh
export BOCAST_GIT_SHA=${BOCAST_GIT_SHA:-unknown}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "cores $(nproc); $(nvcc --version | tail -1)"
root=runs/runners
rm -rf "$root"
mkdir -p "$root"
SHAPE=4096,4096,4096

run() {  # name, timeout, command...
  local name=$1 limit=$2
  shift 2
  mkdir -p "$root/$name"
  local t0=$(date +%s)
  BOCAST_RECORDS="$root/$name/library" timeout "$limit" "$@" > "$root/$name/log" 2>&1
  local code=$?
  echo "$code" > "$root/$name/exit"
  echo "$name: exit $code in $(( $(date +%s) - t0 )) s"
  tail -3 "$root/$name/log"
}

run tune 200 python3 -m bocast.cli tune gemm --shape $SHAPE --trials 16 --batch-size 8 \
  --seed 0 --warm-start none --output "$root/tune/out" --json
run object 160 python3 - "$root/object/out" <<'PY'
import sys
import bocast
from bocast.measure.parts import make_runner

if __name__ == "__main__":
    with make_runner("local", timeout_s=30.0, repeats=10) as runner:
        r = bocast.tune(op="gemm", shape=(4096, 4096, 4096), runner=runner, trials=8,
                        batch_size=8, warm_start="none", output=sys.argv[1])
    print(r.trials, r.best_tflops)
PY
run measure 120 python3 -m bocast.cli measure gemm --shape $SHAPE --space v3 --sample 8 \
  --seed 0 --store "$root/measure/out.db" --json
export PYTHONPATH="$PWD/examples/extending:${PYTHONPATH:-}"  # the example runner's module
run class 120 python3 -m bocast.cli tune gemm \
  --shape $SHAPE --runner wave_model_runner:WaveModelRunner --trials 8 --batch-size 8 \
  --seed 0 --warm-start none --output "$root/class/out" --json

python3 - "$root" <<'PY'
import json, os, sqlite3, sys
sys.path.insert(0, "experiments/device")
from store_rows import store  # noqa: E402
root = sys.argv[1]
print()
print("| case | exit | ok rows | best TFLOPS | best / reference | runner recorded | sm_count | "
      "library copy |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
for case in ("tune", "object", "measure", "class"):
    d = os.path.join(root, case)
    code = open(os.path.join(d, "exit")).read().strip()
    db = os.path.join(d, "out.db") if case == "measure" else os.path.join(d, "out", "records.db")
    path = os.path.join(d, "out", "summary.json")
    summary = json.load(open(path)) if os.path.exists(path) else {}
    if not os.path.exists(db):
        print(f"| {case} | {code} | no store: see {d}/log |")
        continue
    w, ref, rows = store(db, tflops=True)
    con = sqlite3.connect(db)
    last = con.execute("select provenance from sessions order by id desc limit 1").fetchone()
    con.close()
    runner = json.loads(last[0]).get("runner") if last else None
    ok = [r[3] for r in rows if r[1] == "ok" and r[3]]
    best = max(ok, default=0.0)
    ratio = best / ref["tflops"] if ref.get("tflops") else None
    print(f"| {case} | {code} | {len(ok)} of {len(rows)} | {best:.1f} | "
          f"{f'{ratio:.3f}' if ratio else '-'} | {runner} | {w.get('sm_count')} | "
          f"{summary.get('library_copy', '-')} |")
PY
tar -czf "$OUT/runners.tar.gz" --exclude='*.db-wal' --exclude='*.db-shm' "$root"
