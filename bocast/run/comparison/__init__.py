"""Comparisons: strategies x seeds on one workload, with the same space, candidates, runner and
budget for all, from one configuration file.

    name: replay_gemm1024
    workload: {op: gemm, shape: [1024, 1024, 1024], dtype: "fp16:fp32", layout: NT}
    runner: replay
    dataset: gemm_1024_1024_1024      # a shipped dataset (bocast/data/README.md), or a path
    strategies:
      - {label: bo-logei, name: bo, acquisition: logei}
      - {label: cga, name: cga}
      - {label: random, name: random}
      - {label: bo-q8, name: bo, batch_size: 8}   # its own batch (default: batch_size below)
    seeds: 20                 # or a list of seeds
    budget: {trials: 256}
    batch_size: 32
    budgets: [32, 64, 128, 256]   # where best-so-far is reported
    baseline: cga             # the rank tests compare every strategy against this one
    output: runs/compare_gemm1024          # one record store per run (not committed)
    results: experiments/results/compare_gemm1024   # .csv, .md, .json, .png, .pdf, .svg

Every output carries provenance (git SHA, versions, date, config hash). A seed gives every
strategy the same initial random design (paired comparison). The parts: :mod:`.config` (the
fields, their checks, the plan of runs), :mod:`.running` (replay and live), :mod:`.summary`
(statistics and tests), :mod:`.outputs` (the .csv, .json, .md and the figure:
.png, .pdf and .svg).

``runner: local`` compares live on the GPU: one builder and one runner serve every run, the runs
take turns batch by batch (:func:`bocast.run.tuner.run_interleaved`: while one batch is timed, the
next run's batch is proposed and built), so all strategies are measured in the same session,
by the same method, under the same drift. Each run has its own record store under ``output``;
rerunning the comparison resumes every unfinished run where it stopped. A strategy entry
``{name: metaschedule}`` runs TVM MetaSchedule with our builder and runner
(:mod:`bocast.run.metaschedule`), after the interleaved runs. Without a dataset there is no known
optimum: "best known" is then the best any run found.

    runner: local
    runner_options: {repeats: 10, run_timeout: 30, build_timeout: 180, workers: null,
                     reject_spills: false}      # reject_spills: see bocast.measure.builder
"""

from bocast.run.comparison.config import (
    COMPARE,
    ENTRY,
    MAX_SEEDS,
    METASCHEDULE,
    STORE_NAME,
    CompareConfig,
    check_stores,
    entry_batch,
    load,
    parse,
    plan,
    run_identity,
    validate,
)
from bocast.run.comparison.outputs import format_p
from bocast.run.comparison.running import check_only, run
from bocast.run.comparison.summary import quartiles, summarize, wilcoxon_p
from bocast.run.config import ConfigError

# defined in outputs before bocast.run.figures
from bocast.run.figures import PALETTE, STYLES, save_png

# the package's parts (config, running, summary, outputs) were one module; these names are how
# the API, scripts and tests reach a comparison
__all__ = ["COMPARE", "ENTRY", "MAX_SEEDS", "METASCHEDULE", "PALETTE", "STORE_NAME",
           "STYLES", "CompareConfig", "ConfigError", "check_only", "check_stores", "entry_batch",
           "format_p", "load", "parse", "plan", "quartiles", "run", "run_identity", "save_png",
           "summarize", "validate", "wilcoxon_p"]
