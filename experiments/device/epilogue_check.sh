#!/usr/bin/env bash
# On the GPU machine (device tool, carry .devbundle; `bash experiments/device/lean_tree.sh out`
# first if the carry is too large): space v3's fused epilogue (issue 39 item 4, workload field
# `fuse`: act(scale (A B^T) + bias) on the accumulators before the output's rounding).
# 1. Correctness on a ragged shape, each activation: SAMPLE random v3 configurations of GEMM
#    1000,1008,1008 with bias+gelu in bf16:bf16, bias+relu in e4m3:bf16 (after the fp8
#    scales), bias+silu in fp16:fp16, and gelu without a bias in bf16:fp32, each built, run
#    and checked against the float64 reference (tolerance by dtype, docs/operators.md).
# 2. The default command, cold (an empty records library, --warm-start none), seed 0:
#    `bocast tune gemm --shape S --dtype bf16:bf16 --fuse bias+gelu --trials TRIALS` for each
#    S in SHAPES (2048,14336,4096: an LLM's MLP up projection; 4096,4096,4096); each run times
#    the unfused torch sequence (torch.mm in bf16, + bias, F.gelu, each in bf16) as its
#    reference and ends by re-timing its best kernels interleaved with it in one process.
# 3. Context, timed as the runner times references (CUDA graph) on the same inputs: torch.mm
#    alone (the GEMM without its epilogue) and F.linear(a, w, bias) then F.gelu (cuBLASLt's
#    bias epilogue, one kernel fewer than the reference), with their errors.
# One table last: best tuned kernel, the unfused sequence, their ratio, and the context bars.
#   bash experiments/device/epilogue_check.sh   # defaults: under 400 s on a 16-core H200
#   (each measure at most MEASURE_S=24 s; each tune searches SEARCH_S=95 s, killed at RUN_S=128;
#   the context at most 28 s: 380 s at most in all)
#   SHAPES="4096,4096,4096" SEARCH_S=200 RUN_S=240 bash experiments/device/epilogue_check.sh
# Everything lands under $OUT (epilogue_check.tar.gz: logs, records, summaries).
set -uo pipefail
source .devbundle/unpack.sh
export BOCAST_GIT_SHA=${BOCAST_GIT_SHA:-unknown}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
echo "cores $(nproc); $(nvcc --version | tail -1); torch $(python3 -c 'import torch; print(torch.__version__)')"
SHAPES=${SHAPES:-"2048,14336,4096 4096,4096,4096"}
TRIALS=${TRIALS:-64} SAMPLE=${SAMPLE:-6} MEASURE_S=${MEASURE_S:-24}
root=runs/epilogue_check
mkdir -p "$root"

for case in "bias+gelu bf16:bf16" "bias+relu e4m3:bf16" "bias+silu fp16:fp16" "gelu bf16:fp32"; do
  read -r fuse dtype <<< "$case"
  [ "$SAMPLE" -gt 0 ] || break
  name=measure_1000x1008x1008_${fuse//+/_}_${dtype//:/_}
  timeout "$MEASURE_S" python3 -m bocast.cli measure gemm --shape 1000,1008,1008 \
    --dtype "$dtype" --fuse "$fuse" --space v3 --sample "$SAMPLE" \
    --max-seconds $(( MEASURE_S - 8 )) --seed 0 --store "$root/$name.db" --json \
    > "$root/$name.log" 2>&1
  echo "measure gemm 1000,1008,1008 $dtype --fuse $fuse ($SAMPLE configurations): exit $?"
  tail -2 "$root/$name.log"
done

for shape in $SHAPES; do
  out=$root/gemm_${shape//,/x}_bf16_bias_gelu
  mkdir -p "$out"
  t0=$(date +%s)
  BOCAST_RECORDS=$(mktemp -d) timeout "${RUN_S:-128}" python3 -m bocast.cli tune gemm \
    --shape "$shape" --dtype bf16:bf16 --fuse bias+gelu --trials "$TRIALS" \
    --seconds "${SEARCH_S:-95}" --seed 0 --warm-start none --output "$out" --json \
    > "$out/tune.log" 2>&1
  echo "gemm $shape bf16:bf16 bias+gelu: exit $? in $(( $(date +%s) - t0 )) s"
done

# the context bars, timed as the runner times references, on the runner's inputs (seed 0)
timeout 28 python3 - $SHAPES <<'PY' > "$root/context.json" 2> "$root/context.err"
import json, sys
import torch
import torch.nn.functional as F
from bocast.measure.gpu_worker import make_inputs, rel_error
from bocast.measure.timing import time_callable
from bocast.space.operators.operator import make_named

rows = []
for shape in sys.argv[1:]:
    op = make_named("gemm", tuple(int(x) for x in shape.split(",")), dtype="bf16:bf16",
                    fuse="bias+gelu")
    t = make_inputs(op, 0)
    a, w, bias = t["A"], t["B"], t["bias"]
    ref = op.reference(a, w, bias)
    calls = {"unfused: torch.mm, + bias, F.gelu (the reference)": lambda: op.reference_fast(a, w, bias),
             "F.linear(a, w, bias), F.gelu (cuBLASLt bias epilogue)":
                 lambda: F.gelu(F.linear(a, w, bias)),
             "torch.mm alone (no epilogue)": lambda: torch.mm(a, w.t())}
    for what, call in calls.items():
        timing = time_callable(call, warmup_ms=50, repeats=20, l2="warm")
        err = rel_error(call(), ref) if "alone" not in what else None
        rows.append({"shape": shape, "what": what, "rel_error": err,
                     "latency_ms": timing["latency_ms"],
                     "tflops": op.flops / (timing["latency_ms"] * 1e-3) / 1e12})
print(json.dumps(rows))
PY
echo "context: exit $?"; tail -3 "$root/context.err"

python3 - "$root" <<'PY'
import glob, json, os, sqlite3, sys
from collections import Counter
root = sys.argv[1]


sys.path.insert(0, "experiments/device")
from store_rows import store, worst_ok  # noqa: E402




print("| store | dtype | fuse | status by epilogue knob | worst ok rel_error | reference rel_error |")
print("| --- | --- | --- | --- | --- | --- |")
for db in sorted(glob.glob(f"{root}/measure_*.db")):
    w, ref, rows = store(db)
    by = Counter((c["epilogue"], st) for c, st, _ in rows)
    print(f"| {os.path.basename(db)} | {w.get('dtype')} | {w.get('fuse')} | "
          f"{', '.join(f'{e} {st} {n}' for (e, st), n in sorted(by.items()))} | "
          f"{worst_ok(rows)} | {ref.get('rel_error')} |")
print()
try:
    context = json.load(open(f"{root}/context.json"))
except (OSError, ValueError):
    context = []
bars = {}
if context:
    print("| shape | torch call | TFLOPS (2MNK / time) | rel_error vs float64 |")
    print("| --- | --- | --- | --- |")
for c in context:
    print(f"| {c['shape']} | {c['what']} | {c['tflops']:.1f} | {c['rel_error']} |")
    bars.setdefault(c["shape"], {})[c["what"].split(":")[0].split(" (")[0]] = c
print()
print("| shape | fuse | trials | best TFLOPS | unfused torch TFLOPS | best / unfused | "
      "F.linear+gelu TFLOPS | best / F.linear+gelu | torch.mm alone TFLOPS | statuses | "
      "worst ok rel_error | reference | best config |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for out in sorted(glob.glob(f"{root}/gemm_*/")):
    if not os.path.exists(f"{out}summary.json"):
        print(f"| {out} | no summary: see tune.log |")
        print("".join(open(f"{out}tune.log").readlines()[-5:]) if os.path.exists(
            f"{out}tune.log") else "")
        continue
    s = json.load(open(f"{out}summary.json"))
    w, ref, rows = store(f"{out}records.db")
    shape = ",".join(map(str, w.get("shape", [])))
    best = s.get("best_tflops") or 0
    linear = bars.get(shape, {}).get("F.linear(a, w, bias), F.gelu", {}).get("tflops")
    mm = bars.get(shape, {}).get("torch.mm alone", {}).get("tflops")
    print(f"| {shape} | {w.get('fuse')} | {s.get('trials')} | {best:.1f} | "
          f"{s.get('reference_tflops') or 0:.1f} | {s.get('best_vs_reference') or 0:.3f} | "
          f"{linear or 0:.1f} | {best / linear if linear else 0:.3f} | {mm or 0:.1f} | "
          f"{s.get('status')} | {worst_ok(rows)} | {ref.get('what', '')} | "
          f"{json.dumps(s.get('best_config'))} |")
PY
tar -czf "$OUT/epilogue_check.tar.gz" --exclude='*.db-wal' --exclude='*.db-shm' "$root"
