#!/usr/bin/env bash
# On the H100 machine (carry .devbundle; carry runs/ to resume): measure EVERY feasible
# configuration of one exhaustive table's sub-space (experiments/exhaustive/*.yaml) into a
# store, one table per call, resumable across calls and device sessions:
#   TABLE=experiments/exhaustive/gemm_4096_4096_4096_v2.yaml BUDGET_S=560 \
#   bash experiments/device/exhaustive.sh
# The measure stops starting batches MARGIN_S (default 150: a batch of 256 waits for its
# slowest build, and some v2 kernels take 40 s in nvcc) before BUDGET_S, so it ends by itself
# and exports what it has; `timeout` is only the backstop. Configurations go in a seeded random
# order, so a part-measured table is a uniform sample of its sub-space.
# $OUT/NAME.tar.gz then holds the store (carry it back as runs/NAME.db: the next call measures
# only what is missing), the exported dataset (NAME.csv.xz + NAME.json; its "complete" field
# says whether the whole table is in) and the log.
set -uo pipefail
source .devbundle/unpack.sh
: "${TABLE:?set TABLE to a file of experiments/exhaustive/}"
name=$(basename "$TABLE" .yaml)
work=/tmp/exhaustive; mkdir -p "$work"
export BOCAST_GIT_SHA=${BOCAST_GIT_SHA:-unknown}
budget=${BUDGET_S:-560}; margin=${MARGIN_S:-150}
[ -f "runs/$name.db" ] && [ ! -f "$work/$name.db" ] && cp "runs/$name.db" "$work/$name.db"
timeout "$budget" python3 -m bocast.cli measure --subspace "$TABLE" --seed 0 \
    --store "$work/$name.db" --batch "${BATCH:-256}" --progress-every 250 \
    --max-seconds $((budget - margin)) --export "$work/$name" --force --json > "$work/$name.log" 2>&1
echo "$name: exit $? $(tail -2 "$work/$name.log" | head -1 | cut -c1-300)"
# fold the WAL into the main file so that one file carries the store
python3 -c "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute('PRAGMA wal_checkpoint(TRUNCATE)'); c.close()" "$work/$name.db"
tar -C "$work" -czf "$OUT/$name.tar.gz" --exclude='*.db-wal' --exclude='*.db-shm' \
    $(cd "$work" && ls "$name".*)
python3 - "$work/$name.db" <<'PY'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
rows = c.execute("SELECT status, count(*), max(tflops) FROM measurements GROUP BY status").fetchall()
want = c.execute("SELECT value FROM meta WHERE name = 'subspace'").fetchone()
print("store:", rows, "| sub-space:", want[0][:200] if want else None)
PY
