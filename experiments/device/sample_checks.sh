#!/usr/bin/env bash
# Random configurations' correctness, one check a line of stdin (the device scripts' one
# definition: ring_sweep.sh, tail_check.sh): `NAME|OP|SHAPE|DTYPE|FIXES`, each `bocast measure
# OP --space v3 --sample SAMPLE FIXES` (FIXES: --fix KNOB=VALUE ..., the sub-space drawn from,
# every other knob free), each kernel built, run and compared with the reference by the runner,
# its store ROOT/NAME.db; a check that would end past BUDGET_S seconds from T_START (default:
# now) is skipped. Then the table: per check, the values of KNOB measured, the statuses, the
# worst relative error of the ok ones, and every row not ok.
#   bash experiments/device/sample_checks.sh ROOT KNOB < checks   (run by a script: PYTHONPATH set)
set -uo pipefail
root=$1 knob=$2
SAMPLE=${SAMPLE:-16} EACH_S=${EACH_S:-20} BUDGET_S=${BUDGET_S:-540} T_START=${T_START:-$(date +%s)}
mkdir -p "$root"
while IFS='|' read -r name op shape dtype fixes; do
  [ -z "$name" ] && continue
  t0=$(date +%s)
  if (( t0 - T_START + EACH_S + 25 > BUDGET_S )); then
    echo "$name skipped (BUDGET_S=$BUDGET_S)"; continue
  fi
  # shellcheck disable=SC2086
  timeout $(( EACH_S + 25 )) python3 -m bocast.cli measure "$op" --shape "$shape" \
    --dtype "$dtype" --space v3 --sample "$SAMPLE" $fixes --seed 0 \
    --max-seconds "$EACH_S" --store "$root/$name.db" --json > "$root/$name.log" 2>&1
  echo "$name: exit $? in $(( $(date +%s) - t0 )) s"
done
python3 - "$root" "$knob" <<'PY'
import glob, json, sys
from collections import Counter
sys.path.insert(0, "experiments/device")
from store_rows import store, worst_ok  # noqa: E402

root, knob = sys.argv[1], sys.argv[2]
print(f"| check | {knob} measured | statuses | worst ok rel_error |")
print("| --- | --- | --- | --- |")
bad = []
for db in sorted(glob.glob(f"{root}/*.db")):
    w, _, rows = store(db)
    values = Counter(c.get(knob) for c, _, _ in rows)
    print(f"| {db.split('/')[-1][:-3]} {','.join(map(str, w.get('shape', [])))} "
          f"{w.get('dtype')} | {dict(sorted(values.items()))} | "
          f"{dict(Counter(st for _, st, _ in rows))} | {worst_ok(rows)} |")
    bad += [(w.get("op"), st, c) for c, st, _ in rows if st != "ok"]
for op, st, c in bad:
    print(f"not ok: {op} {st} {json.dumps(c, sort_keys=True)}")
PY
