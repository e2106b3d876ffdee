#!/usr/bin/env bash
# On the H100 machine (device tool; carry .devbundle and the exported folders): each folder that
# `bocast export` wrote on the CPU is loaded in a fresh process, checked against torch and timed
# with the runner's method beside the same configuration through the runner, ROUNDS rounds
# (tests/gpu/export_check.py); JSON under $OUT, the table on stdout.
#   EXPORTS=".devcarry/exports/*" bash experiments/device/export_check.sh
set -uo pipefail
[ -n "${PYTHONPATH:-}" ] || source .devbundle/unpack.sh
export BOCAST_GIT_SHA=${BOCAST_GIT_SHA:-unknown}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,clocks.max.sm --format=csv,noheader
# shellcheck disable=SC2086 - EXPORTS is a glob
python3 -m tests.gpu.export_check ${EXPORTS:-.devcarry/exports/*} --rounds "${ROUNDS:-5}" \
    --out "$OUT/export_check.json" 2>&1 | tee "$OUT/export_check.log"
