#!/usr/bin/env bash
# On the GPU machine (device tool, carry .devbundle; `bash experiments/device/lean_tree.sh out`
# first), written 2026-11-29 (twenty-first session): is the running ring position
# (_hopper_ring.py, landed in the twentieth session: a (stage, phase) pair where S is not a
# power of two) correct on every path that has one? The GPU checked it only on 18 cooperative
# 1x1 GEMM kernels with the v2 epilogue. Here random configurations of every v3 operator with
# the ring fixed at 3, 5, 6 (and 10, 12 where the space has them), every other knob free (the
# tma epilogue, split K atomic and cluster, clusters, ping-pong, swap_ab as sampled), each
# built, run and compared with the reference by the runner: `bocast measure --sample`.
# Expectation: every status ok; a wrong_result or a hang is a bug of the running pair.
# First (SET=waves of skinny_picks.py, if WAVES=1) the wave-quantization premise at a large GEMM
# (the set's comment says what would confirm or refute it), re-timed beside cuBLAS.
#   BOCAST_GIT_SHA=<sha> bash experiments/device/ring_sweep.sh      # about 6-8 minutes
set -uo pipefail
source .devbundle/unpack.sh
export BOCAST_GIT_SHA=${BOCAST_GIT_SHA:-unknown}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
export SAMPLE=${SAMPLE:-16} EACH_S=${EACH_S:-20} BUDGET_S=${BUDGET_S:-540}
root=runs/ring_sweep
mkdir -p "$root"
t_start=$(date +%s)
if [ "${WAVES:-1}" = 1 ]; then  # first: a re-timing wants the GPU cool of nothing else
  SET=waves bash experiments/device/picks_remeasure.sh > "$OUT/waves.txt" 2>&1
  echo "waves: $(( $(date +%s) - t_start )) s"
fi
DEEP="--fix stages=3 --fix stages=5 --fix stages=6 --fix stages=10 --fix stages=12"
SHALLOW="--fix stages=3 --fix stages=5 --fix stages=6"
# name | operator | shape | dtype | fixes (sample_checks.sh; its table printed last)
T_START=$t_start bash experiments/device/sample_checks.sh "$root" stages > "$root/table.txt" \
  <<EOF
gemm_ragged|gemm|1000,1000,4040|fp16:fp32|$DEEP
gemm_tma|gemm|1024,1536,2048|fp16:fp32|$DEEP --fix epilogue=tma
gemm_split|gemm|64,6144,4096|fp16:fp32|$DEEP --fix split_k=2 --fix split_k=4
gemm_fp8|gemm|512,1024,2048|e4m3:bf16|$DEEP
bmm|bmm|8,256,512,320|fp16:fp32|$DEEP
gemv|gemv|4096,4096,8|fp16:fp32|$DEEP
conv2d_s1|conv2d|4,28,28,128,128,3,3,1,1,1|fp16:fp32|$SHALLOW
conv2d_s2|conv2d|4,28,28,128,128,3,3,2,1,1|fp16:fp32|$SHALLOW
conv2d_dilated|conv2d_dilated|4,29,29,128,128,3,3,1,2,2|fp16:fp32|$SHALLOW
conv2d_transpose|conv2d_transpose|4,16,16,128,64,4,4,2,1,1,0|fp16:fp32|$SHALLOW
conv1d|conv1d|4,500,256,256,3,1,1,1|fp16:fp32|$SHALLOW
conv3d|conv3d|2,8,14,14,64,64,3,3,3,1,1,1|fp16:fp32|$SHALLOW
EOF
tar -czf "$OUT/ring_sweep.tar.gz" --exclude='*.db-wal' --exclude='*.db-shm' "$root"
cat "$root/table.txt"
[ -f "$OUT/waves.txt" ] && tail -n 12 "$OUT/waves.txt"
