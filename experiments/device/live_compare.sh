#!/usr/bin/env bash
# On the H100 machine (carry .devbundle with the TVM and xgboost archives; carry runs/ to
# resume): one live comparison, stopped after BUDGET_S seconds if unfinished. Everything it
# wrote (record stores, MetaSchedule's database, results) is packed into $OUT/live.tar.gz;
# carried back as runs/, the stores resume where they stopped.
#   CONFIG=experiments/compare/live_gemm_1024_1024_1024.yaml BUDGET_S=540 \
#   bash experiments/device/live_compare.sh
set -uo pipefail
source .devbundle/unpack.sh
export BOCAST_GIT_SHA=${BOCAST_GIT_SHA:-unknown}
python3 -c "import xgboost; print('xgboost', xgboost.__version__)"
name=$(python3 -c "import yaml,sys; print(yaml.safe_load(open(sys.argv[1]))['name'])" "$CONFIG")
timeout "${BUDGET_S:-540}" python3 -m bocast.cli compare "$CONFIG" > "$OUT/$name.log" 2>&1
echo "compare exit $?"
for db in runs/"$name"/*.db; do  # one file per store: fold the WAL in
  python3 -c "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute('PRAGMA wal_checkpoint(TRUNCATE)'); c.close()" "$db"
done
tar -czf "$OUT/live.tar.gz" --exclude='*.db-wal' --exclude='*.db-shm' runs/"$name" \
    $(ls experiments/results/"$name".* 2>/dev/null)
grep -v "^  " "$OUT/$name.log" | tail -25
