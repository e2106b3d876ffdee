"""The figures bocast draws, all in this module: a comparison's convergence over seeds
(:func:`convergence`, ``bocast compare``) and one run's trials (:func:`run_trials`,
``bocast tune --plot``), each saved as PNG, PDF and SVG (:func:`save`).

matplotlib and Pillow are the ``plot`` extra (``pip install 'bocast[plot]'``): nothing else
needs them, so they are imported only here and only when a figure is drawn.
:func:`missing` says whether they are installed; :func:`require` is the one error that names
the extra. Figures are drawn on a bare :class:`matplotlib.figure.Figure`, never through pyplot,
so a caller's backend and open figures are left alone."""

from __future__ import annotations

import collections
import io
import textwrap
from collections.abc import Sequence
from typing import Any

from bocast.errors import InputError
from bocast.files import atomic_write

INSTALL = "pip install 'bocast[plot]'"
#: the files of one figure, each ``PREFIX.EXT``
FORMATS = ("png", "pdf", "svg")

#: Okabe and Ito's colour-blind-safe palette (blue, orange, green, purple, sky, vermilion,
#: yellow), and a line style each, so that arms stay apart in grey print as well
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442")
STYLES = ("-", "--", "-.", (0, (1, 1)), (0, (5, 1, 1, 1, 1, 1)))


def missing() -> str | None:
    """Why no figure can be drawn here (matplotlib or Pillow not installed); None if one can."""
    for module in ("matplotlib", "PIL"):
        try:
            __import__(module)
        except ImportError:
            return f"{'Pillow' if module == 'PIL' else module} is not installed"
    return None


def require(what: str) -> None:
    """Raise :class:`InputError` unless a figure can be drawn (before any work is done)."""
    why = missing()
    if why:
        raise InputError(f"{what} needs matplotlib and Pillow: {why} ({INSTALL})")


def paths(prefix: str) -> list[str]:
    return [f"{prefix}.{ext}" for ext in FORMATS]


def save(fig: Any, prefix: str) -> list[str]:
    """``fig`` as ``PREFIX.png`` (:func:`save_png`), ``.pdf`` and ``.svg``, each written
    atomically; returns the paths. No date is written into the PDF or SVG and SVG ids are
    salted by a constant, so that the same figure is the same bytes (results are committed),
    and SVG text stays text (a third of the size, and searchable)."""
    import matplotlib

    save_png(fig, prefix + ".png")
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "bocast"}):
        with atomic_write(prefix + ".pdf", "wb") as f:
            fig.savefig(f, format="pdf", metadata={"CreationDate": None})
        with atomic_write(prefix + ".svg", "wb") as f:
            fig.savefig(f, format="svg", metadata={"Date": None})
    return paths(prefix)


def save_png(fig: Any, path: str) -> None:
    """A figure as a 256-colour palette PNG: a third of the size, the same colours (committed
    results travel with the repository to the GPU machine, under a size limit)."""
    from PIL import Image

    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    image = Image.open(buf).convert("RGB").quantize(colors=256, method=Image.Quantize.FASTOCTREE)
    with atomic_write(path, "wb") as f:
        image.save(f, format="PNG", optimize=True)


def tflops_text(value: float) -> str:
    """A TFLOPS figure for a legend: 612, 30.2 (small workloads run at tens)."""
    return f"{value:.0f}" if value >= 100 else f"{value:.1f}"


def _figure() -> tuple[Any, Any]:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4.4), dpi=150)
    return fig, fig.add_subplot()


def convergence(arms: Sequence[tuple[str, Sequence[Sequence[float]]]], *, title: str,
                reference: float | None, reference_label: str, optimum: float,
                optimum_kind: str) -> Any:
    """A comparison's figure: per arm (label, one best-so-far curve per seed, each as long as
    the arm's own budget) the median over seeds to the end of that budget, with the
    interquartile band (edges drawn, so that overlapping bands stay readable); the reference
    (``reference_label`` names it and where its value came from) and the 95% line."""
    import numpy as np

    fig, ax = _figure()
    for i, (label, curves) in enumerate(arms):
        if not len(curves):
            continue
        y = np.asarray(curves, dtype=float)
        x = np.arange(1, y.shape[1] + 1)
        q1, med, q3 = np.percentile(y, [25, 50, 75], axis=0)
        color, style = PALETTE[i % len(PALETTE)], STYLES[i % len(STYLES)]
        seeds = f"{len(y)} seed{'s' if len(y) != 1 else ''}"
        ax.plot(x, med, color=color, ls=style, lw=1.6, label=f"{label} ({seeds})")
        ax.fill_between(x, q1, q3, color=color, alpha=0.12, lw=0)
        for edge in (q1, q3):
            ax.plot(x, edge, color=color, ls=style, lw=0.5, alpha=0.7)
    if reference:
        ax.axhline(reference, color="k", ls=":", lw=1, label=reference_label)
    ax.axhline(0.95 * optimum, color="grey", ls="--", lw=0.8, label=f"95% of the {optimum_kind}")
    ax.set_ylabel("best TFLOPS so far")
    return _finish(fig, ax, title, legend="lower right")


def run_trials(tflops: Sequence[float | None], statuses: Sequence[str], *, title: str,
               reference: float | None = None, reference_label: str = "",
               optimum: float | None = None) -> Any:
    """One run's figure: its best-so-far TFLOPS after each trial, every measured kernel as a
    dot, every failure as a cross on the axis (the legend counts them by status), the
    reference as a line (``reference_label`` names it) and a replayed dataset's best."""
    fig, ax = _figure()
    ok = [(i, t) for i, (t, s) in enumerate(zip(tflops, statuses), 1) if s == "ok" and t]
    failed = [(i, s) for i, (t, s) in enumerate(zip(tflops, statuses), 1) if s != "ok"]
    best, curve = 0.0, []
    for t, s in zip(tflops, statuses):
        best = max(best, t or 0.0) if s == "ok" else best
        curve.append(best)
    x = range(1, len(curve) + 1)
    ax.plot(x, curve, color=PALETTE[0], lw=1.8, drawstyle="steps-post", label="best so far")
    if ok:
        ax.scatter(*zip(*ok), s=9, color=PALETTE[4], alpha=0.8, lw=0, zorder=3,
                   label=f"measured ({len(ok)} ok)")
    if failed:
        counts = collections.Counter(s for _, s in failed)
        ax.scatter([i for i, _ in failed], [0.0] * len(failed), s=16, marker="x",
                   color=PALETTE[5], lw=0.9, clip_on=False, zorder=3,
                   label="failed (" + ", ".join(f"{n} {s}" for s, n in counts.most_common()) + ")")
    if reference:
        ax.axhline(reference, color="k", ls=":", lw=1, label=reference_label)
    if optimum:
        ax.axhline(optimum, color="grey", ls="--", lw=0.8,
                   label=f"dataset best {tflops_text(optimum)} TFLOPS")
    ax.set_ylabel("TFLOPS")
    ax.set_ylim(bottom=0)
    # where it hides the fewest points: a run's curve and dots fill any fixed corner
    return _finish(fig, ax, title, legend="best")


def _finish(fig: Any, ax: Any, title: str, *, legend: str) -> Any:
    ax.set_xlabel("trials")
    # a long shape and GPU name run past the figure's width at this size: wrap each line
    ax.set_title("\n".join(textwrap.fill(line, 88) for line in title.splitlines()), fontsize=9)
    ax.legend(fontsize=7.5, loc=legend)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig
