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
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
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
    git status --short
    ;;
  *) echo "usage: $0 out [cold] | in" >&2; exit 2 ;;
esac
