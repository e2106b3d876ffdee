#!/usr/bin/env bash
# On the GPU machine (device tool, carry .devbundle; `bash experiments/device/lean_tree.sh out`
# first if the carry is too large): the wgmma race of space v3's scalar epilogue (ptxas read a
# 16-bit output's accumulators above the final wgmma.wait_group: bf16:bf16 wrong_result, 7 rows
# of the H200 datasets gemm_2048_8192_2048_bf16_bf16_v3 and gemm_4096_11008_4096_bf16_bf16_v3).
# Built by this tree's generator, run and checked against the float64 reference (tolerance 0.01
# for a 16-bit output): those 7 configurations, then SAMPLE (default 20) random scalar /
# inflight-1 configurations each of bf16:bf16 and fp16:fp16 GEMM 2048x8192x2048.
#   bash experiments/device/wgmma_race_check.sh     # about 1-2 minutes on a 16-core H200
# Success: every row ok (no wrong_result), the largest rel_error of each group below 0.01.
# Stores and the log land under $OUT (wgmma_race_check.tar.gz); the table is printed last.
set -uo pipefail
source .devbundle/unpack.sh
export BOCAST_GIT_SHA=${BOCAST_GIT_SHA:-unknown}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
echo "cores $(nproc); $(nvcc --version | tail -1)"
work=/tmp/wgmma_race_check; rm -rf "$work"; mkdir -p "$work"
t0=$(date +%s)
timeout "${BUDGET_S:-300}" python3 experiments/device/wgmma_race_check.py "$work" "${SAMPLE:-20}" \
  > "$work/check.log" 2>&1
echo "exit $? in $(( $(date +%s) - t0 )) s"
for db in "$work"/*.db; do  # fold the WAL into the main file so one file carries the store
  python3 -c "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute('PRAGMA wal_checkpoint(TRUNCATE)'); c.close()" "$db"
done
tar -C "$work" -czf "$OUT/wgmma_race_check.tar.gz" --exclude='*.db-wal' --exclude='*.db-shm' .
grep -v "^| " "$work/check.log" | tail -30
echo
grep "^| " "$work/check.log"
