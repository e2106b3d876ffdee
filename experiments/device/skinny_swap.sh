#!/usr/bin/env bash
# On the GPU machine (device tool, carry .devbundle; `bash experiments/device/lean_tree.sh out`
# first if the carry is too large): space v3's swap-AB for skinny GEMMs and GEMV (issue 38
# item 3; bocast/space/operators/_hopper_swap.py: C^T = B A^T, the weights as wgmma's M, the tokens
# or vectors as its N, C stored transposed).
# 1. Correctness of swap_ab: every feasible configuration with swap_ab on, in seeded random
#    order, batches of SAMPLE=16 until MEASURE_BATCH_S=12 s, of the ragged GEMM 24,1000,1008
#    (M, N ragged against every tile; bm 8-64 as wgmma's N, split K 1-8) and the ragged GEMV
#    1000,1008,5 (5 vectors: an odd M, the transposed store's last column alone), each built,
#    run (split K: the output zeroed by the launch, the slices added by red.global.add) and
#    checked against the float64 reference.
# 2. Cold default-command tunes on v3: `bocast tune OP --shape S --space v3 --trials TRIALS
#    --warm-start none --seed 0` with an empty records library, for each OP/S in RUNS (LLM
#    decode: Llama-3-8B's up/gate projection at M = 16, Llama-3-70B's gate+up (28672) at
#    M = 64, a GEMV of 8 vectors on the 14336 x 4096 down projection's transpose). Each run
#    ends by re-timing its best kernels with cuBLAS in turn (torch.mm, fp32 output, the same
#    inputs).
# Tables last: swap's statuses by split_k and bm; per run, best / cuBLAS, whether the best
# swaps, its tile, split_k, and the best in-run TFLOPS with swap on and off.
#   bash experiments/device/skinny_swap.sh     # defaults: under 400 s on a 16-core H200
#   (each measure at most MEASURE_S=40 s; each tune a TUNE_S=70 s wall budget for its trials
#   and at most RUN_S=100 s in all; a run the budget cuts before 64 trials says so in the
#   trials column)
#   RUNS="gemm/32,6144,4096 gemm/128,4096,14336" SAMPLE=0 bash experiments/device/skinny_swap.sh
# Everything lands under $OUT (skinny_swap.tar.gz: logs, records, summaries).
set -uo pipefail
source .devbundle/unpack.sh
export BOCAST_GIT_SHA=${BOCAST_GIT_SHA:-unknown}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
echo "cores $(nproc); $(nvcc --version | tail -1)"
RUNS=${RUNS:-"gemm/16,14336,4096 gemm/64,28672,4096 gemv/4096,14336,8"}
TRIALS=${TRIALS:-64} SAMPLE=${SAMPLE:-16}
root=runs/skinny_swap
mkdir -p "$root"

if [ "$SAMPLE" -gt 0 ]; then
  for run in gemm/24,1000,1008 gemv/1000,1008,5; do
    op=${run%%/*} shape=${run#*/}
    t0=$(date +%s)
    timeout "${MEASURE_S:-40}" python3 -m bocast.cli measure "$op" --shape "$shape" \
      --space v3 --all --fix swap_ab=on --batch "$SAMPLE" \
      --max-seconds "${MEASURE_BATCH_S:-12}" --seed 0 \
      --store "$root/measure_${op}_${shape//,/x}.db" --json \
      > "$root/measure_${op}_${shape//,/x}.log" 2>&1
    echo "measure $op $shape v3, swap_ab on: exit $? in $(( $(date +%s) - t0 )) s"
    tail -2 "$root/measure_${op}_${shape//,/x}.log"
  done
fi

for run in $RUNS; do
  op=${run%%/*} shape=${run#*/}
  out=$root/tune_${op}_${shape//,/x}
  mkdir -p "$out"
  t0=$(date +%s)
  BOCAST_RECORDS=$(mktemp -d) timeout "${RUN_S:-100}" python3 -m bocast.cli tune "$op" \
    --shape "$shape" --space v3 --trials "$TRIALS" --seconds "${TUNE_S:-70}" --seed 0 \
    --warm-start none --retime-top 3 --output "$out" --json > "$out/tune.log" 2>&1
  echo "tune $op $shape v3: exit $? in $(( $(date +%s) - t0 )) s"
done

python3 - "$root" <<'PY'
import glob, json, os, sys
from collections import Counter, defaultdict
root = sys.argv[1]

sys.path.insert(0, "experiments/device")
from store_rows import store  # noqa: E402

for db in sorted(glob.glob(f"{root}/measure_*.db")):
    w, _, rows = store(db, tflops=True)
    print(f"swap_ab on, {w.get('op')} {w.get('shape')} (v3, {len(rows)} configurations):")
    print("| split_k | bm | statuses | worst ok rel_error |")
    print("| --- | --- | --- | --- |")
    groups = defaultdict(list)
    for c, st, err, _ in rows:
        groups[(c.get("split_k", 1), c["bm"])].append((st, err))
    for (sk, bm), items in sorted(groups.items()):
        worst = max((e for st, e in items if st == "ok" and e is not None), default=None)
        print(f"| {sk} | {bm} | {dict(Counter(st for st, _ in items))} | {worst} |")
    print()

print("| run | trials | best TFLOPS (re-timed) | cuBLAS TFLOPS | best / cuBLAS | best swaps | "
      "best kernel | in-run best swap on / off (TFLOPS; trials) | statuses | worst ok rel_error |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for out in sorted(glob.glob(f"{root}/tune_*/")):
    name = os.path.basename(out.rstrip("/"))
    if not os.path.exists(f"{out}summary.json"):
        print(f"| {name} | no summary: see tune.log |")
        if os.path.exists(f"{out}tune.log"):
            print("".join(open(f"{out}tune.log").readlines()[-4:]))
        continue
    s = json.load(open(f"{out}summary.json"))
    w, ref, rows = store(f"{out}records.db", tflops=True)
    ok = [(tf, c) for c, st, _, tf in rows if st == "ok" and tf]
    best = s.get("best_config") or (max(ok, key=lambda x: x[0])[1] if ok else {})
    kernel = (f"{best.get('bm')}x{best.get('bn')}, split_k {best.get('split_k', 1)}, "
              f"{best.get('epilogue')}, {best.get('consumers')} consumers" if best else "")
    side = {}
    for flag in ("on", "off"):
        tfs = [tf for tf, c in ok if c.get("swap_ab", "off") == flag]
        n = sum(1 for c, *_ in rows if c.get("swap_ab", "off") == flag)
        side[flag] = f"{max(tfs):.1f}" if tfs else "-", n
    worst = max((e for _, st, e, _ in rows if st == "ok" and e is not None), default=None)
    print(f"| {w.get('op')} {','.join(map(str, w.get('shape', [])))} | {s.get('trials')} | "
          f"{s.get('best_tflops') or 0:.1f} | {s.get('reference_tflops') or 0:.1f} | "
          f"{s.get('best_vs_reference') or 0:.3f} | {best.get('swap_ab', 'off')} | {kernel} | "
          f"{side['on'][0]} / {side['off'][0]} ({side['on'][1]}; {side['off'][1]}) | "
          f"{s.get('status')} | {worst} |")
PY
tar -czf "$OUT/skinny_swap.tar.gz" --exclude='*.db-wal' --exclude='*.db-shm' "$root"
