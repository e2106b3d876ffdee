#!/usr/bin/env bash
# On the GPU machine (device tool, carry .devbundle; `bash experiments/device/lean_tree.sh out`
# first if the carry is too large): conv2d_transpose on space v3, the stride x stride phase
# decomposition (issue 38 item 2, bocast/space/operators/_hopper_tconv.py).
# 1. Correctness: SAMPLE random v3 configurations (seed 0) of each of two ragged, odd shapes,
#    each built, run and checked against the float64 reference (`bocast measure --sample`):
#      4x4 stride 2 pad 1           (every phase 2x2 taps)
#      3x3 stride 2 pad 1 out_pad 1 (phases of 2x2, 2x1, 1x2, 1x1 taps: each skips the k
#                                    blocks past its own, stages completed with no bytes)
#    odd input extents (13 x 11: a phase's 13 x 11 sub-output cut by power-of-two pixel
#    tiles), K = 96 / 80 (ragged against BN 64 and 128); and a 1x1 stride 2 (output_padding 1)
#    whose phases without a tap of their own run one whose weight box lies wholly past R and S
#    (TMA's zero fill: the mbarrier must still receive the whole box's bytes).
# 2. The default command, cold, --space v3 (v2 stays space auto's choice until measured):
#      bocast tune conv2d_transpose --shape S --space v3 --trials TRIALS --warm-start none
#    (an empty records library, seed 0, cut at RUN_S) on a decoder layer in no configuration,
#    dataset or test of the project:
#      16,32,32,512,128,4,4,2,1,1,0   pix2pix's U-Net generator (unet_256, ngf = 64; Isola et
#                                      al. 2017, junyanz/pytorch-CycleGAN-and-pix2pix): the
#                                      up-sampling ConvTranspose2d(512, 128, 4, 2, 1) of the
#                                      block at 32 x 32 (256 decoder + 256 skip channels in,
#                                      64 x 64 x 128 out), batch 16
#    cuDNN (torch.nn.functional.conv_transpose2d, fp16 channels-last, the operator's
#    reference_fast) timed by the run.
# 3. The reference itself: reference_fast passes W[K,R,S,C] as torch's [C,K,R,S] view, which is
#    not channels-last for torch's transposed weight ([C,K,R,S] channels-last is K innermost),
#    so torch may copy the weight on every call; timed here (bocast's time_callable, warm L2)
#    as bocast times it and with the weight laid out once, channels-last, outside the timing.
# Tables last: per sample store, statuses and worst error; per tune, best / cuDNN (re-timed if
# the run finished), and the reference both ways.
#   bash experiments/device/tconv_check.sh      # defaults: under 300 s on a 16-core H200
#   SAMPLE=0 TRIALS=128 RUN_S=400 bash experiments/device/tconv_check.sh   # a longer tune alone
#   SPACES="v3 v2" RUN_S=120 bash experiments/device/tconv_check.sh        # v2 beside it
# Everything lands under $OUT (tconv_check.tar.gz: logs, records, summaries).
set -uo pipefail
source .devbundle/unpack.sh
export BOCAST_GIT_SHA=${BOCAST_GIT_SHA:-unknown}
t_start=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
echo "cores $(nproc); $(nvcc --version | tail -1)"
SAMPLE=${SAMPLE:-6} TRIALS=${TRIALS:-64} RUN_S=${RUN_S:-130} MEASURE_S=${MEASURE_S:-35}
CHECKS=${CHECKS:-"8,13,11,128,96,4,4,2,1,1,0 8,13,11,64,80,3,3,2,1,1,1 4,13,11,64,64,1,1,2,0,1,1"}
TUNES=${TUNES:-"16,32,32,512,128,4,4,2,1,1,0"}
SPACES=${SPACES:-v3}
root=runs/tconv_check
mkdir -p "$root"

if [ "$SAMPLE" -gt 0 ]; then
  for shape in $CHECKS; do
    name=measure_${shape//,/x}
    t0=$(date +%s)
    timeout "$MEASURE_S" python3 -m bocast.cli measure conv2d_transpose --shape "$shape" \
      --space v3 --sample "$SAMPLE" --seed 0 --store "$root/$name.db" --json \
      > "$root/$name.log" 2>&1
    echo "measure conv2d_transpose $shape v3 ($SAMPLE configurations): exit $? in" \
         "$(( $(date +%s) - t0 )) s"
    tail -1 "$root/$name.log" | cut -c1-300
  done
fi

for shape in $TUNES; do
  for space in $SPACES; do
    out=$root/tune_${shape//,/x}_${space}
    mkdir -p "$out"
    t0=$(date +%s)
    BOCAST_RECORDS=$(mktemp -d) timeout "$RUN_S" python3 -m bocast.cli tune conv2d_transpose \
      --shape "$shape" --space "$space" --trials "$TRIALS" --seed 0 --warm-start none \
      --output "$out" --json > "$out/tune.log" 2>&1
    echo "tune conv2d_transpose $shape $space: exit $? in $(( $(date +%s) - t0 )) s"
  done
done

timeout 60 python3 - "$root" $TUNES <<'PY' > "$root/reference.txt" 2>&1
import json, sys
import torch
from bocast.measure.gpu_worker import make_inputs
from bocast.measure.timing import time_callable
from bocast.space.operators.operator import make

rows = []
for shape in sys.argv[2:]:
    op = make("conv2d_transpose", tuple(int(v) for v in shape.split(",")), space="v2")
    ins = make_inputs(op, 0)
    x, w = ins["X"], ins["W"]
    xt, wt, kw = op._torch_args(x, w)
    wt_cl = wt.contiguous(memory_format=torch.channels_last)  # once, outside the timing
    fn = torch.nn.functional.conv_transpose2d
    diff = float((fn(xt, wt, **kw).float() - fn(xt, wt_cl, **kw).float()).abs().max())
    how = dict(warmup_ms=50, repeats=20)
    as_timed = time_callable(lambda: op.reference_fast(x, w), **how)["latency_ms"]
    laid_out = time_callable(lambda: fn(xt, wt_cl, **kw), **how)["latency_ms"]
    rows.append({"shape": shape, "weight_view_channels_last": wt.is_contiguous(
        memory_format=torch.channels_last), "max_abs_diff": diff,
        "reference_fast_ms": as_timed, "weight_laid_out_ms": laid_out,
        "reference_fast_tflops": op.flops / as_timed / 1e9,
        "weight_laid_out_tflops": op.flops / laid_out / 1e9})
print(json.dumps(rows))
PY
echo "reference timing: exit $?"; tail -3 "$root/reference.txt"

python3 - "$root" "$TRIALS" <<'PY'
import glob, json, os, sys
from collections import Counter
root, trials = sys.argv[1], int(sys.argv[2])

sys.path.insert(0, "experiments/device")
from store_rows import store, worst_ok  # noqa: E402

print("| sample store | statuses | worst ok rel_error | best TFLOPS | cuDNN TFLOPS |")
print("| --- | --- | --- | --- | --- |")
for db in sorted(glob.glob(f"{root}/measure_*.db")):
    w, ref, rows = store(db, tflops=True)
    ok = [tf for _, st, _, tf in rows if st == "ok" and tf]
    print(f"| {','.join(map(str, w.get('shape', [])))} | {dict(Counter(r[1] for r in rows))} | "
          f"{worst_ok(rows)} | {max(ok, default=0):.1f} | {ref.get('tflops') or 0:.1f} |")
try:
    refs = {r["shape"]: r for r in json.loads(open(f"{root}/reference.txt").read().splitlines()[-1])}
except (OSError, ValueError, IndexError):
    refs = {}
print()
print("| shape | space | trials | best TFLOPS | cuDNN TFLOPS | best / cuDNN | cuDNN, weight laid "
      "out once: TFLOPS (best / it) | statuses | worst ok rel_error |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for out in sorted(glob.glob(f"{root}/tune_*/")):
    if not os.path.exists(f"{out}records.db"):
        print(f"| {out} | no store: see tune.log |")
        continue
    w, ref, rows = store(f"{out}records.db", tflops=True)
    s = json.load(open(f"{out}summary.json")) if os.path.exists(f"{out}summary.json") else {}
    best_tf = max((tf for _, st, _, tf in rows if st == "ok" and tf), default=0.0)
    ref_tf = s.get("reference_tflops") or ref.get("tflops") or 0
    # a finished run's figure is its re-timing (best and reference paired); a cut run's the
    # in-run best over the reference it recorded
    fig, ratio, how = (s["best_tflops"], s["best_vs_reference"], "re-timed") if s.get(
        "best_tflops") else (best_tf, best_tf / ref_tf if ref_tf else 0, "in-run")
    cut = "" if s else f" (cut at {len(rows)} of {trials}: no summary)"
    shape = ",".join(map(str, w.get("shape", [])))
    ref_row = refs.get(shape)
    laid = "not timed"
    if ref_row:
        once = ref_row["weight_laid_out_tflops"]
        laid = (f"{once:.1f} ({fig / once:.3f}); reference_fast here "
                f"{ref_row['reference_fast_tflops']:.1f}")
    print(f"| {shape} | {w.get('space')} | {len(rows)}{cut} | {fig:.1f} ({how}) | {ref_tf:.1f} | "
          f"{ratio:.3f} | {laid} | {dict(Counter(r[1] for r in rows))} | {worst_ok(rows)} |")
PY
tar -czf "$OUT/tconv_check.tar.gz" --exclude='*.db-wal' --exclude='*.db-shm' "$root"
echo "total $(( $(date +%s) - t_start )) s"
