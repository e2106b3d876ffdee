"""A comparison's result files, each written atomically and all four as one: the per-run
.csv, the summary .json, the .md table and the convergence figure (.png, .pdf and .svg; left
out, and the .md says so, where matplotlib is not installed: :mod:`bocast.run.figures`)."""

from __future__ import annotations

import json
import os
from typing import Any

from bocast import interrupt
from bocast.files import atomic_write
from bocast.progress import reference_label
from bocast.run import figures
from bocast.run.comparison.config import CompareConfig, _dataset_gpu


def _write_outputs(cfg: CompareConfig, runs: list[dict], summary: dict[str, Any]) -> None:
    with interrupt.held():  # the four files are one result: a stop waits for the last one
        _write_files(cfg, runs, summary)


def _write_files(cfg: CompareConfig, runs: list[dict], summary: dict[str, Any]) -> None:
    import csv

    os.makedirs(os.path.dirname(cfg.results) or ".", exist_ok=True)
    with atomic_write(cfg.results + ".csv", newline="") as f:
        w = csv.writer(f)
        w.writerow(["strategy", "seed", "trials_to_95pct"] + [f"best_at_{b}" for b in cfg.budgets])
        for r in runs:
            w.writerow([r["label"], r["seed"], r["trials_to_95pct"] or ""] +
                       [f"{r['curve'][b - 1]:.4g}" for b in cfg.budgets])
    with atomic_write(cfg.results + ".json") as f:
        json.dump(summary, f, separators=(",", ":"), sort_keys=True, default=str)
    prov = summary["provenance"]
    live = cfg.runner_class.live
    where = (f"{prov.get('device', {}).get('gpu', 'GPU')}, driver "
             f"{prov.get('device', {}).get('driver', '?')}" if live else "")
    last = cfg.budgets[-1]
    lines = [f"# {cfg.name}", "",
             f"{summary['workload']}; runner {cfg.runner}"
             + (f" ({os.path.relpath(cfg.dataset)})" if cfg.dataset else f" (live on {where})")
             + f"; {len(cfg.seeds)} seeds; budget {cfg.trials}; batch {cfg.batch_size}.",
             f"{summary['optimum_kind'].capitalize()} {summary['optimum_tflops']:.1f} TFLOPS"
             + (f"; {_vendor(summary)} {summary['reference_tflops']:.1f} TFLOPS "
                f"({summary['reference_what'] or 'vendor library'}; same run, same timing)"
                if summary["reference_tflops"] else "") + ".",
             f"Generated {prov['date']} at commit {prov['git_sha']}, config sha256 "
             f"{summary['config_sha256']}.", "",
             "Median [interquartile range] over seeds. Trials to 95%: first trial whose best "
             f"reaches 95% of the {summary['optimum_kind']}; a run that never does counts as its "
             f"budget + 1 (budget {cfg.trials} unless the strategy line says otherwise)."
             + (f" Last columns: the median best at {last} trials over {_vendor(summary)}, and "
                f"the trials to "
                f"reach 95% of {cfg.baseline}'s median best at {last} "
                f"({summary['baseline_best_at_budget']:.1f} TFLOPS)."
                if live and cfg.baseline else ""), "",
             "| strategy | trials to 95% | reached | " + " | ".join(
                 f"best @{b}" for b in cfg.budgets)
             + (f" | best @{last} / {_vendor(summary)} | trials to 95% of {cfg.baseline}"
                if live and cfg.baseline else "") + " |",
             "|---" * (3 + len(cfg.budgets) + (2 if live and cfg.baseline else 0)) + "|"]
    for lab, s in summary["strategies"].items():
        lo, hi = s["iqr_trials_to_95pct"]
        cells = [f"{s['median_trials_to_95pct']:.0f} [{lo:.0f}-{hi:.0f}]",
                 f"{s['reached_95pct']}/{s['runs']}"]
        for b in cfg.budgets:
            lo, hi = s["iqr_best"][str(b)]
            cells.append(f"{s['median_best'][str(b)]:.1f} [{lo:.1f}-{hi:.1f}]")
        if live and cfg.baseline:
            cells += [f"{s.get('median_best_vs_reference', float('nan')):.2f}",
                      f"{s['median_trials_to_95pct_of_baseline']:.0f}"]
        entry = next(x for x in cfg.strategies if x["label"] == lab)
        notes = ([f"runs {entry['trials']} trials"] if "trials" in entry else []) + (
            [f"{len(entry['seeds'])} seed(s)"] if "seeds" in entry else []) + (
            [f"batch {entry['batch_size']}"] if "batch_size" in entry else [])
        lines.append(f"| {lab}" + (f" ({', '.join(notes)})" if notes else "") + " | "
                     + " | ".join(cells) + " |")
    timed = {lab: s["retimed"] for lab, s in summary["strategies"].items() if s.get("retimed")}
    if timed:
        lines += ["", "Re-timed at the end (the figure to quote): each run's best kernel and "
                  "the reference timed in turn, in rounds, in one process; the table's "
                  "figures are in-run (each kernel timed once as its run went).", "",
                  f"| strategy | runs | median best, re-timed | / {_vendor(summary)} |",
                  "|---|---|---|---|"]
        lines += [f"| {lab} | {t['runs']} | {t['median_best']:.1f} | "
                  f"{t['median_best_vs_reference']:.2f} |" for lab, t in timed.items()]
    if summary["mann_whitney_u"]:
        lines += ["", "One-sided Mann-Whitney U tests (p-values):", "",
                  "| comparison | fewer trials to 95% | higher best at budget |", "|---|---|---|"]
        for name, t in summary["mann_whitney_u"].items():
            vals = list(t.values())
            lines.append(f"| {name} | {format_p(vals[0])} | {format_p(vals[1])} |")
    no_figure = figures.missing()
    lines += ["", f"No figure: {no_figure} ({figures.INSTALL})." if no_figure else
              f"![convergence]({os.path.basename(cfg.results)}.png)", ""]
    with atomic_write(cfg.results + ".md") as f:
        f.write("\n".join(lines))
    if not no_figure:
        _plot(cfg, runs, summary)


def format_p(p: float) -> str:
    """A p-value in two significant figures that never reads as a certainty: 0.998 is
    ">0.99", not "1"; below 1e-3 in scientific notation."""
    if p > 0.99:
        return ">0.99"
    return f"{p:.1e}" if p < 1e-3 else f"{p:.2g}"


def _vendor(summary: dict[str, Any]) -> str:
    return reference_label({"what": summary.get("reference_what")})


def _gpu(cfg: CompareConfig, summary: dict[str, Any]) -> str | None:
    """The GPU the trials were measured on: the live run's, or the replayed dataset's."""
    if cfg.runner_class.live:
        return ((summary.get("provenance") or {}).get("device") or {}).get("gpu")
    try:
        return _dataset_gpu(cfg.dataset)
    except (OSError, ValueError, AttributeError):
        return None


def _plot(cfg: CompareConfig, runs: list[dict], summary: dict[str, Any]) -> None:
    """The convergence figure (:func:`bocast.run.figures.convergence`): each arm to the end of its
    own budget, over its own seeds; titled with the workload, the GPU and the reference (timed
    in the same run, or the dataset's recorded value in replay)."""
    arms = []
    for s in cfg.strategies:
        n = s.get("trials", cfg.trials)
        arms.append((s["label"], [r["curve"][:n] for r in runs if r["label"] == s["label"]]))
    vendor = _vendor(summary)
    how = "recorded in the dataset" if not cfg.runner_class.live else "same run"
    w = cfg.workload
    shape = "x".join(map(str, w.get("shape", [])))
    gpu = _gpu(cfg, summary) or "GPU not recorded"
    mode = "live" if cfg.runner_class.live else "replay"
    title = (f"{w.get('op')} {shape}, space {w.get('space', 'v1')}, {w.get('dtype')}: {mode} on "
             f"{gpu}\nmedian and interquartile band over seeds; reference {vendor}")
    ref = summary["reference_tflops"]
    fig = figures.convergence(
        arms, title=title, reference=ref,
        reference_label=f"{vendor} {figures.tflops_text(ref)} TFLOPS ({how})" if ref else vendor,
        optimum=summary["optimum_tflops"], optimum_kind=summary["optimum_kind"])
    figures.save(fig, cfg.results)
