#!/usr/bin/env bash
# On the GPU machine (device tool, carry .devbundle; `bash experiments/device/lean_tree.sh out`
# first), written 2026-11-29 (twenty-first session): tail_split (_hopper_tail: a persistent
# walk's last, partial round cut into k slices that add into an output slice 0 zeroes first).
# 1. Correctness: random tail_split configurations (2, 4, 8; every other knob free: epilogues,
#    ping-pong, ring depths) of GEMMs and a bmm with a partial last round, each built, run and
#    compared with the reference by the runner (`bocast measure --sample`); expectation: all ok.
# 2. Across launches (tail_relaunch.py): sampled tail kernels relaunched into a NaN-poisoned
#    output, each launch checked, the flags read back (all 0), then a burst and a last check.
# 3. The picks of skinny_picks.py's set tail, re-timed beside cuBLAS (its expectation there).
# A wrong result, a hang or a flag left non-zero is a bug, and no timing of section 3 counts.
#   BOCAST_GIT_SHA=<sha> bash experiments/device/tail_check.sh     # about 5 minutes
set -uo pipefail
source .devbundle/unpack.sh
export BOCAST_GIT_SHA=${BOCAST_GIT_SHA:-unknown}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
export SAMPLE=${SAMPLE:-16} EACH_S=${EACH_S:-20}
root=runs/tail_check
mkdir -p "$root"
TAILS="--fix tail_split=2 --fix tail_split=4 --fix tail_split=8"
bash experiments/device/sample_checks.sh "$root" tail_split > "$root/table.txt" <<EOT
gemm_2048x28672x8192|gemm|2048,28672,8192|fp16:fp32|$TAILS
gemm_8192x4096x4096|gemm|8192,4096,4096|fp16:fp32|$TAILS
gemm_ragged|gemm|1000,3000,2048|fp16:fp32|$TAILS
gemm_bf16|gemm|2048,4096,4096|bf16:fp32|$TAILS
gemm_fp8|gemm|2048,4096,4096|e4m3:fp32|$TAILS
bmm|bmm|12,512,512,1024|fp16:fp32|$TAILS
EOT
t0=$(date +%s)
timeout 150 python3 experiments/device/tail_relaunch.py "$root/relaunch.json" \
  "2048,28672,8192 1000,3000,2048" > "$root/relaunch.txt" 2> "$root/relaunch.log"
echo "relaunch: exit $? in $(( $(date +%s) - t0 )) s"
tar -czf "$OUT/tail_check.tar.gz" --exclude='*.db-wal' --exclude='*.db-shm' "$root"
SET=tail bash experiments/device/picks_remeasure.sh > "$OUT/tail_picks.txt" 2>&1
cat "$root/table.txt"
cat "$root/relaunch.txt"; tail -n 3 "$root/relaunch.log"
tail -n 20 "$OUT/tail_picks.txt"
