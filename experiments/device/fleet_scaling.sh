#!/usr/bin/env bash
# On nvidia-h200-x2 (device tool, carry .devbundle): issue 41, builds that scale with the fleet.
# The same cold tune twice, through `runner: rpc` with GPU servers that build what they time
# (bocast serve --build-workers): GEMM 4096,4096,4096 (space auto: v3), bo, seed 0, TRIALS
# trials, --warm-start none, an empty records library and an empty build cache each time;
#   1. one GPU server (GPU 0) of WORKERS build workers;
#   2. GPUS servers (GPUs 0..GPUS-1) of WORKERS build workers each.
# The batch follows the fleet (no --batch-size: one kernel per build worker, 16 then 32). One
# table last: trials/s of the loop, end-to-end seconds, kernels built (build-cache entries:
# each kernel built once), in-run and re-timed best TFLOPS, and the ratios (issue 41 asks
# >= 1.8x trials/s on 2 GPUs, >= 3.4x on 4, with the same best).
#   bash experiments/device/fleet_scaling.sh                 # about 5 minutes on 2 H200
#   GPUS=4 bash experiments/device/fleet_scaling.sh          # nvidia-h200-x4 (64 cores)
#   TRIALS=160 RUN_S=150 bash experiments/device/fleet_scaling.sh
# Each tune is at most RUN_S=215 s, each fleet's start SERVE_S=40 s: under 540 s in all.
#   STANDIN=1 TRIALS=8 WORKERS=1 OUT=/tmp/f bash experiments/device/fleet_scaling.sh  # CPU:
#     the plumbing only (stand-in servers: synthetic timings, nvcc builds on this host)
# Everything lands under $OUT (logs, stores, summaries, the servers' logs).
set -uo pipefail
OUT=${OUT:?set OUT to the output folder}
if [ -n "${STANDIN:-}" ]; then
  worker=standin
else
  source .devbundle/unpack.sh
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
  worker=gpu
fi
export BOCAST_GIT_SHA=${BOCAST_GIT_SHA:-unknown}
echo "cores $(nproc); $(nvcc --version | tail -1)"
TRIALS=${TRIALS:-320} GPUS=${GPUS:-2} WORKERS=${WORKERS:-16} PORT=${PORT:-9190}
root=$OUT/fleet_scaling
mkdir -p "$root"
serve=

stop_fleet() {
  if [ -n "$serve" ]; then
    kill "$serve" 2>/dev/null
    wait "$serve" 2>/dev/null
    serve=
  fi
}
trap stop_fleet EXIT

run_fleet() {  # $1: label, $2: GPU list, $3: tracker port
  local label=$1 gpus=$2 port=$3 n out cache t0 t1 tracker
  n=$(tr ',' '\n' <<< "$gpus" | wc -l)
  out=$root/$label
  cache=$root/$label.build_cache
  mkdir -p "$out" "$cache"
  t0=$(date +%s%N)
  BOCAST_BUILD_CACHE=$cache python3 -m bocast.measure.rpc_server serve --key fleet \
    --host 127.0.0.1 --tracker-host 127.0.0.1 --tracker-port "$port" --gpus "$gpus" \
    --build-workers "$WORKERS" --worker "$worker" > "$out/serve.log" 2>&1 &
  serve=$!
  for _ in $(seq "${SERVE_S:-40}"); do
    [ "$(grep -c 'registered under key' "$out/serve.log")" -ge "$n" ] && break
    kill -0 "$serve" 2>/dev/null || { echo "serve exited:"; tail -20 "$out/serve.log"; return 1; }
    sleep 1
  done
  tracker=$(sed -n 's/.*tracker listening on [^:]*:\([0-9]*\).*/\1/p' "$out/serve.log" | head -1)
  echo "$label: $(grep -c 'registered under key' "$out/serve.log") server(s) of $WORKERS build" \
       "workers after $(( ($(date +%s%N) - t0) / 1000000000 )) s; tracker $tracker"
  t0=$(date +%s%N)
  # the tuner's own builds (the final re-timing) share the servers' cache: one host
  BOCAST_BUILD_CACHE=$cache BOCAST_RECORDS=$(mktemp -d) timeout "${RUN_S:-215}" python3 -m bocast.cli tune gemm \
    --shape 4096,4096,4096 --trials "$TRIALS" --seed 0 --warm-start none --runner rpc \
    --tracker "127.0.0.1:$tracker" --key fleet --output "$out" --json > "$out/tune.log" 2>&1
  local status=$?
  t1=$(date +%s%N)
  echo "$label: tune exit $status in $(( (t1 - t0) / 1000000 )) ms"
  grep -vE "^\{" "$out/tune.log" | grep -E "^batch|rror|lost|refused" | head -5
  echo "$(( (t1 - t0) / 1000000 ))" > "$out/end_to_end_ms"
  stop_fleet
  tail -3 "$out/serve.log"
}

run_fleet gpu1 0 "$PORT"
run_fleet "gpu$GPUS" "$(seq -s, 0 $((GPUS - 1)))" $((PORT + 20))

python3 - "$root" "$GPUS" <<'PY'
import json, os, sqlite3, sys
from collections import Counter
root, gpus = sys.argv[1], int(sys.argv[2])
rows = {}
for label in ("gpu1", f"gpu{gpus}"):
    out = os.path.join(root, label)
    try:
        summary = json.load(open(os.path.join(out, "summary.json")))
    except (OSError, ValueError):
        print(f"{label}: no summary.json (see {out}/tune.log)")
        continue
    con = sqlite3.connect(os.path.join(out, "records.db"))
    status = Counter(s for (s,) in con.execute("select status from measurements"))
    where = Counter(json.loads(m)["gpu_index"] for (m,) in
                    con.execute("select measured_on from measurements where measured_on is not null"))
    built = sum(f.endswith(".json") for _, _, fs in os.walk(os.path.join(root, label + ".build_cache"))
                for f in fs)
    loop = summary["seconds"]
    rows[label] = dict(trials=summary["trials"], loop_s=loop, per_s=summary["trials"] / loop,
                       e2e_s=float(open(os.path.join(out, "end_to_end_ms")).read()) / 1000,
                       built=built, in_run=summary["in_run"]["best_tflops"],
                       best=summary.get("best_tflops"), status=dict(status), gpus=dict(where))
print(f"\n{'fleet':6} {'trials':>6} {'loop s':>7} {'trials/s':>8} {'end-to-end s':>12} "
      f"{'built':>5} {'in-run best':>11} {'re-timed best':>13}  statuses; records per GPU")
for label, r in rows.items():
    print(f"{label:6} {r['trials']:6d} {r['loop_s']:7.1f} {r['per_s']:8.2f} {r['e2e_s']:12.1f} "
          f"{r['built']:5d} {r['in_run'] or 0:11.1f} {r['best'] or 0:13.1f}  {r['status']}; "
          f"{r['gpus']}")
if len(rows) == 2:
    a, b = rows["gpu1"], rows[f"gpu{gpus}"]
    def ratio(x, y):
        return f"{x / y:.3f}" if x and y else "n/a"

    print(f"{gpus} GPUs / 1: trials/s {b['per_s'] / a['per_s']:.2f}x, end-to-end "
          f"{a['e2e_s'] / b['e2e_s']:.2f}x faster, best {ratio(b['best'], a['best'])} "
          f"(re-timed), {ratio(b['in_run'], a['in_run'])} (in-run)")
PY
