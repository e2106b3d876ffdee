#!/usr/bin/env bash
# On the GPU machine (device tool, carry .devbundle; `bash experiments/device/lean_tree.sh out`
# first if the carry is too large): space v3's fp8 GEMM (issue 39: e4m3 with per-tensor scales).
# 1. Correctness on a ragged shape: SAMPLE random v3 configurations of GEMM 1000,1008,1008 in
#    e4m3:bf16, SAMPLE_FP32 in e4m3:fp32 and SAMPLE_E5M2 in e5m2xe4m3:bf16 (A in e5m2), each
#    built, run and checked against the float64 product of the dequantized fp8 inputs
#    (tolerance 2e-2, docs/operators.md).
# 2. The default command, cold (an empty records library, --warm-start none), seed 0:
#    `bocast tune gemm --shape S --dtype e4m3:bf16 --trials TRIALS` for each S in SHAPES; each
#    run times torch._scaled_mm (cuBLASLt, same tensors and scales, out_dtype bfloat16, fast
#    accumulation) and ends by re-timing its best kernels interleaved with it in one process.
# 3. torch._scaled_mm without fast accumulation (its default, which promotes the sums to fp32
#    every few k blocks) timed the same way at each shape, with both modes' errors against the
#    float64 reference: what the baseline's choice costs and buys.
# One table last: best TFLOPS, _scaled_mm's, their ratio, the fraction of the 1979 TFLOPS dense
# fp8 peak (H100/H200 SXM).
#   bash experiments/device/fp8_check.sh     # defaults: under 540 s on a 16-core H200
#   (each measure at most MEASURE_S=40 s; each tune searches SEARCH_S=130 s, killed at RUN_S=175)
#   SHAPES="4096,4096,4096" TRIALS=96 SEARCH_S=300 RUN_S=360 bash experiments/device/fp8_check.sh
# Everything lands under $OUT (fp8_check.tar.gz: logs, records, summaries).
set -uo pipefail
source .devbundle/unpack.sh
export BOCAST_GIT_SHA=${BOCAST_GIT_SHA:-unknown}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
echo "cores $(nproc); $(nvcc --version | tail -1); torch $(python3 -c 'import torch; print(torch.__version__)')"
SHAPES=${SHAPES:-"4096,4096,4096 8192,8192,4096"}
TRIALS=${TRIALS:-64} SAMPLE=${SAMPLE:-10} SAMPLE_FP32=${SAMPLE_FP32:-5} SAMPLE_E5M2=${SAMPLE_E5M2:-4}
MEASURE_S=${MEASURE_S:-40}
root=runs/fp8_check
mkdir -p "$root"

for pair in "e4m3:bf16 $SAMPLE" "e4m3:fp32 $SAMPLE_FP32" "e5m2xe4m3:bf16 $SAMPLE_E5M2"; do
  read -r dtype n <<< "$pair"
  [ "$n" -gt 0 ] || continue
  name=measure_1000x1008x1008_${dtype//:/_}
  timeout "$MEASURE_S" python3 -m bocast.cli measure gemm --shape 1000,1008,1008 \
    --dtype "$dtype" --space v3 --sample "$n" --max-seconds $(( MEASURE_S - 8 )) --seed 0 \
    --store "$root/$name.db" --json \
    > "$root/$name.log" 2>&1
  echo "measure gemm 1000,1008,1008 $dtype v3 ($n configurations): exit $?"
  tail -2 "$root/$name.log"
done

for shape in $SHAPES; do
  out=$root/gemm_${shape//,/x}_e4m3_bf16
  mkdir -p "$out"
  t0=$(date +%s)
  BOCAST_RECORDS=$(mktemp -d) timeout "${RUN_S:-175}" python3 -m bocast.cli tune gemm \
    --shape "$shape" --dtype e4m3:bf16 --trials "$TRIALS" --seconds "${SEARCH_S:-130}" \
    --seed 0 --warm-start none --output "$out" --json > "$out/tune.log" 2>&1
  echo "gemm $shape e4m3:bf16: exit $? in $(( $(date +%s) - t0 )) s"
done

# _scaled_mm in both accumulation modes, timed as the runner times references
timeout 45 python3 - "$root" $SHAPES <<'PY' > "$root/scaled_mm_modes.json" 2> "$root/scaled_mm_modes.err"
import json, sys
import torch
from bocast.measure.gpu_worker import make_inputs, rel_error
from bocast.measure.timing import time_callable
from bocast.space.operators.operator import make_named

rows = []
for shape in sys.argv[2:]:
    op = make_named("gemm", tuple(int(x) for x in shape.split(",")), dtype="e4m3:bf16")
    t = make_inputs(op, 0)
    a, b, sa, sb = (t[n] for n in ("A", "B", "scale_a", "scale_b"))
    ref = op.reference(a, b, sa, sb)
    for fast in (True, False):
        call = lambda: torch._scaled_mm(a, b.t(), sa, sb, out_dtype=torch.bfloat16,  # noqa: E731
                                        use_fast_accum=fast)
        timing = time_callable(call, warmup_ms=50, repeats=20, l2="warm")
        rows.append({"shape": shape, "use_fast_accum": fast, "rel_error": rel_error(call(), ref),
                     "latency_ms": timing["latency_ms"],
                     "tflops": op.flops / (timing["latency_ms"] * 1e-3) / 1e12})
print(json.dumps(rows))
PY
echo "scaled_mm modes: exit $?"; tail -3 "$root/scaled_mm_modes.err"

python3 - "$root" <<'PY'
import glob, json, os, sqlite3, sys
from collections import Counter
root = sys.argv[1]
PEAK = 1979.0  # dense fp8 TFLOPS, H100/H200 SXM (132 SMs x 1.83 GHz x 8192 FLOP/clk)


sys.path.insert(0, "experiments/device")
from store_rows import store, worst_ok  # noqa: E402




print("| store | dtype | status by epilogue and bk | worst ok rel_error |")
print("| --- | --- | --- | --- |")
for db in sorted(glob.glob(f"{root}/measure_*.db")):
    w, _, rows = store(db)
    by = Counter((c["epilogue"], c["bk"], st) for c, st, _ in rows)
    print(f"| {os.path.basename(db)} | {w.get('dtype')} | "
          f"{', '.join(f'{e} bk{k} {st} {n}' for (e, k, st), n in sorted(by.items()))} | "
          f"{worst_ok(rows)} |")
print()
try:
    modes = json.load(open(f"{root}/scaled_mm_modes.json"))
except (OSError, ValueError):
    modes = []
if modes:
    print("| shape | _scaled_mm use_fast_accum | TFLOPS | rel_error vs float64 |")
    print("| --- | --- | --- | --- |")
    for m in modes:
        print(f"| {m['shape']} | {m['use_fast_accum']} | {m['tflops']:.1f} | {m['rel_error']:.2e} |")
    print()
print("| shape | dtype | trials | figure | best TFLOPS | _scaled_mm TFLOPS | best / _scaled_mm | "
      "best / 1979 peak | statuses | worst ok rel_error | _scaled_mm rel_error | best config |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
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
          f"{worst_ok(rows)} | {ref.get('rel_error')} | {json.dumps(s.get('best_config'))} |")
PY
tar -czf "$OUT/fp8_check.tar.gz" --exclude='*.db-wal' --exclude='*.db-shm' "$root"
