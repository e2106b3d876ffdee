#!/usr/bin/env bash
# On the H100 machine (device tool, carry .devbundle): `runner: rpc` against the local runner.
# Starts a tracker and one RPC server per GPU on this host (127.0.0.1), then
# bocast/tools/rpc_check.py: a TRIALS-trial seeded random tuning run through RPC and again
# through the local GpuRunner (same kernels: per-kernel latency ratio, kernels/s of each), then
# the TOP best kernels of the RPC run re-measured ROUNDS times by both runners in alternation
# (median per kernel, RPC/local ratio, kernels/s). Results, stores and logs go to $OUT.
#   bash experiments/device/rpc_check.sh                    # about 4-5 minutes on one H100
#   TRIALS=0 bash experiments/device/rpc_check.sh           # re-measure the dataset's best only
#   STANDIN=1 OUT=/tmp/rpc bash experiments/device/rpc_check.sh   # CPU: synthetic plumbing test
set -uo pipefail
OUT=${OUT:?set OUT to the output folder}
mkdir -p "$OUT"
if [ -n "${STANDIN:-}" ]; then
  worker=standin; extra=(--standin); gpus=()
else
  source .devbundle/unpack.sh
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
  worker=gpu; extra=(); gpus=(--gpus all)
fi
export BOCAST_GIT_SHA=${BOCAST_GIT_SHA:-unknown}
PORT=${PORT:-9190}
KEY=${KEY:-check}
python3 -m bocast.measure.rpc.server serve --key "$KEY" --host 127.0.0.1 \
    --tracker-host 127.0.0.1 --tracker-port "$PORT" ${gpus[@]+"${gpus[@]}"} --worker "$worker" \
    > "$OUT/serve.log" 2>&1 &
serve=$!
trap 'kill "$serve" 2>/dev/null; wait "$serve" 2>/dev/null' EXIT
# the tracker takes the first free port from PORT on; the log says which
for _ in $(seq 120); do
  grep -q "registered under key" "$OUT/serve.log" && break
  kill -0 "$serve" 2>/dev/null || { echo "serve exited:"; cat "$OUT/serve.log"; exit 1; }
  sleep 1
done
tracker=$(sed -n 's/.*tracker listening on [^:]*:\([0-9]*\).*/\1/p' "$OUT/serve.log" | head -1)
echo "tracker 127.0.0.1:$tracker; $(grep -c 'registered under key' "$OUT/serve.log") server(s)"
TRIALS=${TRIALS:-200}
tune=()
[ "$TRIALS" -gt 0 ] && tune=(--tune-trials "$TRIALS" --tune-local)
rm -f "$OUT"/tune_rpc.db* "$OUT"/tune_local.db*
timeout "${BUDGET_S:-360}" python3 -m bocast.tools.rpc_check --tracker "127.0.0.1:$tracker" \
    --key "$KEY" --dataset "${DATASET:-gemm_4096_4096_4096_v2}" \
    --top "${TOP:-8}" --rounds "${ROUNDS:-5}" ${tune[@]+"${tune[@]}"} \
    --store-prefix "$OUT/tune" --out "$OUT/rpc_check.json" ${extra[@]+"${extra[@]}"} \
    2>&1 | tee "$OUT/rpc_check.log"
status=${PIPESTATUS[0]}
for db in "$OUT"/tune_*.db; do  # one file per store: fold the WAL in
  [ -f "$db" ] && python3 -c "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute('PRAGMA wal_checkpoint(TRUNCATE)'); c.close()" "$db"
done
echo "--- serve.log (tail)"; tail -5 "$OUT/serve.log"
exit "$status"
