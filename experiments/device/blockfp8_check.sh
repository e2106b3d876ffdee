#!/usr/bin/env bash
# On the GPU machine (device tool, carry .devbundle; `bash experiments/device/lean_tree.sh out`
# first if the carry is too large): space v3's fp8 GEMM with block scales (issue 39: dtype
# e4m3b128, DeepSeek-V3's 1x128 activation and 128x128 weight scales, DeepGEMM's promotion).
# 1. Correctness on a ragged shape: SAMPLE random v3 configurations of GEMM 1000,1008,1040 in
#    e4m3b128:bf16 and SAMPLE_FP32 in e4m3b128:fp32 (M = 1000: a partial block row; N = 1008: a
#    partial 128-column scale block; K = 1040: a partial last k block), each built, run and
#    checked against the float64 product of the dequantized inputs (tolerance 2e-2).
# 2. Which vendor call takes block scales here (bocast/space/operators/_block_fp8.py: vendor_calls),
# each
#    timed on its own at SHAPE, with its error against the float64 reference at 1000,1008,1040.
# 3. The default command, cold (an empty records library, --warm-start none), seed 0:
#    `bocast tune gemm --shape SHAPE --dtype e4m3b128:bf16 --trials TRIALS`, which times the
#    first vendor call that runs and ends by re-timing its best kernels interleaved with it.
# One table last: best TFLOPS, the reference's TFLOPS and name, their ratio, the fraction of the
# 1979 TFLOPS dense fp8 peak, statuses and errors.
#   bash experiments/device/blockfp8_check.sh     # defaults: under 300 s on a 16-core H200
#   (each measure at most MEASURE_S=36 s, the vendor calls 60; the tune searches SEARCH_S=110 s,
#   killed at RUN_S=150)
#   SHAPE=4096,4096,4096 TRIALS=96 SEARCH_S=300 RUN_S=360 bash experiments/device/blockfp8_check.sh
# Everything lands under $OUT (blockfp8_check.tar.gz: logs, records, summaries).
set -uo pipefail
source .devbundle/unpack.sh
export BOCAST_GIT_SHA=${BOCAST_GIT_SHA:-unknown}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
echo "cores $(nproc); $(nvcc --version | tail -1); torch $(python3 -c 'import torch; print(torch.__version__, torch.version.cuda)')"
SHAPE=${SHAPE:-4096,7168,16384} TRIALS=${TRIALS:-64} SAMPLE=${SAMPLE:-10} SAMPLE_FP32=${SAMPLE_FP32:-4}
MEASURE_S=${MEASURE_S:-36}
root=runs/blockfp8_check
mkdir -p "$root"

for pair in "e4m3b128:bf16 $SAMPLE" "e4m3b128:fp32 $SAMPLE_FP32"; do
  read -r dtype n <<< "$pair"
  [ "$n" -gt 0 ] || continue
  name=measure_1000x1008x1040_${dtype//:/_}
  timeout "$MEASURE_S" python3 -m bocast.cli measure gemm --shape 1000,1008,1040 \
    --dtype "$dtype" --space v3 --sample "$n" --max-seconds $(( MEASURE_S - 8 )) --seed 0 \
    --store "$root/$name.db" --json > "$root/$name.log" 2>&1
  echo "measure gemm 1000,1008,1040 $dtype v3 ($n configurations): exit $?"
  tail -2 "$root/$name.log"
done

# the vendor calls one by one: which runs, how fast at SHAPE, how exact at the ragged shape
timeout 60 python3 - "$SHAPE" <<'PY' > "$root/vendor.json" 2> "$root/vendor.err"
import json, sys
import torch
from bocast.measure.gpu_worker import make_inputs, rel_error
from bocast.measure.timing import time_callable
from bocast.space.operators.operator import make_named
from bocast.space.operators import _block_fp8 as bf

rows = []
for shape, timed in (("1000,1008,1040", False), (sys.argv[1], True)):
    op = make_named("gemm", tuple(int(x) for x in shape.split(",")), dtype="e4m3b128:bf16")
    t = make_inputs(op, 0)
    a, b, sa, sb = (t[n] for n in ("A", "B", "scale_a", "scale_b"))
    ref = op.reference(a, b, sa, sb) if not timed else None
    for name, call in bf.vendor_calls(a, b.t(), sa, sb, torch.bfloat16):
        row = {"shape": shape, "call": name.split(" (")[0]}
        try:
            out = call()
            torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001 - what failed is the finding
            rows.append(row | {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"})
            continue
        if ref is not None:
            row["rel_error"] = rel_error(out, ref)
        if timed:
            timing = time_callable(call, warmup_ms=50, repeats=20, l2="warm")
            row["tflops"] = op.flops / (timing["latency_ms"] * 1e-3) / 1e12
        rows.append(row)
    del t, a, b, ref
    torch.cuda.empty_cache()
print(json.dumps(rows))
PY
echo "vendor calls: exit $?"; tail -3 "$root/vendor.err"

out=$root/gemm_${SHAPE//,/x}_e4m3b128_bf16
mkdir -p "$out"
t0=$(date +%s)
BOCAST_RECORDS=$(mktemp -d) timeout "${RUN_S:-150}" python3 -m bocast.cli tune gemm \
  --shape "$SHAPE" --dtype e4m3b128:bf16 --trials "$TRIALS" --seconds "${SEARCH_S:-110}" \
  --seed 0 --warm-start none --output "$out" --json > "$out/tune.log" 2>&1
echo "gemm $SHAPE e4m3b128:bf16: exit $? in $(( $(date +%s) - t0 )) s"

python3 - "$root" <<'PY'
import glob, json, os, sys
from collections import Counter
root = sys.argv[1]
PEAK = 1979.0  # dense fp8 TFLOPS, H100/H200 SXM (132 SMs x 1.83 GHz x 8192 FLOP/clk)
sys.path.insert(0, "experiments/device")
from store_rows import store, worst_ok  # noqa: E402

print("| store | dtype | status by bm x bn | worst ok rel_error |")
print("| --- | --- | --- | --- |")
for db in sorted(glob.glob(f"{root}/measure_*.db")):
    w, _, rows = store(db)
    by = Counter((f"{c['bm']}x{c['bn']}", st) for c, st, _ in rows)
    print(f"| {os.path.basename(db)} | {w.get('dtype')} | "
          f"{', '.join(f'{t} {st} {n}' for (t, st), n in sorted(by.items()))} | {worst_ok(rows)} |")
print()
try:
    vendor = json.load(open(f"{root}/vendor.json"))
except (OSError, ValueError):
    vendor = []
if vendor:
    print("| shape | vendor call | TFLOPS | rel_error vs float64 | error |")
    print("| --- | --- | --- | --- | --- |")
    for v in vendor:
        tf = f"{v['tflops']:.1f}" if "tflops" in v else ""
        err = f"{v['rel_error']:.2e}" if "rel_error" in v else ""
        print(f"| {v['shape']} | {v['call']} | {tf} | {err} | {v.get('error', '')} |")
    print()
print("| shape | dtype | trials | figure | best TFLOPS | reference TFLOPS | best / reference | "
      "best / 1979 peak | statuses | worst ok rel_error | reference rel_error | reference | "
      "best config |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for out in sorted(glob.glob(f"{root}/gemm_*/")):
    if not os.path.exists(f"{out}summary.json"):
        print(f"| {out} | no summary: see tune.log |")
        print("".join(open(f"{out}tune.log").readlines()[-5:]) if os.path.exists(
            f"{out}tune.log") else "")
        continue
    s = json.load(open(f"{out}summary.json"))
    w, ref, rows = store(f"{out}records.db")
    best = s.get("best_tflops") or 0
    print(f"| {','.join(map(str, w.get('shape', [])))} | {w.get('dtype')} | {s.get('trials')} | "
          f"{s.get('figure')} | {best:.1f} | {s.get('reference_tflops') or 0:.1f} | "
          f"{s.get('best_vs_reference') or 0:.3f} | {best / PEAK:.3f} | {s.get('status')} | "
          f"{worst_ok(rows)} | {ref.get('rel_error')} | {ref.get('what')} | "
          f"{json.dumps(s.get('best_config'))} |")
PY
tar -czf "$OUT/blockfp8_check.tar.gz" --exclude='*.db-wal' --exclude='*.db-shm' "$root"
