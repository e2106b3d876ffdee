#!/usr/bin/env bash
# On the H100 machine (device tool, carry .devbundle): 50 random configurations of GEMM 1024^3
# and 4096^3 built (nvcc, 16 workers), run, checked against torch, timed; stores under $OUT.
set -uo pipefail
source .devbundle/unpack.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,clocks.max.sm --format=csv,noheader
echo "cores $(nproc); $(nvcc --version | tail -1)"
N=${N:-50}
for s in ${SHAPES:-1024,1024,1024 4096,4096,4096}; do
  name=check_${s//,/_}
  python3 -m bocast.cli measure gemm --shape "$s" --sample "$N" --seed 0 --store "$OUT/$name.db" \
      --json 2>&1 | tee "$OUT/$name.log" | tail -4
done
