#!/usr/bin/env bash
# On the GPU machine (carry .devbundle and the picks file): Nsight Compute on one tuned kernel
# and on cuBLAS for the same workload (lab/profile_kernel.py), full section reports under
# $OUT, key lines printed. Clocks left alone (--clock-control none: the device README's
# method); ncu reads counters on Firecracker machines only (KINDS.md). CUBLAS=0 skips cuBLAS's.
#   PICKS=.devcarry/picks/gemm_4096_4096_4096.json INDEX=3 bash experiments/device/profile.sh
set -uo pipefail
[ -n "${PYTHONPATH:-}" ] || source .devbundle/unpack.sh
name=${NAME:-$(basename "$PICKS" .json)_$INDEX}
python3 lab/profile_kernel.py build "$PICKS" --index "${INDEX:-0}" --out /tmp/k.pkl || exit 1
kernel=$(python3 -c "import pickle; print(pickle.load(open('/tmp/k.pkl','rb'))['kernel'])")
sections="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats
          --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis"
# the third launch of each (caches and clocks warm); cuBLAS's GEMM kernels by their name
# (sm90_xmma_*, nvjet_*, cutlass_*), not the input generator's elementwise kernels
ncu --clock-control none $sections -k "regex:^$kernel\$" --launch-skip 2 --launch-count 1 \
    python3 lab/profile_kernel.py launch /tmp/k.pkl > "$OUT/ncu_${name}_tvm.txt" 2>&1
sides=tvm
if [ "${CUBLAS:-1}" != 0 ]; then
  ncu --clock-control none $sections -k "regex:gemm|nvjet|xmma|cutlass" --launch-skip 2 \
      --launch-count 1 python3 lab/profile_kernel.py launch /tmp/k.pkl \
      > "$OUT/ncu_${name}_cublas.txt" 2>&1
  sides="tvm cublas"
fi
for side in $sides; do
  echo "== $side"
  grep -E '^  [a-zA-Z_0-9]+.*\(|Duration|Grid Size|Block Size|Cluster Size|Compute \(SM\) Throughput|Memory Throughput|DRAM Throughput|Registers Per|Achieved Occupancy|Theoretical Occupancy|Block Limit|Executed Ipc Active|Issue Slots Busy|L1/TEX Hit|L2 Hit|Shared Memory Configuration Size|Dynamic Shared|Stall|Warp Cycles Per Issued' \
      "$OUT/ncu_${name}_$side.txt" | head -40
done
