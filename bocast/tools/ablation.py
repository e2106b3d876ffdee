"""Ablation of BO's options on replay of recorded tables (CPU): every variant x seed x table,
paired by seed (a seed gives every variant the same initial design), one table of results.

    bocast ablation experiments/ablation/bo_replay.yaml   (or python -m bocast.tools.ablation FILE)

The file lists ``tables`` (dataset + workload), ``variants`` (compare strategy entries; a
``batch_size`` there overrides the common one), ``reference`` (the variant the others are
paired with), ``seeds``, ``budget``, ``batch_size``, ``output`` (record stores and a per-run
cache: a rerun skips finished runs) and ``results`` (prefix of the .md/.json written). A table
may add ``variant_options`` ({label: {option: value}}: that variant's options on that table
only, e.g. a warm start from the other tables), and the file ``within`` (trials): then each
variant also reports, per seed, the trials it needs to reach 95% of the reference's best at
the budget (or at ``reference_trials``, where the reference entry runs longer: its ``trials``)
on the same seed, and the share of seeds that reach it within ``within`` trials.

Per table and variant: trials to 95% of the table's best (censored at budget + 1), best at 16,
32, 64 and 128 trials over the table's best, and the median proposal time of a model round (rounds
after the first 32 trials; this machine's CPU, shared with other work while it ran). Against the
reference: the median paired difference in trials to 95% with a bootstrap 95% interval (10,000
resamples of seeds), a two-sided Wilcoxon signed-rank test, and Holm's correction over the
tables for each variant. The analytic baseline is random search without replacement: with K of
a table's N rows at or above 95% of its best, it needs (N + 1) / (K + 1) trials on average.
Each table's standard comparison outputs (md, csv, json and the figure) go into its folder under
``output`` (beside the run cache, not tracked); the results JSON keeps every variant's per-seed
figures (in the order of its ``seeds``): trials to 95% for paired tests against any other
variant, and the best so far at 32, 64, 128 trials and the budget.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from bocast.records.datasets import locate
from bocast.records.public import load_dataset, provenance
from bocast.run import comparison as compare
from bocast.run.comparison.running import _replay_run
from bocast.run.config import read_yaml
from bocast.schema import ConfigError

N_BOOT = 10_000


def _name(dataset: str, datasets: list[str]) -> str:
    """A table's folder name under ``output``: the dataset's file name, with its folder's in
    front where two tables share a file name (data/gemm_X_v2 and data/exhaustive/gemm_X_v2:
    the folders of the files found, so a shipped dataset named without its folder too)."""
    base = os.path.basename(dataset)
    if sum(os.path.basename(d) == base for d in datasets) > 1:
        return f"{os.path.basename(os.path.dirname(locate(dataset)))}_{base}"
    return base


def _configs(spec: dict, where: str) -> list[compare.CompareConfig]:
    out = []
    labels = [v["label"] for v in spec["variants"]]
    for t in spec["tables"]:
        name = _name(t["dataset"], [u["dataset"] for u in spec["tables"]])
        extra = t.get("variant_options") or {}
        if set(extra) - set(labels):
            raise ConfigError(f"{name}: variant_options of unknown variant(s) "
                              f"{sorted(set(extra) - set(labels))}; known: {labels}")
        variants = [{**v, **extra.get(v["label"], {})} for v in spec["variants"]]
        out.append(compare.parse({
            "name": f"{spec['name']}_{name}", "workload": t["workload"], "runner": "replay",
            "dataset": t["dataset"], "strategies": variants, "seeds": spec["seeds"],
            "budget": {"trials": spec["budget"]}, "batch_size": spec["batch_size"],
            "budgets": sorted({b for b in (16, 32, 64, 128, spec["budget"])
                               if b <= spec["budget"]}),
            "baseline": spec["reference"], "output": os.path.join(spec["output"], name),
            "results": os.path.join(spec["output"], name, "summary")}, where))
    return out


def _job(job):
    cfg, s, seed, cache = job
    if os.path.exists(cache):
        with open(cache) as f:
            return {**json.load(f), "cached": True}
    # the run's record store sits next to its cache; an interrupted run resumes from it
    store = cache[: -len(".json")] + ".db"
    run = _replay_run((cfg, s, seed, store, s.get("trials", cfg.trials)))
    run = {k: run[k] for k in ("label", "seed", "curve", "trials_to_95pct", "optimum",
                               "reference", "reference_what", "seconds", "proposal_s")}
    with open(cache, "w") as f:
        json.dump(run, f)
    return {**run, "cached": False}


def _one_thread() -> None:
    import torch

    torch.set_num_threads(1)  # the runs are the parallelism


def _good_rows(prefix: str) -> tuple[int, int]:
    df, _ = load_dataset(prefix)
    ok = df[df.status == "ok"].tflops
    return len(df), int((ok >= 0.95 * ok.max()).sum())


def _median_best(runs: list[dict], trials: int, optimum: float) -> float | None:
    """Median best so far at ``trials`` over the optimum; None where a run is shorter."""
    if any(len(r["curve"]) < trials for r in runs):
        return None
    return float(np.median([r["curve"][trials - 1] for r in runs])) / optimum


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def _censored(trials: int | None, budget: int) -> int:
    """Trials to a level, budget + 1 when not reached within ``budget`` (an entry with a
    longer budget, such as a cold reference run, is cut at the common one)."""
    return trials if trials is not None and trials <= budget else budget + 1


def _reference_level(runs: list[dict], ref: list[dict], at: int, within: int) -> dict:
    """Per seed, trials to 95% of the reference's best at ``at`` trials on the same seed (one
    more than the run's trials when never reached): median, and the share of seeds within
    ``within``."""
    t = []
    for r, b in zip(runs, ref):
        assert r["seed"] == b["seed"]
        level = 0.95 * b["curve"][at - 1]
        t.append(next((i + 1 for i, v in enumerate(r["curve"]) if v >= level),
                      len(r["curve"]) + 1))
    return {"trials_to_ref_level": t, "median_trials_to_ref_level": float(np.median(t)),
            "share_ref_level_within": sum(x <= within for x in t) / len(t), "within": within}


def _boot_ci(d: np.ndarray, rng: np.random.Generator) -> tuple[float, float]:
    idx = rng.integers(0, len(d), (N_BOOT, len(d)))
    meds = np.median(d[idx], axis=1)
    return float(np.percentile(meds, 2.5)), float(np.percentile(meds, 97.5))


def _holm(p: list[float]) -> list[float]:
    order = np.argsort(p)
    out, running = [0.0] * len(p), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p) - rank) * p[i]))
        out[i] = running
    return out


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    """``bocast ablation FILE``: run (or read from the per-run cache) every run of the file
    and write its results."""
    ap = argparse.ArgumentParser(prog=prog, description="strategies x options x seeds on "
                                 "several recorded tables (replay), paired by seed: one table "
                                 "of results (the file's format: the module's docstring)")
    ap.add_argument("file", help="ablation file (YAML; e.g. experiments/ablation/loto_v3.yaml)")
    run_file(ap.parse_args(argv).file)
    return 0


def run_file(path: str) -> None:
    spec = read_yaml(path)
    prov = provenance()  # before writing anything: the outputs are tracked files
    where = os.path.dirname(os.path.abspath(path))
    cfgs = _configs(spec, where)
    t0 = time.perf_counter()
    jobs = []
    for cfg in cfgs:
        os.makedirs(cfg.output, exist_ok=True)
        for s in cfg.strategies:
            for seed in cfg.seeds:
                out = os.path.join(cfg.output, f"{s['label']}_seed{seed}.json")
                jobs.append((cfg, s, seed, out))
    runs: dict[str, list[dict]] = {cfg.name: [] for cfg in cfgs}
    with ProcessPoolExecutor(spec.get("workers") or os.cpu_count(),
                             initializer=_one_thread) as pool:
        for (cfg, _, _, _), r in zip(jobs, pool.map(_job, jobs)):
            runs[cfg.name].append(r)
            print(f"  {cfg.name} {r['label']} seed {r['seed']}: 95% at {r['trials_to_95pct']}",
                  flush=True)
    seconds = time.perf_counter() - t0
    ref, budget, rng = spec["reference"], spec["budget"], np.random.default_rng(0)
    tables = []
    for cfg, table in zip(cfgs, spec["tables"]):
        compare.summarize(cfg, runs[cfg.name], seconds, prov=prov)  # its standard outputs
        assert cfg.dataset is not None  # every table is a replay of its dataset (_configs)
        n_rows, k_good = _good_rows(cfg.dataset)
        by = {s["label"]: sorted((r for r in runs[cfg.name] if r["label"] == s["label"]),
                                 key=lambda r: r["seed"]) for s in cfg.strategies}
        t95 = {lab: np.array([_censored(r["trials_to_95pct"], budget) for r in rs], float)
               for lab, rs in by.items()}
        rows = {}
        for s in cfg.strategies:
            lab, rs = s["label"], by[s["label"]]
            q = s.get("batch_size", cfg.batch_size)
            model_rounds = [p for r in rs for p in r["proposal_s"][math.ceil(32 / q):]]
            optimum = rs[0]["optimum"]
            row = {"median_trials_to_95pct": float(np.median(t95[lab])),
                   "iqr_trials_to_95pct": [float(x) for x in np.percentile(t95[lab], [25, 75])],
                   "reached": int(sum(r["trials_to_95pct"] is not None for r in rs)),
                   "runs": len(rs),
                   "best_at_16": _median_best(rs, 16, optimum),
                   "best_at_32": _median_best(rs, 32, optimum),
                   "best_at_64": _median_best(rs, 64, optimum),
                   "best_at_128": _median_best(rs, 128, optimum),
                   "median_round_s": statistics.median(model_rounds) if model_rounds else None,
                   "batch_size": q, "seeds": [r["seed"] for r in rs],
                   "trials_to_95pct": [int(x) for x in t95[lab]],
                   "best_at": {str(b): [r["curve"][b - 1] for r in rs] for b in cfg.budgets}}
            if spec.get("within"):
                row.update(_reference_level(rs, by[ref], spec.get("reference_trials", budget),
                                            spec["within"]))
            if lab != ref:
                d = t95[lab] - t95[ref]
                row.update(median_diff=float(np.median(d)), diff_ci95=_boot_ci(d, rng),
                           wilcoxon_p=compare.wilcoxon_p(d))
            rows[lab] = row
        tables.append({"table": os.path.relpath(cfg.dataset), "rows": n_rows, "good_rows": k_good,
                       "optimum": runs[cfg.name][0]["optimum"],
                       "random_expected_trials": (n_rows + 1) / (k_good + 1),
                       "variant_options": table.get("variant_options") or {}, "variants": rows})
    for s in cfgs[0].strategies:  # Holm over the tables, per variant
        lab = s["label"]
        if lab == ref:
            continue
        held = _holm([t["variants"][lab]["wilcoxon_p"] for t in tables])
        for t, p in zip(tables, held):
            t["variants"][lab]["wilcoxon_p_holm"] = p
    every = [r for rs in runs.values() for r in rs]
    result = {"name": spec["name"], "description": spec.get("description", ""),
              "config": os.path.relpath(path), "reference": ref,
              "runs": len(every), "runs_cached": sum(r["cached"] for r in every),
              "run_seconds": round(sum(r["seconds"] for r in every), 1),
              "seeds": len(cfgs[0].seeds), "budget": budget, "batch_size": spec["batch_size"],
              "within": spec.get("within"), "reference_trials": spec.get("reference_trials"),
              "variants": spec["variants"], "tables": tables, "seconds": round(seconds, 1),
              "cpu_count": os.cpu_count(), "provenance": prov}
    with open(spec["results"] + ".json", "w") as f:
        json.dump(result, f, separators=(",", ":"), default=str)
    with open(spec["results"] + ".md", "w") as f:
        f.write(_markdown(result))
    print(_markdown(result))


def _markdown(res: dict) -> str:
    prov = res["provenance"]
    lines = [f"# {res['name']}", "",
             f"REPLAY on recorded tables (CPU, {res['cpu_count']} cores, shared with other work "
             f"while it ran): {res['seeds']} paired seeds, budget {res['budget']}, batch "
             f"{res['batch_size']} unless a variant says otherwise. "
             f"`python -m bocast.tools.ablation {res['config']}` at commit {prov['git_sha']} "
             f"({prov['date']}); the {res['runs']} runs took {res['run_seconds']:.0f} s in all"
             + (f" ({res['runs_cached']} read from the per-run cache of an earlier call)"
                if res["runs_cached"] else "") + ".", "", res["description"], "",
             "Trials to 95% of the table's best: median [IQR] over seeds (budget + 1 when never "
             "reached). Difference: median over seeds of (variant - "
             f"{res['reference']}) in trials to 95%, bootstrap 95% interval; p: two-sided "
             "Wilcoxon signed-rank, then Holm over the tables. best@16/@32/@64/@128: median best "
             "so far "
             "over the table's best. Round: median proposal seconds of a model round (after the "
             "first 32 trials) on this CPU.", ""]
    within = res.get("within")
    if within:
        lines += [(f"Reference level: 95% of {res['reference']}'s best at "
                   f"{res.get('reference_trials') or res['budget']} "
                   "trials on the same seed; trials to it: median over seeds (budget + 1 when "
                   f"never reached); share: seeds that reach it within {within} trials."), ""]
    for t in res["tables"]:
        lines += [f"## `{t['table']}` ({t['rows']} rows, {t['good_rows']} at >= 95% of the best "
                  f"{t['optimum']:.1f} TFLOPS; random search without replacement needs "
                  f"{t['random_expected_trials']:.0f} trials on average)", "",
                  "| variant | trials to 95% | reached | difference [95% CI] | p | p (Holm) | "
                  "best@16 | best@32 | best@64 | best@128 | round s |"
                  + (f" to reference level | share within {within} |" if within else ""),
                  "|---|---|---|---|---|---|---|---|---|---|---|"
                  + ("---|---|" if within else "")]
        for lab, v in t["variants"].items():
            lo, hi = v["iqr_trials_to_95pct"]
            diff = (f"{v['median_diff']:+.0f} [{v['diff_ci95'][0]:+.0f}, {v['diff_ci95'][1]:+.0f}]"
                    if "median_diff" in v else "reference")
            p = compare.format_p(v["wilcoxon_p"]) if "wilcoxon_p" in v else ""
            ph = compare.format_p(v["wilcoxon_p_holm"]) if "wilcoxon_p_holm" in v else ""
            rs = f"{v['median_round_s']:.2f}" if v["median_round_s"] is not None else ""
            lines.append(f"| {lab} | {v['median_trials_to_95pct']:.0f} [{lo:.0f}-{hi:.0f}] | "
                         f"{v['reached']}/{v['runs']} | {diff} | {p} | {ph} | "
                         f"{_fmt(v.get('best_at_16'))} | {_fmt(v.get('best_at_32'))} | "
                         f"{_fmt(v['best_at_64'])} | {_fmt(v['best_at_128'])} | {rs} |"
                         + (f" {v['median_trials_to_ref_level']:.0f} | "
                            f"{v['share_ref_level_within']:.2f} |" if within else ""))
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
