#!/usr/bin/env bash
# On the GPU machine (device tool, carry .devbundle): issue 41 item 3, many workloads in one run.
# The 10 GEMMs of experiments/shapes/llama3_8b_projections.csv (Llama-3-8B's q/o, k/v, gate/up,
# down and LM head at M = 128 and 2048 tokens), tuned by one `bocast tune --shapes FILE` with
# the defaults (BO, batch 16, warm start auto from an empty records library: each workload from
# the run's finished ones only), one store per workload, one table at the end.
#   bash experiments/device/many_shapes.sh          # MODE=local: one GPU, 64 trials a shape
#                                                    # (about 10 x 25 s + start-up; nvidia-h200)
#   MODE=rpc bash experiments/device/many_shapes.sh  # nvidia-h200-x2: a tracker and one server
#                                                    # per GPU on this host, --runner rpc: two
#                                                    # workloads at once (the fleet's size)
#   MODE=both bash experiments/device/many_shapes.sh # nvidia-h200-x2: local on GPU 0, then rpc
#                                                    # on both, TRIALS=32 a shape so both fit in
#                                                    # one call; prints the 2-GPU/1-GPU speed-up
#                                                    # and each shape's best, rpc/local
# TRIALS sets the trials a shape (default 64, 32 for MODE=both); RUN_S bounds each run (480 s,
# 240 for each of MODE=both's two; a run cut short resumes from its stores when the same command
# runs again, but a new machine starts bare: runs/ is not kept). Everything lands under $OUT.
#   STANDIN=1 MODE=local TRIALS=4 OUT=/tmp/ms bash experiments/device/many_shapes.sh   # CPU:
#                                                    # synthetic timings, the script's plumbing
set -uo pipefail
OUT=${OUT:?set OUT to the output folder}
mkdir -p "$OUT"
if [ -n "${STANDIN:-}" ]; then
  local_runner=standin; worker=standin; gpus=(--gpus 0,1); ngpus=2
else
  source .devbundle/unpack.sh
  nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
  echo "cores $(nproc); $(nvcc --version | tail -1)"
  local_runner=local; worker=gpu; gpus=(--gpus all); ngpus=$(nvidia-smi -L | wc -l)
fi
export BOCAST_GIT_SHA=${BOCAST_GIT_SHA:-unknown}
MODE=${MODE:-local}
case "$MODE" in local|rpc) TRIALS=${TRIALS:-64} RUN_S=${RUN_S:-480} ;;
  both) TRIALS=${TRIALS:-32} RUN_S=${RUN_S:-240} ;;
  *) echo "MODE: local, rpc or both, got $MODE"; exit 2 ;; esac
SHAPES=${SHAPES:-experiments/shapes/llama3_8b_projections.csv}
root=${ROOT_DIR:-runs/many_shapes}
mkdir -p "$root"

run_local() {  # one GPU: the workloads one after another
  local t0=$SECONDS
  BOCAST_RECORDS="$root/records_local" CUDA_VISIBLE_DEVICES=0 timeout "$RUN_S" \
    python3 -m bocast.cli tune --shapes "$SHAPES" --trials "$TRIALS" --runner "$local_runner" \
    --output "$root/local_t$TRIALS" --json > "$OUT/local.out" 2> "$OUT/local.log"
  echo "local: exit $? in $((SECONDS - t0)) s"; grep -v '^{' "$OUT/local.out"
}

run_rpc() {  # every GPU of this host a server; as many workloads at once as servers
  local port=${PORT:-9190} key=many
  python3 -m bocast.measure.rpc.server serve --key "$key" --host 127.0.0.1 \
    --tracker-host 127.0.0.1 --tracker-port "$port" "${gpus[@]}" --worker "$worker" \
    > "$OUT/serve.log" 2>&1 &
  serve=$!
  trap 'kill "$serve" 2>/dev/null; wait "$serve" 2>/dev/null' EXIT
  for _ in $(seq 120); do
    [ "$(grep -c 'registered under key' "$OUT/serve.log")" -ge "$ngpus" ] && break
    kill -0 "$serve" 2>/dev/null || { echo "serve exited:"; cat "$OUT/serve.log"; exit 1; }
    sleep 1
  done
  tracker=$(sed -n 's/.*tracker listening on [^:]*:\([0-9]*\).*/\1/p' "$OUT/serve.log" | head -1)
  echo "tracker 127.0.0.1:$tracker; $(grep -c 'registered under key' "$OUT/serve.log") server(s)"
  local t0=$SECONDS
  BOCAST_RECORDS="$root/records_rpc" timeout "$RUN_S" \
    python3 -m bocast.cli tune --shapes "$SHAPES" --trials "$TRIALS" --runner rpc \
    --tracker "127.0.0.1:$tracker" --key "$key" --output "$root/rpc_t$TRIALS" --json \
    > "$OUT/rpc.out" 2> "$OUT/rpc.log"
  echo "rpc: exit $? in $((SECONDS - t0)) s"; grep -v '^{' "$OUT/rpc.out"
}

case "$MODE" in
  local) run_local ;;
  rpc) run_rpc ;;
  both) run_local; run_rpc ;;
esac
for d in "$root"/*_t"$TRIALS"; do  # the run's table and summary, each store with its WAL folded in
  [ -d "$d" ] || continue
  name=$(basename "$d")
  mkdir -p "$OUT/$name"
  cp "$d"/summary.json "$d"/summary.md "$d"/plan.json "$OUT/$name/" 2>/dev/null
  for db in "$d"/*/records.db; do
    python3 -c "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute('PRAGMA wal_checkpoint(TRUNCATE)'); c.close()" "$db"
  done
done
tar czf "$OUT/many_shapes.tar.gz" "$root" 2>/dev/null
python3 - "$root" "$TRIALS" <<'EOF'
import json, os, sys
root, trials = sys.argv[1], sys.argv[2]
runs = {m: json.load(open(p)) for m in ("local", "rpc")
        if os.path.isfile(p := os.path.join(root, f"{m}_t{trials}", "summary.json"))}
for m, s in runs.items():
    print(f"--- {m}: {s['finished']}/{len(s['workloads'])} workloads finished, window "
          f"{s['window']}, {s['seconds']:.0f} s wall this session")
    print(open(os.path.join(root, f"{m}_t{trials}", "summary.md")).read().rstrip())
if len(runs) == 2:
    a, b = runs["local"], runs["rpc"]
    if a["seconds"] and b["seconds"]:  # one session each: a fresh machine
        print(f"2 GPUs (rpc) against 1 (local): {a['seconds'] / b['seconds']:.2f}x faster, "
              "end to end of each session")
    print(f"{'workload':<36} {'local':>8} {'rpc':>8} {'rpc/local':>9}")
    for x, y in zip(a["workloads"], b["workloads"]):
        bx, by = x.get("best_tflops"), y.get("best_tflops")
        print(f"{x['workload']:<36} {bx or 0:>8.1f} {by or 0:>8.1f} "
              + (f"{by / bx:>9.3f}" if bx and by else f"{'-':>9}"))
EOF
