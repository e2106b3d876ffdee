#!/usr/bin/env bash
# On the H100 machine: issue 26's live check of the default warm start. For each new shape (in
# no shipped record) and seed, `bocast tune OP --shape S` as a user runs it (the one-command
# defaults: BO, batch 16, warm_start auto), WARM_TRIALS trials ("warm", default 64; 16 is the
# first batch, what issue 26's criterion reads), and the cold default with
# --warm-start none, 200 trials ("cold"). Every run sees an empty records library of its own
# (BOCAST_RECORDS), so its sources are the shipped datasets only and no run seeds another.
# Resumable: carry .devbundle and, after the first call, .devcarry/warm_live.tar.gz (the stores
# so far; a store resumes where it stopped). Everything is packed into $OUT/warm_live.tar.gz.
#   ARMS="cold" SEEDS="0 1 2" BUDGET_S=540 bash experiments/device/warm_default.sh
set -uo pipefail
source .devbundle/unpack.sh
export BOCAST_GIT_SHA=${BOCAST_GIT_SHA:-unknown}
[ -f .devcarry/warm_live.tar.gz ] && tar -xzf .devcarry/warm_live.tar.gz
export ARMS=${ARMS:-"warm cold"} SEEDS=${SEEDS:-"0 1 2"}
export SHAPES=${SHAPES:-"gemm:2048,6144,4096 bmm:32,1024,1024,128 conv2d:16,28,28,128,128,3,3,1,1,1"}
run_all() {
  for arm in $ARMS; do for seed in $SEEDS; do for item in $SHAPES; do
    op=${item%%:*}; shape=${item#*:}
    out=runs/warm_live/${op}_${shape//,/x}/${arm}_s${seed}
    mkdir -p "$out"
    if [ "$arm" = warm ]; then extra=(--trials "${WARM_TRIALS:-64}")
    else extra=(--trials 200 --warm-start none); fi
    t0=$(date +%s)
    BOCAST_RECORDS=$(mktemp -d) python3 -m bocast.cli tune "$op" --shape "$shape" --seed "$seed" \
      --output "$out" "${extra[@]}" --json > "$out/tune.log" 2>&1
    echo "$op $shape $arm seed $seed: exit $? in $(( $(date +%s) - t0 )) s; $(grep -m1 'best' "$out/tune.log" | tail -c 200)"
  done; done; done
}
export -f run_all
timeout "${BUDGET_S:-540}" bash -c run_all
for db in runs/warm_live/*/*/records.db; do  # one file per store: fold the WAL in
  python3 -c "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute('PRAGMA wal_checkpoint(TRUNCATE)'); c.close()" "$db"
done
tar -czf "$OUT/warm_live.tar.gz" --exclude='*.db-wal' --exclude='*.db-shm' runs/warm_live
ls -la "$OUT"
