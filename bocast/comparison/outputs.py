"""A comparison's result files, each written atomically and all four as one: the per-run
.csv, the summary .json, the .md table and the convergence figure (.png and .pdf)."""

from __future__ import annotations

import json
import os
from typing import Any

from bocast import interrupt
from bocast.comparison.config import LIVE, CompareConfig, _dataset_gpu
from bocast.progress import reference_label


def _write_outputs(cfg: CompareConfig, runs: list[dict], summary: dict[str, Any]) -> None:
    with interrupt.held():  # the four files are one result: a stop waits for the last one
        _write_files(cfg, runs, summary)


def _write_files(cfg: CompareConfig, runs: list[dict], summary: dict[str, Any]) -> None:
    import csv

    from bocast.files import atomic_write

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
    live = cfg.runner in LIVE
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
    if summary["mann_whitney_u"]:
        lines += ["", "One-sided Mann-Whitney U tests (p-values):", "",
                  "| comparison | fewer trials to 95% | higher best at budget |", "|---|---|---|"]
        for name, t in summary["mann_whitney_u"].items():
            vals = list(t.values())
            lines.append(f"| {name} | {format_p(vals[0])} | {format_p(vals[1])} |")
    lines += ["", f"![convergence]({os.path.basename(cfg.results)}.png)", ""]
    with atomic_write(cfg.results + ".md") as f:
        f.write("\n".join(lines))
    _plot(cfg, runs, summary)


def format_p(p: float) -> str:
    """A p-value in two significant figures that never reads as a certainty: 0.998 is
    ">0.99", not "1"; below 1e-3 in scientific notation."""
    if p > 0.99:
        return ">0.99"
    return f"{p:.1e}" if p < 1e-3 else f"{p:.2g}"


def _vendor(summary: dict[str, Any]) -> str:
    return reference_label({"what": summary.get("reference_what")})


#: Okabe and Ito's colour-blind-safe palette (blue, orange, green, purple, sky, vermilion,
#: yellow), and a line style each, so that arms stay apart in grey print as well
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442")
STYLES = ("-", "--", "-.", (0, (1, 1)), (0, (5, 1, 1, 1, 1, 1)))


def _gpu(cfg: CompareConfig, summary: dict[str, Any]) -> str | None:
    """The GPU the trials were measured on: the live run's, or the replayed dataset's."""
    if cfg.runner in LIVE:
        return ((summary.get("provenance") or {}).get("device") or {}).get("gpu")
    try:
        return _dataset_gpu(cfg.dataset)
    except (OSError, ValueError, AttributeError):
        return None


def _plot(cfg: CompareConfig, runs: list[dict], summary: dict[str, Any]) -> None:
    """The convergence figure, PNG and PDF: each arm's median best-so-far to the end of its own
    budget with its interquartile band (edges drawn, so overlapping bands stay readable), the
    vendor reference (timed in the same run, or the dataset's recorded value in replay) and
    the 95% line; titled with the workload, the GPU and the reference."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(7, 4.4), dpi=150)
    for i, s in enumerate(cfg.strategies):
        n = s.get("trials", cfg.trials)
        curves = np.array([r["curve"][:n] for r in runs if r["label"] == s["label"]])
        if not len(curves):
            continue
        x = np.arange(1, curves.shape[1] + 1)
        q1, med, q3 = np.percentile(curves, [25, 50, 75], axis=0)
        color, style = PALETTE[i % len(PALETTE)], STYLES[i % len(STYLES)]
        ax.plot(x, med, color=color, ls=style, lw=1.6,
                label=f"{s['label']} ({len(curves)} seeds)")
        ax.fill_between(x, q1, q3, color=color, alpha=0.12, lw=0)
        for edge in (q1, q3):
            ax.plot(x, edge, color=color, ls=style, lw=0.5, alpha=0.7)
    vendor = _vendor(summary)
    if summary["reference_tflops"]:
        how = "recorded in the dataset" if cfg.runner not in LIVE else "same run"
        ax.axhline(summary["reference_tflops"], color="k", ls=":", lw=1,
                   label=f"{vendor} {summary['reference_tflops']:.0f} TFLOPS ({how})")
    ax.axhline(0.95 * summary["optimum_tflops"], color="grey", ls="--", lw=0.8,
               label=f"95% of the {summary['optimum_kind']}")
    ax.set_xlabel("trials")
    ax.set_ylabel("best TFLOPS so far")
    w = cfg.workload
    shape = "x".join(map(str, w.get("shape", [])))
    gpu = _gpu(cfg, summary) or "GPU not recorded"
    mode = "live" if cfg.runner in LIVE else "replay"
    ax.set_title(f"{w.get('op')} {shape}, space {w.get('space', 'v1')}, {w.get('dtype')}: "
                 f"{mode} on {gpu}\nmedian and interquartile band over seeds; reference "
                 f"{vendor}", fontsize=9)
    ax.legend(fontsize=7.5, loc="lower right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    save_png(fig, cfg.results + ".png")
    from bocast.files import atomic_write

    with atomic_write(cfg.results + ".pdf", "wb") as f:
        fig.savefig(f, format="pdf")
    plt.close(fig)


def save_png(fig, path: str) -> None:
    """A plot as a 256-colour palette PNG: a third of the size, the same colours (committed
    results travel with the repository to the GPU machine, under a size limit)."""
    import io

    from PIL import Image

    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    image = Image.open(buf).convert("RGB").quantize(colors=256, method=Image.Quantize.FASTOCTREE)
    from bocast.files import atomic_write

    with atomic_write(path, "wb") as f:
        image.save(f, format="PNG", optimize=True)
