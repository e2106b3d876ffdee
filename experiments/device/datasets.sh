#!/usr/bin/env bash
# On the H100 machine (carry .devbundle; carry runs/ to resume): measure uniformly sampled
# configurations of each operator into a store and export a compact dataset.
#   SETS="gemm:1024,1024,1024:1000 conv2d:16,14,14,256,256,3,3,1,1,1:500" \
#   BUDGET_S=540 bash experiments/device/datasets.sh
# An item may name its dtypes as a fourth field (`gemm:2048,8192,2048:300:bf16:bf16`), and
# SPACE (e.g. v3) measures every item in that space: the dataset's name then ends in
# `_<in>_<out>` (dtypes given) and `_<SPACE>` (as the shipped `gemm_4096_4096_4096_v3`).
# Batches of BATCH (default 256) configurations are built while the previous one runs: a batch
# waits for its slowest build (some space-v2 kernels take 40 s in nvcc), so large batches keep
# the 16 build processes busy.
# Stores live in /tmp (SQLite/WAL leaves three files per store while it runs); whatever is done
# when BUDGET_S runs out, or at the end, is packed into $OUT/datasets.tar.gz: the exported
# datasets, the logs and the stores (a store carried back as runs/NAME.db resumes where it
# stopped, measuring nothing twice).
set -uo pipefail
source .devbundle/unpack.sh
work=/tmp/datasets; mkdir -p "$work"
export BOCAST_GIT_SHA=${BOCAST_GIT_SHA:-unknown}
measure_all() {
  for item in $SETS; do
    IFS=: read -r op shape n dtype <<< "$item"
    name=${op}_${shape//,/_}${dtype:+_${dtype//:/_}}${SPACE:+_$SPACE}
    extra=(); [ -n "$dtype" ] && extra+=(--dtype "$dtype"); [ -n "${SPACE:-}" ] && extra+=(--space "$SPACE")
    [ -f "runs/$name.db" ] && [ ! -f "$work/$name.db" ] && cp "runs/$name.db" "$work/$name.db"
    python3 -m bocast.cli measure "$op" --shape "$shape" --sample "$n" --seed 0 "${extra[@]}" \
        --store "$work/$name.db" --batch "${BATCH:-256}" --progress-every 250 \
        --export "$work/$name" --force --json \
        > "$work/$name.log" 2>&1
    echo "$name: exit $? $(tail -2 "$work/$name.log" | head -1 | cut -c1-200)"
  done
}
export -f measure_all; export SETS work SPACE
timeout "${BUDGET_S:-540}" bash -c measure_all
for db in "$work"/*.db; do  # fold the WAL into the main file so one file carries the store
  python3 -c "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute('PRAGMA wal_checkpoint(TRUNCATE)'); c.close()" "$db"
done
tar -C "$work" -czf "$OUT/datasets.tar.gz" --exclude='*.db-wal' --exclude='*.db-shm' .
python3 - "$work" <<'EOF'
import glob, json, os, sys
for meta in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    m = json.load(open(meta)); ref = m.get("reference") or {}
    import pandas as pd
    from bocast.records.public import dataset_csv
    df = pd.read_csv(dataset_csv(meta[:-5])); ok = df[df.status == "ok"]
    print(f"{os.path.basename(meta)[:-5]:<44} rows {len(df):4d} ok {len(ok) / len(df):5.1%} "
          f"best {ok.tflops.max():7.1f} median {ok.tflops.median():6.1f} "
          f"ref {ref.get('tflops', float('nan')):7.1f} best/ref {ok.tflops.max() / ref.get('tflops', float('nan')):.2f}")
EOF
