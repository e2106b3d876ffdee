#!/usr/bin/env bash
# On nvidia-h200-x2 or -x4 (device tool, carry .devbundle): issue 41, tuning that scales with
# the fleet, with the pipelined loop (bocast/run/pipeline.py: the next batch proposed while this one
# is measured, with it as pending points; the servers fed from one queue, so no batch waits for
# its slowest build). Through `runner: rpc` with GPU servers that build what they time
# (bocast serve --build-workers), GEMM 4096,4096,4096 (space auto: v3), bo, --warm-start none,
# an empty records library and an empty build cache per fleet:
#   1. one server (GPU 0) of WORKERS build workers: the TRIALS-trial tune, seed 0;
#   2. GPUS servers (every GPU of the machine; GPUS= to choose): the same tune;
#   3. on the same GPUS servers, a KILL_TRIALS-trial tune (seed 1: other kernels than 2's, not
#      in the build cache) during which the server of the last GPU is killed (SIGKILL) once
#      the store holds KILL_AT records; its supervisor restarts it. Checked from the store:
#      every trial recorded once (none lost, none repeated), no kernel failed for a lost server,
#      the killed GPU used again after its restart;
#   PLAIN=1 adds 2'. the same tune as 2 in the plain loop (rpc.ahead 0: batch after batch), for
#      a same-session comparison (about 50 s more). AHEAD=k: batches proposed ahead in 1, 2
#      and 3 (rpc.ahead; default 1).
# The batch follows the fleet (one kernel per build worker). One table last: trials/s of the
# loop, end to end, kernels built, in-run and re-timed best, the median proposal, records per
# GPU; then the ratios (issue 41 asks >= 1.8x trials/s on 2 GPUs, >= 3.4x on 4, the same best)
# and the killed-server line.
#   bash experiments/device/fleet_scaling.sh                 # about 4 minutes on 2 H200
#   GPUS=4 bash experiments/device/fleet_scaling.sh          # (all GPUs is the default)
#   STANDIN=1 GPUS=2 TRIALS=8 KILL_TRIALS=8 KILL_AT=2 WORKERS=1 OUT=/tmp/f bash \
#     experiments/device/fleet_scaling.sh  # CPU: the plumbing only (stand-in servers)
# Each tune is at most RUN_S=150 s, each fleet's start SERVE_S=40 s.
# Everything lands under $OUT/fleet_scaling (logs, stores, summaries, the servers' logs).
set -uo pipefail
OUT=${OUT:?set OUT to the output folder}
if [ -n "${STANDIN:-}" ]; then
  worker=standin
  GPUS=${GPUS:-2}
else
  source .devbundle/unpack.sh
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
  worker=gpu
  GPUS=${GPUS:-$(nvidia-smi -L | wc -l)}
fi
export BOCAST_GIT_SHA=${BOCAST_GIT_SHA:-unknown}
echo "cores $(nproc); $(nvcc --version | tail -1); $GPUS GPU(s)"
TRIALS=${TRIALS:-320} WORKERS=${WORKERS:-16} PORT=${PORT:-9190}
KILL_TRIALS=${KILL_TRIALS:-160} KILL_AT=${KILL_AT:-48}
root=$OUT/fleet_scaling
mkdir -p "$root"
serve= tracker= fleet_log=

stop_fleet() {
  if [ -n "$serve" ]; then
    kill "$serve" 2>/dev/null
    wait "$serve" 2>/dev/null
    serve=
  fi
}
trap stop_fleet EXIT

start_fleet() {  # $1: name, $2: GPU list, $3: tracker port
  local name=$1 gpus=$2 port=$3 n t0
  n=$(tr ',' '\n' <<< "$gpus" | wc -l)
  fleet_log=$root/$name.serve.log
  mkdir -p "$root/$name.build_cache"
  t0=$(date +%s)
  BOCAST_BUILD_CACHE=$root/$name.build_cache python3 -m bocast.measure.rpc.server serve \
    --key fleet --host 127.0.0.1 --tracker-host 127.0.0.1 --tracker-port "$port" \
    --gpus "$gpus" --build-workers "$WORKERS" --worker "$worker" > "$fleet_log" 2>&1 &
  serve=$!
  for _ in $(seq "${SERVE_S:-40}"); do
    [ "$(grep -c 'registered under key' "$fleet_log")" -ge "$n" ] && break
    kill -0 "$serve" 2>/dev/null || { echo "serve exited:"; tail -20 "$fleet_log"; return 1; }
    sleep 1
  done
  tracker=$(sed -n 's/.*tracker listening on [^:]*:\([0-9]*\).*/\1/p' "$fleet_log" | head -1)
  echo "$name: $(grep -c 'registered under key' "$fleet_log") server(s) of $WORKERS build" \
       "workers after $(( $(date +%s) - t0 )) s; tracker $tracker"
}

tune() {  # $1: label, $2: trials, $3: seed, then extra arguments; in the background
  local out=$root/$1
  mkdir -p "$out"
  echo "$(date +%s%N)" > "$out/start_ns"
  BOCAST_BUILD_CACHE=$root/$fleet_name.build_cache BOCAST_RECORDS=$(mktemp -d) \
    timeout "${RUN_S:-150}" python3 -m bocast.cli tune gemm --shape 4096,4096,4096 \
    --trials "$2" --seed "$3" --warm-start none --runner rpc --tracker "127.0.0.1:$tracker" \
    --key fleet --output "$out" --json ${AHEAD:+--set rpc.ahead=$AHEAD} "${@:4}" \
    > "$out/tune.log" 2>&1 &
  tune_pid=$!
}

finish() {  # $1: label: wait for its tune, note its time and a few lines of its log
  local out=$root/$1 status
  wait "$tune_pid"
  status=$?
  echo $(( ($(date +%s%N) - $(cat "$out/start_ns")) / 1000000 )) > "$out/end_to_end_ms"
  # kernels in the fleet's build cache now (each built once; the final re-timing's too)
  find "$root/$fleet_name.build_cache" -name '*.json' | wc -l > "$out/built"
  echo "$1: tune exit $status in $(cat "$out/end_to_end_ms") ms"
  grep -vE "^\{" "$out/tune.log" | grep -E "^batch|rror|lost|refused|hung" | head -5
}

rows() { python3 - "$1" <<'PY'
import sqlite3, sys
try:
    print(sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True).execute(
        "select count(*) from measurements").fetchone()[0])
except sqlite3.Error:
    print(0)
PY
}

fleet_name=gpu1
start_fleet gpu1 0 "$PORT" && { tune gpu1 "$TRIALS" 0; finish gpu1; }
stop_fleet
fleet_name=gpu$GPUS
if start_fleet "gpu$GPUS" "$(seq -s, 0 $((GPUS - 1)))" $((PORT + 20)); then
  tune "gpu$GPUS" "$TRIALS" 0
  finish "gpu$GPUS"
  if [ -n "${PLAIN:-}" ]; then
    rm -rf "$root/$fleet_name.build_cache"/*  # cold, as the pipelined run was
    AHEAD= tune "gpu${GPUS}_plain" "$TRIALS" 0 --set rpc.ahead=0
    finish "gpu${GPUS}_plain"
  fi
  # 3. a server killed mid-run
  last=$((GPUS - 1))
  tune kill "$KILL_TRIALS" 1
  for _ in $(seq 600); do
    [ "$(rows "$root/kill/records.db")" -ge "$KILL_AT" ] && break
    kill -0 "$tune_pid" 2>/dev/null || break
    sleep 0.2
  done
  victim=$(sed -n "s/.*server gpu $last (.*pid \([0-9]*\),.*/\1/p" "$fleet_log" | tail -1)
  at=$(rows "$root/kill/records.db")
  kill -9 "$victim" && echo "kill: server gpu $last (pid $victim) killed at $at records"
  echo "$at $victim" > "$root/kill/killed_at"
  finish kill
  grep -E "gpu $last|registered" "$fleet_log" | tail -4
  stop_fleet
fi

python3 - "$root" "$GPUS" "$KILL_TRIALS" <<'PY'
import json, os, sqlite3, sys
from collections import Counter
root, gpus, kill_trials = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])

def store(label):
    return sqlite3.connect(f"file:{os.path.join(root, label, 'records.db')}?mode=ro", uri=True)

rows = {}
for label in ("gpu1", f"gpu{gpus}", f"gpu{gpus}_plain"):
    out = os.path.join(root, label)
    try:
        summary = json.load(open(os.path.join(out, "summary.json")))
    except (OSError, ValueError):
        if os.path.isdir(out):
            print(f"{label}: no summary.json (see {out}/tune.log)")
        continue
    con = store(label)
    where = Counter(json.loads(m)["gpu_index"] for (m,) in con.execute(
        "select measured_on from measurements where measured_on is not null"))
    built = int(open(os.path.join(out, "built")).read())
    loop = summary["seconds"]
    rows[label] = dict(trials=summary["trials"], loop_s=loop, per_s=summary["trials"] / loop,
                       e2e_s=float(open(os.path.join(out, "end_to_end_ms")).read()) / 1000,
                       built=built, in_run=summary["in_run"]["best_tflops"],
                       best=summary.get("best_tflops"), prop=summary.get("median_proposal_s"),
                       gpus=dict(sorted(where.items())))
print(f"\n{'run':11} {'trials':>6} {'loop s':>7} {'trials/s':>8} {'end-to-end s':>12} "
      f"{'built':>5} {'in-run best':>11} {'re-timed best':>13} {'proposal s':>10}  records per GPU")
for label, r in rows.items():
    print(f"{label:11} {r['trials']:6d} {r['loop_s']:7.1f} {r['per_s']:8.2f} {r['e2e_s']:12.1f} "
          f"{r['built']:5d} {r['in_run'] or 0:11.1f} {r['best'] or 0:13.1f} "
          f"{r['prop'] or 0:10.2f}  {r['gpus']}")

def ratio(x, y):
    return f"{x / y:.3f}" if x and y else "n/a"

a, b = rows.get("gpu1"), rows.get(f"gpu{gpus}")
if a and b:
    print(f"{gpus} GPUs / 1: trials/s {b['per_s'] / a['per_s']:.2f}x (issue 41: >= "
          f"{1.8 if gpus == 2 else 3.4 if gpus == 4 else 0.9 * gpus:.1f}x), end-to-end "
          f"{a['e2e_s'] / b['e2e_s']:.2f}x faster, best {ratio(b['best'], a['best'])} "
          f"(re-timed), {ratio(b['in_run'], a['in_run'])} (in-run)")
if b and rows.get(f"gpu{gpus}_plain"):
    p = rows[f"gpu{gpus}_plain"]
    print(f"pipelined / plain loop on {gpus} GPUs: trials/s {b['per_s'] / p['per_s']:.2f}x")
try:
    con = store("kill")
    at, victim = open(os.path.join(root, "kill", "killed_at")).read().split()
    recs = con.execute("select key, status, error, measured_on from measurements "
                       "order by rowid").fetchall()
    keys = [k for k, *_ in recs]
    lost = sum("servers lost" in (e or "") for _, _, e, _ in recs)
    after = Counter(json.loads(m)["gpu_index"] for _, _, _, m in recs[int(at):] if m)
    log = open(os.path.join(root, f"gpu{gpus}.serve.log")).read()
    restarted = f"server gpu {gpus - 1} exited with code" in log
    ok = len(keys) == kill_trials and len(set(keys)) == len(keys) and not lost
    print(f"killed server (gpu {gpus - 1}, pid {victim}, at {at} of {kill_trials} records): "
          f"{len(keys)} records, {len(set(keys))} distinct (missing {kill_trials - len(set(keys))}, "
          f"repeated {len(keys) - len(set(keys))}), {lost} failed for lost servers; restarted: "
          f"{'yes' if restarted else 'no'}; records after the kill per GPU {dict(sorted(after.items()))}"
          f" -> {'NOTHING LOST OR REPEATED' if ok else 'CHECK FAILED'}")
except (OSError, ValueError, sqlite3.Error) as e:
    print(f"killed-server check: not run or unreadable ({e})")
PY
