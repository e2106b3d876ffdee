#!/usr/bin/env bash
# On the H100 machine (carry .devbundle): fault injection, Tensor Core ceiling, builder/runner
# throughput, and SIGKILL-and-resume with the GPU runner. Results under $OUT.
set -uo pipefail
source .devbundle/unpack.sh
python3 -m tests.gpu.faults --out "$OUT/faults.json" 2>&1 | tail -12
python3 lab/ceiling.py --out "$OUT/ceiling.json" 2>&1 | tail -8
python3 lab/bench_measure.py --shape 4096,4096,4096 --n 256 --runs 64 --out "$OUT/bench.json" 2>&1 | tail -3
python3 -m tests.gpu.resume_demo --store "$OUT/resume.db" --runner local --sample 60 --kill-at 20 2>&1 | tail -2
