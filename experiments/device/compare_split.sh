#!/usr/bin/env bash
# On the GPU machine (device tool): live comparisons (`bocast compare`) with their seeds spread
# over the machine's GPUs. A CGA arm needs xgboost, which the GPU machine lacks: here
# `bash experiments/device/lean_tree.sh out cold`, carry .devbundle and .devxgb (xgboost-cpu's
# wheel unzipped and packed with xz -9e, 3.7 MB: ../shared/device/README.md), and start the
# command with `source .devbundle/unpack.sh && tar -C /tmp/site -xJf .devxgb/xgboost-site.tar.xz`.
# Each config's seeds are cut into PARTS parts (a part: a copy of the config with those seeds,
# the same output folder, its own results name); the parts run at once, one per GPU
# (CUDA_VISIBLE_DEVICES, the machine's cores split among them as build workers). Within a part,
# every strategy of a seed runs interleaved batch by batch on one builder and one GPU, as a
# comparison always does: the arms of a seed are timed on the same GPU. Then
# `bocast compare CONFIG --summarize` writes the whole comparison from the finished stores
# ({label}_seed{seed}.db).
#   CONFIGS="experiments/compare/A.yaml experiments/compare/B.yaml" PARTS=2 \
#     bash experiments/device/compare_split.sh     # 2 configs x 2 parts: an x4
# A part stopped by BUDGET_S keeps its stores (a later call with them resumes: carry them as
# .devcarry/runs.tar.gz). Everything lands under $OUT (compare_split.tar.gz); tables last.
set -uo pipefail
source .devbundle/unpack.sh
export BOCAST_GIT_SHA=${BOCAST_GIT_SHA:-unknown}
CONFIGS=${CONFIGS:?config files} PARTS=${PARTS:-2} BUDGET_S=${BUDGET_S:-520}
[ -f .devcarry/runs.tar.gz ] && tar -xzf .devcarry/runs.tar.gz
gpus=$(nvidia-smi -L | wc -l)
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
parts=$(python3 - "$PARTS" "$(( $(nproc) / gpus ))" $CONFIGS <<'PY'
import os, sys, yaml
n, workers, configs = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
os.makedirs("runs/compare_split", exist_ok=True)
for path in configs:
    cfg = yaml.safe_load(open(path))
    seeds = cfg["seeds"]
    for i in range(n):
        part = dict(cfg, seeds=seeds[i * len(seeds) // n:(i + 1) * len(seeds) // n],
                    results=f"runs/compare_split/{cfg['name']}_part{i}")
        part["runner_options"] = {**cfg.get("runner_options", {}), "workers": workers}
        out = f"runs/compare_split/{cfg['name']}_part{i}.yaml"
        yaml.safe_dump(part, open(out, "w"), sort_keys=False)
        print(out)
PY
)
i=0
for part in $parts; do
  gpu=$(( i % gpus )); i=$(( i + 1 ))
  ( CUDA_VISIBLE_DEVICES=$gpu timeout "$BUDGET_S" python3 -m bocast.cli compare "$part" \
      > "${part%.yaml}.log" 2>&1; echo "$part on GPU $gpu: exit $?" ) &
  (( i % gpus == 0 )) && wait
done
wait
for c in $CONFIGS; do
  name=$(python3 -c "import yaml,sys; print(yaml.safe_load(open(sys.argv[1]))['name'])" "$c")
  for db in runs/"$name"/*.db; do  # one file per store: fold the WAL in
    python3 -c "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute('PRAGMA wal_checkpoint(TRUNCATE)'); c.close()" "$db"
  done
  python3 -m bocast.cli compare "$c" --summarize > "runs/compare_split/$name.summary.log" 2>&1
  echo "$name summarize: exit $?"
  names="${names:-} $name"
done
tar -czf "$OUT/compare_split.tar.gz" --exclude='*.db-wal' --exclude='*.db-shm' runs/compare_split \
  $(for n in $names; do echo runs/$n; ls experiments/results/$n.* 2>/dev/null; done)
for n in $names; do echo "## $n"; sed -n '/^| strategy/,/^$/p;/^| comparison/,/^$/p' \
  "experiments/results/$n.md" 2>/dev/null; done
