#!/usr/bin/env bash
# Make room under the device tool's 64 MiB carry limit for a call that needs xgboost (every
# live CGA): the TVM bundle (61.1 MB) + xgboost (3.6 MB) + the whole repository (3.2 MB) do not
# fit. `out` moves what no device command reads (the results folder, the tests, the v1 uniform
# datasets; the v2 and v3 ones stay: warm_start auto reads them) into .devlean/ (ignored) and leaves an empty results folder for the call's output;
# `in` moves them back (files a command wrote meanwhile under experiments/results are kept).
# `out cold` also moves the uniform and exhaustive tables and RESULTS.md (a cold live run reads
# none of them): what a call carrying xgboost too needs (bundle 61.2 MB + xgboost 3.7 MB).
#   bash experiments/device/lean_tree.sh out   # then the device call, carry .devbundle
#   bash experiments/device/lean_tree.sh in
# While out, a pre-commit hook refuses commits (one made out would delete the moved files).
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
hook=$(git rev-parse --git-path hooks/pre-commit)
mark="installed by experiments/device/lean_tree.sh out; removed by its in"
case "${1:-}" in
  out)
    [ -e .devlean ] && { echo ".devlean exists: run '$0 in' first" >&2; exit 2; }
    mkdir -p .devlean/data
    mv experiments/results .devlean/results && mkdir experiments/results
    mv tests .devlean/tests
    mkdir tests && cp -r .devlean/tests/__init__.py .devlean/tests/background.py .devlean/tests/gpu tests/  # the GPU checks (background: test_checks imports it)
    for f in $(git ls-files 'bocast/data/*.csv.xz' | grep -v -e /exhaustive/ -e _v2.csv.xz -e _v3.csv.xz); do
      mv "$f" .devlean/data/
    done
    if [ "${2:-}" = cold ]; then
      mkdir -p .devlean/cold
      mv bocast/data/exhaustive .devlean/cold/exhaustive && mv RESULTS.md .devlean/cold/
      for f in $(git ls-files 'bocast/data/*.csv.xz' | grep -v /exhaustive/); do
        [ -f "$f" ] && mv "$f" .devlean/data/
      done
    fi
    # a commit now would record every moved file as deleted (`git commit -a`): a pre-commit
    # hook refuses one until `in` (only where the clone has no hook of its own)
    if [ ! -e "$hook" ]; then
      mkdir -p "$(dirname "$hook")"
      printf '#!/bin/sh\n# %s\n[ -e .devlean ] || exit 0\necho "%s" >&2\nexit 1\n' "$mark" \
        "the tree is out (.devlean): bash experiments/device/lean_tree.sh in, then commit" \
        > "$hook" && chmod +x "$hook"
    fi
    git ls-files | while read -r f; do if [ -f "$f" ]; then stat -c %s "$f"; fi; done \
      | awk '{s += $1} END {print s, "bytes of tracked files left"}'
    ;;
  in)
    [ -d .devlean ] || { echo "no .devlean: nothing to restore" >&2; exit 2; }
    cp -rn .devlean/results/. experiments/results/
    rm -rf tests && mv .devlean/tests tests
    mv .devlean/data/* bocast/data/
    if [ -d .devlean/cold ]; then
      mv .devlean/cold/exhaustive bocast/data/exhaustive && mv .devlean/cold/RESULTS.md .
    fi
    rm -rf .devlean
    if grep -qF "$mark" "$hook" 2>/dev/null; then rm -f "$hook"; fi
    git status --short
    ;;
  *) echo "usage: $0 out [cold] | in" >&2; exit 2 ;;
esac
