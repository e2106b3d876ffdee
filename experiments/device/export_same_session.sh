#!/usr/bin/env bash
# On the H100 machine (carry .devbundle): issue 13's export check with the store measured in the
# same session, so that drift between sessions does not enter the ratio: the best 4096^3 kernel
# of the exhaustive table (its configuration fixed knob by knob) is measured into a fresh store
# by `bocast measure` (the runner's timing), exported from that store by `bocast export`, and
# checked by tests/gpu/export_check.py in a fresh process (loaded, correct, timed the same way,
# beside the runner):  bash experiments/device/export_same_session.sh
# Run on the H100 on 2026-11-24 (at c3202a8): experiments/results/export_same_session_h100.json.
set -uo pipefail
source .devbundle/unpack.sh
export BOCAST_GIT_SHA=${BOCAST_GIT_SHA:-unknown}
work=/tmp/export_same; rm -rf "$work"; mkdir -p "$work"
python3 -m bocast.cli measure gemm --shape 4096,4096,4096 --fix async_copy=on \
    --fix frag_pipeline=ms --fix instr=mma --fix out_vec=4 --fix raster=16 --fix smem_layout=xor \
    --fix stages=3 --fix tile_i=32,4,2 --fix tile_j=32,1,8 --fix tile_k=64,4 --fix unroll=0 \
    --fix vec=8 --fix writeback=shared --all --store "$work/store.db" 2>&1 | tail -3
python3 -m bocast.cli export "$work/store.db" --best --out "$work/gemm_4096_best" 2>&1 | tail -2
PYTHONPATH="$PYTHONPATH" EXPORTS="$work/gemm_4096_best" ROUNDS="${ROUNDS:-15}" \
    bash experiments/device/export_check.sh
cp "$work/store.db" "$OUT/export_same_session_store.db"
