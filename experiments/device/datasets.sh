#!/usr/bin/env bash
# On the H100 machine (carry .devbundle, and runs/ to resume): measure uniformly sampled GEMM
# configurations into stores under $OUT and export compact datasets.
#   SETS="1024,1024,1024:1000 32,2048,1000:500" bash experiments/device/datasets.sh
set -uo pipefail
source .devbundle/unpack.sh
for item in $SETS; do
  shape=${item%%:*}; n=${item##*:}; name=gemm_${shape//,/_}
  [ -f "runs/$name.db" ] && cp "runs/$name.db" "$OUT/$name.db"   # resume a carried store
  python3 -m bocast.cli measure gemm --shape "$shape" --sample "$n" --seed 0 --store "$OUT/$name.db" \
      --progress-every 250 --export "$OUT/$name" --json 2>&1 | tee "$OUT/$name.log" | tail -4 | cut -c1-400
done
