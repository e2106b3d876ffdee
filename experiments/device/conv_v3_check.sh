#!/usr/bin/env bash
# On the GPU machine (device tool, carry .devbundle; `bash experiments/device/lean_tree.sh out`
# first if the carry is too large): space v3's conv2d for strided and dilated convolutions
# (issue 38, item 1 and the dilated part of item 2), its two producers of the im2col operand
# (knob a_load: TMA's im2col mode, or a tiled 4-D box with element strides) and v3 against v2;
# then, as time is left, conv1d and conv3d on v3 and an exported im2col kernel.
# 1. Correctness, and the producers side by side (MEASURES): random v3 configurations (seed 0)
#    of each producer, a_load=im2col and a_load=tiled, on the stride-2 3x3 and the dilated
#    layer of step 2, and of im2col on a ragged stride-2 conv (odd input, M and K not multiples
#    of the tiles): `bocast measure --fix a_load=... --all` cut after its first batches of N
#    (1-3, as the builds keep pace), so a uniform sample of the producer's sub-space. Each
#    kernel built, run and checked against the float64 reference, and timed beside cuDNN.
#    (A cold BO run's first 32 trials are uniform samples of the whole space, where im2col
#    configurations are about 1 in 20: the tunes alone would hardly compare the producers.)
# 2. Cold tunes (an empty records library, --warm-start none, seed 0, TRIALS trials), --space v3
#    and --space v2, of layers in no configuration, dataset or test of the project:
#      conv2d 32,56,56,128,128,3,3,2,1,1   ResNet-50 (torchvision v1.5) layer2.0.conv2: the
#                                          stage transition's stride-2 3x3, batch 32
#      conv2d 32,56,56,256,512,1,1,2,0,1   ResNet-50 layer2.0.downsample: 1x1 stride 2
#      conv2d_dilated 8,33,33,512,512,3,3,1,2,2   DeepLabv3-ResNet-50 layer4 3x3 (output
#                                          stride 16, 513 x 513 crop: 33 x 33), batch 8
#    each timing cuDNN (torch.nn.functional.conv2d, fp16 channels-last) in its own run.
# 3. As time is left (each step cut to it): conv1d and conv3d on v3 (MEASURES_ND, im2col their
#    only producer: rank-3 and rank-5 maps), random configurations checked as in step 1.
# 4. If EXPORT_S seconds are left: the best im2col kernel of step 1's stride-2 store exported
#    here (`bocast export`) and loaded from its folder (tests/gpu/export_check.py): the
#    exported kernel.so encodes its im2col map through bocast's packed encoder.
# Tables last: per store, statuses and worst error by producer, the best TFLOPS / cuDNN by
# producer; per tune, best / cuDNN for v3 and v2 and the producer of v3's best.
#   bash experiments/device/conv_v3_check.sh            # defaults: under 540 s on a 16-core H200
#   # steps 3 and 4 alone (the defaults leave them little time), in a second call:
#   TUNES= MEASURES="conv2d/32,56,56,128,128,3,3,2,1,1/im2col/6" \
#     bash experiments/device/conv_v3_check.sh
# Every step is cut to what is left of BUDGET_S; a tune cut short still counts its stored trials
# (the table says so). Everything lands under $OUT (conv_v3_check.tar.gz).
set -uo pipefail
source .devbundle/unpack.sh
export BOCAST_GIT_SHA=${BOCAST_GIT_SHA:-unknown}
t_start=$(date +%s)
BUDGET_S=${BUDGET_S:-530} TRIALS=${TRIALS:-32} RUN_S=${RUN_S:-55} MEASURE_S=${MEASURE_S:-35}
EXPORT_S=${EXPORT_S:-60}
S2=conv2d/32,56,56,128,128,3,3,2,1,1 DIL=conv2d_dilated/8,33,33,512,512,3,3,1,2,2
MEASURES=${MEASURES-"conv2d/8,57,57,64,96,3,3,2,1,1/im2col/6 $S2/im2col/6 $S2/tiled/6 $DIL/im2col/6 $DIL/tiled/6"}
TUNES=${TUNES-"$S2 conv2d/32,56,56,256,512,1,1,2,0,1 $DIL"}
MEASURES_ND=${MEASURES_ND-"conv1d/8,1000,256,256,3,2,1,1/im2col/4 conv3d/2,9,15,15,64,64,3,3,3,2,1,1/im2col/4"}
SPACES=${SPACES:-"v3 v2"}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
echo "cores $(nproc); $(nvcc --version | tail -1)"
root=runs/conv_v3_check
mkdir -p "$root"

left() { echo $(( BUDGET_S - ($(date +%s) - t_start) )); }
cap() { local l; l=$(left); [ "$1" -lt "$l" ] && echo "$1" || echo $(( l > 0 ? l : 0 )); }

measure_all() {  # "op/shape/producer/batch ..."
  for m in $1; do
    IFS=/ read -r op shape load n <<< "$m"
    name=measure_${op}_${shape//,/x}_${load}
    t0=$(date +%s)
    # every feasible configuration of the producer's sub-space in a seeded random order, cut
    # after the first batches (--max-seconds): a uniform sample of it (bocast measure --all);
    # the tiled producer's pixel tiles held to 2-8 a side (its enumeration stays short)
    fix=(--fix "a_load=$load")
    [ "$load" = tiled ] && fix+=(--fix tile_w=2 --fix tile_w=4 --fix tile_w=8 --fix tile_h=2
                                 --fix tile_h=4 --fix tile_h=8)
    timeout "$(cap "$MEASURE_S")" python3 -m bocast.cli measure "$op" --shape "$shape" \
      --space v3 "${fix[@]}" --all --max-seconds 1 --batch "$n" --seed 0 \
      --store "$root/$name.db" --json > "$root/$name.log" 2>&1
    echo "measure $op $shape v3 a_load=$load (batches of $n): exit $? in $(( $(date +%s) - t0 )) s"
    tail -1 "$root/$name.log" | cut -c1-300
  done
}

measure_all "$MEASURES"

for tune in $TUNES; do
  IFS=/ read -r op shape <<< "$tune"
  for space in $SPACES; do
    out=$root/tune_${op}_${shape//,/x}_${space}
    mkdir -p "$out"
    t0=$(date +%s)
    BOCAST_RECORDS=$(mktemp -d) timeout "$(cap "$RUN_S")" python3 -m bocast.cli tune "$op" \
      --shape "$shape" --space "$space" --trials "$TRIALS" --seed 0 --warm-start none \
      --output "$out" --json > "$out/tune.log" 2>&1
    echo "tune $op $shape $space: exit $? in $(( $(date +%s) - t0 )) s"
  done
done

[ "$(left)" -gt 20 ] && measure_all "$MEASURES_ND"

if [ "$(left)" -ge "$EXPORT_S" ]; then
  db=$(ls "$root"/measure_conv2d_*_im2col.db 2>/dev/null | head -1)
  key=$([ -n "$db" ] && python3 - "$db" <<'PY'
import sqlite3, sys
row = sqlite3.connect(sys.argv[1]).execute(
    "select key from measurements where status = 'ok' order by tflops desc limit 1").fetchone()
print(row[0] if row else "")
PY
)
  if [ -n "$key" ]; then
    rm -rf "$root/export_im2col"
    export_check() {  # store, key, folder
      python3 -m bocast.cli export "$1" --key "$2" --out "$3" &&
        python3 -m tests.gpu.export_check "$3" --rounds 2 --out "$OUT/export_check.json"
    }
    export -f export_check
    timeout "$(cap "$EXPORT_S")" bash -c 'export_check "$@"' _ "$db" "$key" \
      "$root/export_im2col" > "$root/export.log" 2>&1
    echo "export of the best im2col kernel and its check: exit $?"; tail -6 "$root/export.log"
  fi
else
  echo "export check skipped: $(left) s left (EXPORT_S=$EXPORT_S)"
fi

python3 - "$root" "$TRIALS" <<'PY'
import glob, json, os, sqlite3, sys
from collections import Counter, defaultdict
root, trials = sys.argv[1], int(sys.argv[2])


sys.path.insert(0, "experiments/device")
from store_rows import store as _store, worst_ok  # noqa: E402


def store(db):
    return _store(db, tflops=True)


def load(config):
    return config.get("a_load", "tiled")


print("| store | statuses by producer | worst ok rel_error | best TFLOPS by producer "
      "(/ cuDNN) | median ok TFLOPS by producer |")
print("| --- | --- | --- | --- | --- |")
for db in sorted(glob.glob(f"{root}/measure_*.db")):
    w, ref, rows = store(db)
    st = Counter((load(c), s) for c, s, _, _ in rows)
    worst = max((e for _, s, e, _ in rows if s == "ok" and e is not None), default=None)
    ok = defaultdict(list)
    for c, s, _, tf in rows:
        if s == "ok" and tf:
            ok[load(c)].append(tf)
    rt = ref.get("tflops") or 0
    print(f"| {os.path.basename(db)} | {', '.join(f'{l} {s} {n}' for (l, s), n in sorted(st.items()))}"
          f" | {worst} | " + ", ".join(f"{l} {max(v):.1f} ({max(v) / rt:.3f})" if rt else
                                       f"{l} {max(v):.1f}" for l, v in sorted(ok.items()))
          + " | " + ", ".join(f"{l} {sorted(v)[len(v) // 2]:.1f}" for l, v in sorted(ok.items()))
          + " |")
print()
print("| op | shape | space | trials | best TFLOPS | cuDNN TFLOPS | best / cuDNN | v3 best's "
      "producer | best TFLOPS by producer | statuses | worst ok rel_error |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for out in sorted(glob.glob(f"{root}/tune_*/")):
    if not os.path.exists(f"{out}records.db"):
        print(f"| {out} | no store: see tune.log |"); continue
    w, ref, rows = store(f"{out}records.db")
    s = json.load(open(f"{out}summary.json")) if os.path.exists(f"{out}summary.json") else {}
    ok = [(tf, c) for c, st, _, tf in rows if st == "ok" and tf]
    best_tf, best_c = max(ok, key=lambda x: x[0]) if ok else (0.0, {})
    ref_tf = s.get("reference_tflops") or ref.get("tflops") or 0
    # a finished run's figure is its re-timing (best and reference paired); a cut run's the
    # in-run best over the reference it recorded
    figure = (s["best_tflops"], s["best_vs_reference"], "re-timed") if s.get("best_tflops") \
        else (best_tf, best_tf / ref_tf if ref_tf else 0, "in-run")
    by = defaultdict(float)
    for tf, c in ok:
        by[load(c)] = max(by[load(c)], tf)
    worst = max((e for _, st, e, _ in rows if st == "ok" and e is not None), default=None)
    cut = "" if s else f" (cut at {len(rows)} of {trials}: no summary)"
    space = w.get("space")
    print(f"| {w.get('op')} | {','.join(map(str, w.get('shape', [])))} | {space} | "
          f"{len(rows)}{cut} | {figure[0]:.1f} ({figure[2]}) | {ref_tf:.1f} | {figure[1]:.3f} | "
          f"{load(best_c) if space == 'v3' and best_c else ''} | "
          + (", ".join(f"{l} {v:.1f}" for l, v in sorted(by.items())) if space == "v3" else "")
          + f" | {dict(Counter(st for _, st, _, _ in rows))} | {worst} |")
PY
tar -czf "$OUT/conv_v3_check.tar.gz" --exclude='*.db-wal' --exclude='*.db-shm' "$root"
echo "total $(( $(date +%s) - t_start )) s"
