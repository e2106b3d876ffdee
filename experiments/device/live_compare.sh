#!/usr/bin/env bash
# On the H100 machine: live comparisons, one after another, stopped after BUDGET_S seconds in
# all. Carry .devbundle (TVM and xgboost archives) and, to resume, .devcarry/runs.tar.gz (the
# record stores of earlier calls: a store resumes where it stopped). Everything written (stores,
# MetaSchedule's database, results) is packed into $OUT/live.tar.gz.
# CONFIGS lists config files, each optionally with ":LABEL,LABEL" to run only those strategies:
#   CONFIGS="experiments/compare/live_gemm_1024_1024_1024.yaml:bo-becbo,cga" \
#   BUDGET_S=540 bash experiments/device/live_compare.sh
set -uo pipefail
source .devbundle/unpack.sh
export BOCAST_GIT_SHA=${BOCAST_GIT_SHA:-unknown}
python3 -c "import xgboost; print('xgboost', xgboost.__version__)"
[ -f .devcarry/runs.tar.gz ] && tar -xzf .devcarry/runs.tar.gz
names=""
for item in $CONFIGS; do
  names="$names $(python3 -c "import yaml,sys; print(yaml.safe_load(open(sys.argv[1]))['name'])" "${item%%:*}")"
done
compare_all() {
  for item in $CONFIGS; do
    c=${item%%:*}; only=${item#"$c"}; only=${only#:}
    name=$(python3 -c "import yaml,sys; print(yaml.safe_load(open(sys.argv[1]))['name'])" "$c")
    python3 -m bocast.cli compare "$c" ${only:+--only "$only"} >> "/tmp/$name.log" 2>&1
    echo "$name: exit $?"; grep -v "^  " "/tmp/$name.log" | tail -22
  done
}
export -f compare_all; export CONFIGS
timeout "${BUDGET_S:-540}" bash -c compare_all
for name in $names; do
  cp "/tmp/$name.log" "runs/$name/compare.log" 2>/dev/null
  for db in runs/"$name"/*.db; do  # one file per store: fold the WAL in
    python3 -c "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute('PRAGMA wal_checkpoint(TRUNCATE)'); c.close()" "$db"
  done
done
tar -czf "$OUT/live.tar.gz" --exclude='*.db-wal' --exclude='*.db-shm' \
    $(for n in $names; do echo runs/$n; ls experiments/results/$n.* 2>/dev/null; done)
ls -la "$OUT"
