#!/usr/bin/env bash
# On the H100 machine (carry .devbundle): space v3's ladder and shapes (kernels prebuilt here by
# `python3 -m bocast.tools.hopper_ladder build .devcarry/ladder_build.json`), then
# a uniform sample of space v3 at 4096^3 measured into a store and exported as a dataset.
#   N=300 bash experiments/device/hopper.sh
set -uo pipefail
source .devbundle/unpack.sh
export BOCAST_GIT_SHA=${BOCAST_GIT_SHA:-unknown}
python3 -m bocast.tools.hopper_ladder run .devcarry/ladder_build.json \
    "$OUT/ladder.json" --rounds 5 > "$OUT/ladder.txt" 2>&1
tail -50 "$OUT/ladder.txt"
work=/tmp/v3; mkdir -p $work
name=gemm_4096_4096_4096_v3
timeout "${BUDGET_S:-300}" python3 -m bocast.cli measure gemm --shape 4096,4096,4096 --space v3 \
    --sample "${N:-300}" --seed 0 --store $work/$name.db --batch 60 --progress-every 60 \
    --max-seconds "${MAX_S:-200}" --run-timeout 10 --export $work/$name --json \
    > $work/$name.log 2>&1
echo "measure: exit $?"; tail -5 $work/$name.log | cut -c1-400
python3 -c "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute('PRAGMA wal_checkpoint(TRUNCATE)'); c.close()" $work/$name.db
tar -C $work -czf "$OUT/v3_dataset.tar.gz" --exclude='*.db-wal' --exclude='*.db-shm' .
