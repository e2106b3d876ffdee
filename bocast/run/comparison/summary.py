"""A comparison's statistics over finished runs: per strategy the median and interquartile
range of the best at each budget and of the trials to 95% of the optimum, and one-sided
Mann-Whitney U tests against the baseline; :func:`summarize` writes the outputs. The
quartiles and the paired test are defined here once (``bocast ablation`` and ``bocast report``
use them too)."""

from __future__ import annotations

import statistics
from typing import Any

from bocast.records.provenance import provenance
from bocast.run.comparison.config import CompareConfig
from bocast.run.comparison.outputs import _write_outputs
from bocast.run.tuner import first_reaching


def quartiles(v):
    """(first quartile, median, third quartile) of ``v`` (statistics.quantiles' exclusive
    method); one value is all three."""
    v = sorted(v)
    if len(v) < 2:
        return v[0], v[0], v[0]
    q = statistics.quantiles(v, n=4)
    return q[0], statistics.median(v), q[2]


def wilcoxon_p(d) -> float:
    """The two-sided Wilcoxon signed-rank p-value of paired differences ``d`` (zero
    differences dropped); 1.0 when every difference is zero."""
    from scipy.stats import wilcoxon

    if not any(d):
        return 1.0
    return float(wilcoxon(d, zero_method="wilcox", alternative="two-sided").pvalue)


def summarize(cfg: CompareConfig, runs: list[dict], seconds: float,
              extra: dict[str, Any] | None = None, prov: dict[str, Any] | None = None
              ) -> dict[str, Any]:
    """Statistics and outputs of finished runs. ``prov``: provenance taken before anything was
    written (a caller that writes several comparisons; else it is taken here)."""
    from scipy.stats import mannwhitneyu

    labels = [s["label"] for s in cfg.strategies]
    optimum = runs[0]["optimum"]
    reference = runs[0]["reference"]
    censor = cfg.trials + 1
    last = cfg.budgets[-1]
    # the baseline's median best at the last budget, and how soon each run reaches 95% of it
    base_target = (statistics.median(r["curve"][last - 1] for r in runs
                                     if r["label"] == cfg.baseline) if cfg.baseline else None)
    per: dict[str, Any] = {}
    for lab, strat in zip(labels, cfg.strategies):
        rs = [r for r in runs if r["label"] == lab]
        t95 = [r["trials_to_95pct"] or strat.get("trials", cfg.trials) + 1 for r in rs]
        per[lab] = {
            "runs": len(rs),
            "median_best": {str(b): quartiles([r["curve"][b - 1] for r in rs])[1]
                            for b in cfg.budgets},
            "iqr_best": {str(b): quartiles([r["curve"][b - 1] for r in rs])[::2]
                         for b in cfg.budgets},
            "median_trials_to_95pct": quartiles(t95)[1],
            "iqr_trials_to_95pct": quartiles(t95)[::2],
            "reached_95pct": sum(bool(r["trials_to_95pct"]) for r in rs),
            "median_proposal_s": (statistics.median(p for r in rs for p in r["proposal_s"])
                                  if any(r["proposal_s"] for r in rs) else None),
        }
        if reference:
            per[lab]["median_best_vs_reference"] = per[lab]["median_best"][str(last)] / reference
        timed = [r["retimed"] for r in rs if r.get("retimed")]
        if timed:  # each run's best re-timed with the reference in turn: the figure to quote
            per[lab]["retimed"] = {
                "runs": len(timed),
                "median_best": statistics.median(t["tflops"] for t in timed),
                "median_best_vs_reference": statistics.median(t["vs_reference"] for t in timed)}
        if base_target:
            tb = [first_reaching(r["curve"], 0.95 * base_target)
                  or strat.get("trials", cfg.trials) + 1 for r in rs]
            per[lab]["median_trials_to_95pct_of_baseline"] = quartiles(tb)[1]
    tests = {}
    if cfg.baseline:
        base = [r for r in runs if r["label"] == cfg.baseline]
        for lab in labels:
            if lab == cfg.baseline:
                continue
            mine = [r for r in runs if r["label"] == lab]
            if min(len(mine), len(base)) < 2:
                continue  # too few runs for a rank test to say anything
            t = {}
            a = [min(r["trials_to_95pct"] or censor, censor) for r in mine]
            b = [min(r["trials_to_95pct"] or censor, censor) for r in base]
            t["trials_to_95pct_less"] = float(mannwhitneyu(a, b, alternative="less").pvalue)
            last = cfg.budgets[-1]
            a = [r["curve"][last - 1] for r in mine]
            b = [r["curve"][last - 1] for r in base]
            t[f"best_at_{last}_greater"] = float(mannwhitneyu(a, b, alternative="greater").pvalue)
            tests[f"{lab} vs {cfg.baseline}"] = t
    summary = {"name": cfg.name, "workload": cfg.workload, "dataset": cfg.dataset,
               "runner": cfg.runner, "optimum_tflops": optimum,
               "optimum_kind": (extra or {}).get("optimum_kind", "dataset best"),
               "baseline_best_at_budget": base_target, "reference_tflops": reference,
               "reference_what": runs[0].get("reference_what", ""),
               "seeds": len(cfg.seeds), "trials": cfg.trials, "batch_size": cfg.batch_size,
               "strategies": per, "mann_whitney_u": tests, "seconds": round(seconds, 1),
               "config_sha256": cfg.digest,
               "provenance": prov or provenance({"device": (extra or {}).get("device")}
                                                if extra and extra.get("device") else None)}
    _write_outputs(cfg, runs, summary)
    return summary
