#!/usr/bin/env bash
# On the GPU machine (device tool, carry .devbundle; `bash experiments/device/lean_tree.sh out`
# first), written 2026-11-29 (nineteenth session), run in the twentieth (results/skinny_v2_v3_h200,
# section 2: the tune's re-timing was not the low one; two remeasures differ by 0.02-0.05): why a
# tune's final re-timing reads a skinny kernel 2-4 points lower than `bocast remeasure` does
# (results/skinny_source64_h200: the swap_ab 128 x 64 tile at M 128, N,K = 6144,4096, 0.931-0.949 in
# two tunes' re-timings at 1755-1830 MHz and 660-680 W, 0.967-0.980 in remeasure at 1965 MHz; at M
# 64 0.932-0.948 against 0.967 at 1980 MHz in both). Per shape in SHAPES: the default tune (64
# trials), then at once `bocast remeasure` of its store's best 5 in a fresh process, twice; the same
# kernels three ways in one call, each reading with its clock and power. If the tune's figure is the
# low one again while both remeasures agree, the difference lies in the tune's process, not the GPU.
#   BOCAST_GIT_SHA=<sha> bash experiments/device/retime_gap.sh     # about 3 minutes a shape
set -uo pipefail
source .devbundle/unpack.sh
export BOCAST_GIT_SHA=${BOCAST_GIT_SHA:-unknown}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
root=runs/retime_gap
mkdir -p "$root"
nvidia-smi --query-gpu=timestamp,clocks.sm,temperature.gpu,power.draw,utilization.gpu \
  --format=csv,noheader -lms 500 > "$root/clocks.csv" 2>/dev/null &
smi=$!
SHAPES=${SHAPES:-128,6144,4096 64,6144,4096}
for shape in $SHAPES; do  # unquoted: one word a shape
  name=${shape//,/x}
  BOCAST_RECORDS=$(mktemp -d) timeout "${RUN_S:-60}" python3 -m bocast.cli tune gemm \
    --shape "$shape" --trials 64 --seconds "${SEARCH_S:-40}" --seed 0 --output "$root/$name" \
    --json --set runner_options.workers="$(nproc)" > "$root/$name.tune.log" 2>&1
  echo "tune $shape: exit $?"
  for i in 1 2; do
    timeout 60 python3 -m bocast.tools.remeasure "$root/$name/records.db" --top 5 --rounds 5 \
      --out "$root/remeasure_${name}_$i.json" > "$root/remeasure_${name}_$i.log" 2>&1
    echo "remeasure $shape ($i): exit $?"
  done
done
kill "$smi" 2>/dev/null
tar -czf "$OUT/retime_gap.tar.gz" --exclude='*.db-wal' --exclude='*.db-shm' "$root"
python3 - "$root" <<'PY'
import glob, json, os, statistics as st, sys
root = sys.argv[1]
print("| shape | kernel | tune's re-timing (MHz, W) | remeasure 1 (MHz, W) | remeasure 2 (MHz, W) |")
print("| --- | --- | --- | --- | --- |")


def cell(ratio, readings):
    if ratio is None or not readings:
        return "-"
    return (f"{ratio:.3f} ({st.median(r.get('sm_clock_mhz', 0) for r in readings):.0f}, "
            f"{st.median(r.get('power_w', 0) for r in readings):.0f})")


for summary in sorted(glob.glob(f"{root}/*/summary.json")):
    name = os.path.basename(os.path.dirname(summary))
    tuned = {k["key"]: k for k in json.load(open(summary)).get("retimed", {}).get("kernels", [])}
    again = []
    for i in (1, 2):
        path = f"{root}/remeasure_{name}_{i}.json"
        again.append({k["key"]: k for k in json.load(open(path))["kernels"]}
                     if os.path.exists(path) else {})
    for key, k in tuned.items():
        c = json.loads(key)
        label = (f"{c['bm']}x{c['bn']} s{c['stages']} swap {c.get('swap_ab')} "
                 f"regs {c.get('regs')} {c.get('epilogue')}")
        cells = [cell(k.get("vs_reference"), k.get("readings"))]
        cells += [cell(a[key].get("fraction_of_cublas"), a[key].get("readings"))
                  if key in a else "-" for a in again]
        print(f"| {name} | {label} | {' | '.join(cells)} |")
PY
