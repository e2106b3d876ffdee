#!/usr/bin/env bash
# On the GPU machine (device tool, carry .devbundle; `bash experiments/device/lean_tree.sh out`
# first): several default-command tunes at once, one queue per GPU of the machine (x2, x4: the
# device time of one call buys a tune per GPU instead of one). Each queue runs its jobs one after
# another on its own GPU (CUDA_VISIBLE_DEVICES) with the machine's cores split evenly among the
# queues (--set runner_options.workers=CORES/GPUS: on an x4, 16 build workers per tune, as on a
# one-GPU H200), every tune cold (an empty records library of its own, --warm-start none) unless
# its line says otherwise. Each tune's figure is its own: the run's final re-timing pairs its
# best kernels with the vendor call in one process on its GPU (docs/export.md); queues on other
# GPUs share only the CPU, which builds, and never the GPU a kernel is timed on.
#   JOBS=experiments/device/jobs/breadth_a.txt bash experiments/device/parallel_tunes.sh
# A jobs file: one tune per line, `QUEUE NAME ARGS...` (QUEUE 0..GPUS-1; ARGS are `bocast tune`'s;
# blank lines and # comments skipped); a line whose NAME starts with `py:` runs
# experiments/device/NAME-without-py:.py ARGS on that queue's GPU instead (context timings), one
# whose NAME starts with `sh:` the device script experiments/device/NAME-without-sh:.sh (its
# environment: ARGS are not passed; its files land in $OUT beside this script's, its last lines
# in this script's output).
# RUN_S kills a tune (SEARCH_S is its --seconds); a tune cut short keeps its stored trials; a
# job that could not end within BUDGET_S of the start is skipped (the tables and files still come). A
# line's own --trials/--seed/--warm-start come after the defaults, so they win.
# Table last: per tune, trials, figure, best TFLOPS, the reference's, the ratio, key knobs.
# Everything lands under $OUT (parallel_tunes.tar.gz: logs, records, summaries, clocks).
set -uo pipefail
source .devbundle/unpack.sh
export BOCAST_GIT_SHA=${BOCAST_GIT_SHA:-unknown}
JOBS=${JOBS:?a jobs file: JOBS=experiments/device/jobs/NAME.txt}
SEARCH_S=${SEARCH_S:-120} RUN_S=${RUN_S:-160} TRIALS=${TRIALS:-64}
gpus=$(nvidia-smi -L | wc -l)
cores=$(nproc)
workers=$(( cores / gpus ))
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu \
  --format=csv,noheader
echo "gpus $gpus; cores $cores ($workers build workers per queue); $(nvcc --version | tail -1);" \
  "torch $(python3 -c 'import torch; print(torch.__version__)')"
root=runs/parallel_tunes
mkdir -p "$root"
cp "$JOBS" "$root/jobs.txt"
# clocks of every GPU every 5 s while the queues run
nvidia-smi --query-gpu=timestamp,index,clocks.sm,temperature.gpu,power.draw,utilization.gpu \
  --format=csv,noheader -l 5 > "$root/clocks.csv" 2>/dev/null &
smi=$!

t_start=$(date +%s)
run_queue() {  # $1: the queue (= GPU index)
  local q=$1 line name args out t0 need
  grep -v '^\s*#' "$JOBS" | grep -v '^\s*$' | while read -r queue name args; do
    [ "$queue" = "$q" ] || continue
    need=$RUN_S; [[ $name == sh:* ]] && need=${SH_S:-540}
    if (( $(date +%s) - t_start + need > ${BUDGET_S:-100000} )); then
      echo "queue $q: $name skipped (BUDGET_S=$BUDGET_S would not hold its ${need} s)"; continue
    fi
    if [ "$q" -ge "$gpus" ]; then
      echo "queue $q: $name skipped (the machine has $gpus GPUs)"; continue
    fi
    out=$root/$name
    mkdir -p "$out"
    t0=$(date +%s)
    if [[ $name == sh:* ]]; then  # a whole device script on this queue's GPU
      CUDA_VISIBLE_DEVICES=$q timeout "${SH_S:-540}" bash "experiments/device/${name#sh:}.sh" \
        > "$out/stdout.log" 2>&1
      echo "queue $q: $name exit $? in $(( $(date +%s) - t0 )) s"; tail -n 30 "$out/stdout.log"
      continue
    fi
    if [[ $name == py:* ]]; then
      # shellcheck disable=SC2086
      CUDA_VISIBLE_DEVICES=$q timeout "$RUN_S" python3 "experiments/device/${name#py:}.py" $args \
        > "$out/result.json" 2> "$out/stderr.log"
      echo "queue $q: $name exit $? in $(( $(date +%s) - t0 )) s"
      continue
    fi
    # shellcheck disable=SC2086
    CUDA_VISIBLE_DEVICES=$q BOCAST_RECORDS=$(mktemp -d) timeout "$RUN_S" python3 -m bocast.cli \
      tune --trials "$TRIALS" --seconds "$SEARCH_S" --seed "${SEED:-0}" --output "$out" --json \
      --set runner_options.workers=$workers $args > "$out/tune.log" 2>&1
    echo "queue $q: $name exit $? in $(( $(date +%s) - t0 )) s"
  done
}

for (( q = 0; q < gpus; q++ )); do run_queue "$q" & done
wait $(jobs -p | grep -v "^$smi$")
kill "$smi" 2>/dev/null

# this call's jobs only: a warm machine keeps runs/ between calls (the folders of an earlier
# call's tunes are neither printed nor packed again)
names=$(grep -v '^\s*#' "$JOBS" | awk 'NF {print $2}')
# shellcheck disable=SC2086
python3 - "$root" $names <<'PY'
import json, os, sys
sys.path.insert(0, "experiments/device")
from store_rows import store, worst_ok  # noqa: E402

root, names = sys.argv[1], sys.argv[2:]
for res in sorted(f"{root}/{n}/result.json" for n in names
                  if n.startswith("py:") and os.path.exists(f"{root}/{n}/result.json")):
    print(f"## {os.path.basename(os.path.dirname(res))}")
    print(open(res).read().strip() or open(res.replace("result.json", "stderr.log")).read()[-800:])
print()
print("| tune | op | shape | dtype | space | trials | figure | best TFLOPS | ref TFLOPS | "
      "best / ref | reference | worst ok err | key knobs of the best |")
print("|" + " --- |" * 13)
KEYS = ("bm", "bn", "bk", "stages", "a_load", "split_k", "split_reduce", "swap_ab", "cluster",
        "arrangement", "epilogue", "tail_split")
for name in sorted(set(names)):
    out = f"{root}/{name}/"
    if name.startswith(("py:", "sh:")) or not os.path.isdir(out):
        continue
    if not os.path.exists(f"{out}summary.json"):
        tail = "".join(open(f"{out}tune.log").readlines()[-3:]).strip().replace("\n", " / ") \
            if os.path.exists(f"{out}tune.log") else "no log"
        rows = store(f"{out}records.db", tflops=True)[2] if os.path.exists(
            f"{out}records.db") else []
        best = max((r[3] or 0 for r in rows if r[1] == "ok"), default=0)
        print(f"| {name} | no summary ({len(rows)} stored, best in-run {best:.1f}): {tail[:300]} |")
        continue
    s = json.load(open(f"{out}summary.json"))
    w, ref, rows = store(f"{out}records.db")
    cfg = s.get("best_config") or {}
    print(f"| {name} | {w.get('op')} | {','.join(map(str, w.get('shape', [])))} | "
          f"{w.get('dtype')} | {w.get('space')} | {s.get('trials')} | {s.get('figure')} | "
          f"{s.get('best_tflops') or 0:.1f} | {s.get('reference_tflops') or 0:.1f} | "
          f"{s.get('best_vs_reference') or 0:.3f} | {ref.get('what', '')} | {worst_ok(rows)} | "
          f"{' '.join(f'{k}={cfg[k]}' for k in KEYS if k in cfg)} |")
PY
# per tune: the re-timed kernels' in-run figure (paired: the ratio timed beside the reference;
# alone: TFLOPS over the reference timed at the start) against their re-timed ratio, and the
# median GPU seconds of a trial (run_s)
# shellcheck disable=SC2086
python3 - "$root" $names <<'PY'
import json, os, sqlite3, statistics, sys

root, names = sys.argv[1], sys.argv[2:]
print()
print("| tune | paired | median run_s | re-timed kernels: in-run -> re-timed (tail_split) |")
print("| --- | --- | --- | --- |")
for name in sorted(set(names)):
    out = f"{root}/{name}/"
    if name.startswith(("py:", "sh:")) or not os.path.exists(f"{out}summary.json"):
        continue
    s = json.load(open(f"{out}summary.json"))
    db = sqlite3.connect(f"{out}records.db")
    runs = [r[0] for r in db.execute("select run_s from measurements where run_s is not null")]
    cfgs = {}
    for k, c in db.execute("select key, config from measurements"):
        cfgs[k] = json.loads(c) if isinstance(c, str) and c.startswith("{") else {}
    ref0 = (s.get("in_run") or {}).get("reference_tflops") or 0
    cells = []
    for k in (s.get("retimed") or {}).get("kernels", []):
        inrun = k.get("in_run_vs_reference") or ((k.get("in_run_tflops") or 0) / ref0 if ref0 else 0)
        cells.append(f"{inrun:.3f} -> {k.get('vs_reference') or 0:.3f} "
                     f"({cfgs.get(k.get('key'), {}).get('tail_split', '?')})")
    print(f"| {name} | {s.get('timing', {}).get('paired')} | "
          f"{statistics.median(runs) if runs else 0:.2f} | {'; '.join(cells)} |")
PY
packed="$root/jobs.txt $root/clocks.csv"
for n in $names; do [ -d "$root/$n" ] && packed="$packed $root/$n"; done
# shellcheck disable=SC2086
tar -czf "$OUT/parallel_tunes.tar.gz" --exclude='*.db-wal' --exclude='*.db-shm' $packed
