#!/usr/bin/env bash
# On nvidia-h200 (device tool, carry .devbundle; no GPU work: the host's cores are the point):
# issue 41, why BO's proposals doubled in the pipelined fleet loop (0.39-0.48 s -> 0.96-1.08 s,
# experiments/results/v2_pairs_fleet_h200x2). lab/bench_pending.py times BO's ask of a batch
# with the previous batch pending and without it (GEMM 4096^3, space v3's live space, 288 told
# trials of the shipped dataset, batch 16 and 32), by phase, in each arm:
#   before: torch loaded before bocast (OpenMP's default wait policy: threads spin for work);
#   after:  bocast first (bocast/__init__.py sets OMP_WAIT_POLICY=PASSIVE where unset);
# each with BO's threads option at 4 (the default) and 1, on an idle host and beside LOAD busy
# processes (default: one per core, as the 2-GPU run's 32 build workers on its 32 cores; the
# 1-GPU run had 16 on 32: LOAD=8 here), which stand for the builds the pipelined loop overlaps
# with its asks. One table last: the medians of ask without and with pending points, the
# process's CPU seconds, the GP fit's and the believer's share.
#   bash experiments/device/ask_under_load.sh            # about 4 minutes on a 16-core H200
#   LOAD=8 REPEATS=3 bash experiments/device/ask_under_load.sh
#   SIZES="160 288" BATCHES=16 ...: other told counts and batches (lab/bench_pending.py)
# Each arm is at most ARM_S=90 s (an arm cut short prints no row). Results: $OUT/ask_under_load.
set -uo pipefail
OUT=${OUT:?set OUT to the output folder}
source .devbundle/unpack.sh
export BOCAST_GIT_SHA=${BOCAST_GIT_SHA:-unknown}
cores=$(nproc)
LOAD=${LOAD:-$cores} REPEATS=${REPEATS:-2} ARM_S=${ARM_S:-90} SIZES=${SIZES:-288} BATCHES=${BATCHES:-"16 32"}
echo "cores $cores; load $LOAD busy processes in the loaded arms"
root=$OUT/ask_under_load
mkdir -p "$root"
busy=()
stop_busy() { for p in "${busy[@]}"; do kill "$p" 2>/dev/null; done; busy=(); }
trap stop_busy EXIT

for load in 0 "$LOAD"; do
  stop_busy
  for _ in $(seq 1 "$load"); do
    python3 -c 'while True: pass' &
    busy+=($!)
  done
  for threads in 4 1; do
    for arm in before after; do
      flag=$([ "$arm" = before ] && echo --torch-first)
      name=load${load}_threads${threads}_$arm
      env -u OMP_WAIT_POLICY timeout "$ARM_S" python3 lab/bench_pending.py $flag \
        --sizes $SIZES --batch $BATCHES --repeats "$REPEATS" --threads "$threads" \
        --out "$root/$name.json" > "$root/$name.log" 2>&1
      echo "$name: exit $?"
    done
  done
done
stop_busy

python3 - "$root" <<'PY'
import glob, json, os, sys
print("| load | threads | arm | OMP_WAIT_POLICY | q | ask s | ask with pending s | cpu s "
      "(pending) | fit s | believe s | same picks as before |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
runs = {}
for path in sorted(glob.glob(f"{sys.argv[1]}/*.json")):
    runs[os.path.basename(path)[:-5]] = json.load(open(path))
def order(name):
    load, threads, arm = name.split("_")
    return int(load[4:]), -int(threads[7:]), arm != "before"


for name, d in sorted(runs.items(), key=lambda kv: order(kv[0])):
    load, threads, arm = name.split("_")
    other = runs.get(f"{load}_{threads}_before")
    for i, r in enumerate(d["rows"]):
        same = "" if other is None else str(other["rows"][i]["picks"] == r["picks"])
        p, m = r["median"]["pending"], r["median"]["plain"]
        print(f"| {load[4:]} | {threads[7:]} | {arm} | {d['omp_wait_policy']} | {r['q']} | "
              f"{m['total']:.3f} | {p['total']:.3f} | {p['cpu']:.3f} | {p.get('fit', 0):.3f} | "
              f"{p.get('believe', 0):.3f} | {same} |")
PY
