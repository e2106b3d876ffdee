#!/usr/bin/env bash
# On the H100 machine (carry .devbundle and .devcarry; run experiments/device/lean_tree.sh out
# first, to fit the carry limit): space v3's ladder and shapes again (kernels prebuilt here into
# .devcarry/ladder_build.json by bocast/tools/hopper_ladder.py build), an exported v3 kernel
# (.devcarry/exports/*) loaded and checked against the runner, the RPC check (RPC/local ratio),
# and live tuning on v3 (CONFIGS, as experiments/device/live_compare.sh takes them).
set -uo pipefail
source .devbundle/unpack.sh
export BOCAST_GIT_SHA=${BOCAST_GIT_SHA:-unknown}
python3 -m bocast.tools.hopper_ladder run .devcarry/ladder_build.json "$OUT/ladder.json" \
    --rounds 5 > "$OUT/ladder.txt" 2>&1
tail -60 "$OUT/ladder.txt"
EXPORTS=".devcarry/exports/*" bash experiments/device/export_check.sh 2>&1 | tail -8
mkdir -p /tmp/rpc
OUT=/tmp/rpc TRIALS=${RPC_TRIALS:-48} TOP=6 ROUNDS=3 BUDGET_S=200 \
    bash experiments/device/rpc_check.sh 2>&1 | tail -14
tar -C /tmp -czf "$OUT/rpc.tar.gz" rpc
[ -n "${CONFIGS:-}" ] && BUDGET_S=${LIVE_S:-200} bash experiments/device/live_compare.sh 2>&1 | tail -30
