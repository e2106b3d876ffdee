#!/usr/bin/env bash
# On the GPU machine (device tool, carry .devbundle; `bash experiments/device/lean_tree.sh out`
# first if the carry is too large): space v3's convolutions in bf16 (issue 39 item 2).
# 1. Correctness (SAMPLE random configurations of each producer, a_load=tiled and a_load=im2col,
#    seed 0: `bocast measure --fix a_load=... --all` cut after its first batch of SAMPLE, a
#    uniform sample of the producer's sub-space) of conv2d 7,29,27,64,96,3,3,1,1,1 in each of CHECK_DTYPES: ragged everywhere (M =
#    7 x 29 x 27 output pixels, K = 96 output channels, no pixel tile covers 29 x 27), each kernel
#    built, run and checked against the float64 reference within its output type's tolerance
#    (bf16 1e-2, fp32 1e-3), and timed beside cuDNN in bf16. The tiled producer's pixel tiles
#    held to 2-8 a side, as conv_v3_check.sh does.
# 2. The default command, cold (an empty records library, --warm-start none), seed 0:
#    `bocast tune conv2d --shape S --dtype bf16:bf16 --trials TRIALS` (space auto: v3, since v2
#    has no bf16) on two stride-1 ResNet-50 layers in no configuration, dataset or test of the
#    project (their batch-32 shapes):
#      32,14,14,256,256,3,3,1,1,1   layer3's 3x3, 256 -> 256 on 14 x 14
#      32,28,28,128,128,3,3,1,1,1   layer2's 3x3, 128 -> 128 on 28 x 28
#    each timing cuDNN (torch.nn.functional.conv2d on the same channels-last bf16 tensors, bf16
#    out) in its run and re-timing best and cuDNN paired at its end.
# Tables last: per correctness store, statuses by producer, the worst ok error and the best
# TFLOPS by producer (/ cuDNN); per tune, best TFLOPS, cuDNN bf16's, best / cuDNN.
#   bash experiments/device/bf16conv_check.sh      # defaults: under 300 s on a 16-core H200
#   SAMPLE=0 RUNS="conv2d/32,14,14,256,256,3,3,1,1,1/bf16:fp32" RUN_S=250 \
#     bash experiments/device/bf16conv_check.sh
# Every step is cut to what is left of BUDGET_S; a tune cut short still counts its stored trials
# (the table says so). Everything lands under $OUT (bf16conv_check.tar.gz).
set -uo pipefail
source .devbundle/unpack.sh
export BOCAST_GIT_SHA=${BOCAST_GIT_SHA:-unknown}
t_start=$(date +%s)
BUDGET_S=${BUDGET_S:-290} TRIALS=${TRIALS:-64} RUN_S=${RUN_S:-120} MEASURE_S=${MEASURE_S:-25}
SAMPLE=${SAMPLE:-4} CHECK_SHAPE=${CHECK_SHAPE:-7,29,27,64,96,3,3,1,1,1}
CHECK_DTYPES=${CHECK_DTYPES:-"bf16:bf16"}
RUNS=${RUNS-"conv2d/32,14,14,256,256,3,3,1,1,1/bf16:bf16 conv2d/32,28,28,128,128,3,3,1,1,1/bf16:bf16"}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
echo "cores $(nproc); $(nvcc --version | tail -1)"
root=runs/bf16conv_check
mkdir -p "$root"

left() { echo $(( BUDGET_S - ($(date +%s) - t_start) )); }
cap() { local l; l=$(left); [ "$1" -lt "$l" ] && echo "$1" || echo $(( l > 0 ? l : 0 )); }

if [ "$SAMPLE" -gt 0 ]; then
  for dtype in $CHECK_DTYPES; do
    for load in tiled im2col; do
      name=measure_${CHECK_SHAPE//,/x}_${dtype//:/_}_${load}
      fix=(--fix "a_load=$load")
      [ "$load" = tiled ] && fix+=(--fix tile_w=2 --fix tile_w=4 --fix tile_w=8 --fix tile_h=2
                                   --fix tile_h=4 --fix tile_h=8)
      t0=$(date +%s)
      timeout "$(cap "$MEASURE_S")" python3 -m bocast.cli measure conv2d --shape "$CHECK_SHAPE" \
        --dtype "$dtype" --space v3 "${fix[@]}" --all --max-seconds 1 --batch "$SAMPLE" \
        --seed 0 \
        --store "$root/$name.db" --json > "$root/$name.log" 2>&1
      echo "measure conv2d $CHECK_SHAPE $dtype v3 a_load=$load ($SAMPLE): exit $? in" \
           "$(( $(date +%s) - t0 )) s"
      tail -1 "$root/$name.log" | cut -c1-300
    done
  done
fi

for run in $RUNS; do
  IFS=/ read -r op shape dtype <<< "$run"
  out=$root/tune_${op}_${shape//,/x}_${dtype//:/_}
  mkdir -p "$out"
  t0=$(date +%s)
  BOCAST_RECORDS=$(mktemp -d) timeout "$(cap "$RUN_S")" python3 -m bocast.cli tune "$op" \
    --shape "$shape" --dtype "$dtype" --trials "$TRIALS" --seed 0 --warm-start none \
    --output "$out" --json > "$out/tune.log" 2>&1
  echo "tune $op $shape $dtype: exit $? in $(( $(date +%s) - t0 )) s"
done

python3 - "$root" "$TRIALS" <<'PY'
import glob, json, os, sys
from collections import Counter, defaultdict
root, trials = sys.argv[1], int(sys.argv[2])

sys.path.insert(0, "experiments/device")
from store_rows import store  # noqa: E402


def load(config):
    return config.get("a_load", "tiled")


print("| store | dtype | statuses by producer | worst ok rel_error (tolerance) | best TFLOPS "
      "by producer (/ cuDNN) | cuDNN |")
print("| --- | --- | --- | --- | --- | --- |")
for db in sorted(glob.glob(f"{root}/measure_*.db")):
    w, ref, rows = store(db, tflops=True)
    st = Counter((load(c), s) for c, s, _, _ in rows)
    worst = max((e for _, s, e, _ in rows if s == "ok" and e is not None), default=None)
    tol = {"bf16": 1e-2, "fp32": 1e-3, "fp16": 5e-3}.get(str(w.get("dtype", ":")).split(":")[1])
    ok = defaultdict(list)
    for c, s, _, tf in rows:
        if s == "ok" and tf:
            ok[load(c)].append(tf)
    rt = ref.get("tflops") or 0
    print(f"| {os.path.basename(db)} | {w.get('dtype')} | "
          f"{', '.join(f'{l} {s} {n}' for (l, s), n in sorted(st.items()))} | {worst} ({tol}) | "
          + ", ".join(f"{l} {max(v):.1f} ({max(v) / rt:.3f})" if rt else f"{l} {max(v):.1f}"
                      for l, v in sorted(ok.items()))
          + f" | {ref.get('what', '')} |")
print()
print("| op | shape | dtype | space | trials | best TFLOPS | cuDNN bf16 TFLOPS | best / cuDNN | "
      "best's producer | statuses | worst ok rel_error | reference |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for out in sorted(glob.glob(f"{root}/tune_*/")):
    if not os.path.exists(f"{out}records.db"):
        print(f"| {out} | no store: see tune.log |")
        if os.path.exists(f"{out}tune.log"):
            print("".join(open(f"{out}tune.log").readlines()[-5:]))
        continue
    w, ref, rows = store(f"{out}records.db", tflops=True)
    s = json.load(open(f"{out}summary.json")) if os.path.exists(f"{out}summary.json") else {}
    ok = [(tf, c) for c, st, _, tf in rows if st == "ok" and tf]
    best_tf, best_c = max(ok, key=lambda x: x[0]) if ok else (0.0, {})
    ref_tf = s.get("reference_tflops") or ref.get("tflops") or 0
    # a finished run's figure is its re-timing (best and reference paired); a cut run's the
    # in-run best over the reference it recorded
    figure = (s["best_tflops"], s["best_vs_reference"], "re-timed") if s.get("best_tflops") \
        else (best_tf, best_tf / ref_tf if ref_tf else 0, "in-run")
    worst = max((e for _, st, e, _ in rows if st == "ok" and e is not None), default=None)
    cut = "" if s else f" (cut at {len(rows)} of {trials}: no summary)"
    print(f"| {w.get('op')} | {','.join(map(str, w.get('shape', [])))} | {w.get('dtype')} | "
          f"{w.get('space')} | {len(rows)}{cut} | {figure[0]:.1f} ({figure[2]}) | {ref_tf:.1f} | "
          f"{figure[1]:.3f} | {load(best_c) if best_c else ''} | "
          f"{dict(Counter(st for _, st, _, _ in rows))} | {worst} | {ref.get('what', '')} |")
PY
tar -czf "$OUT/bf16conv_check.tar.gz" --exclude='*.db-wal' --exclude='*.db-shm' "$root"
echo "total $(( $(date +%s) - t_start )) s"
