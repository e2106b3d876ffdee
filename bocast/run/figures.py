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
    (``reference_label`` names it and where its value came from), the optimum and the 95% line.
    The leading trials where every arm's runs are alike seed by seed (paired seeds whose first
    batch is the same) are drawn once, labelled as every arm's, not as the arms drawn over each
    other."""
    import numpy as np

    fig, ax = _figure()
    drawn = [(i, label, np.asarray(curves, dtype=float))
             for i, (label, curves) in enumerate(arms) if len(curves)]
    shared = shared_trials([y for *_, y in drawn])
    if shared:
        y = drawn[0][2][:, :shared]
        x = np.arange(1, shared + 1)
        q1, med, q3 = np.percentile(y, [25, 50, 75], axis=0)
        ax.plot(x, med, color="0.3", lw=1.6,
                label=f"all {len(drawn)} arms to trial {shared} (alike, seed by seed)")
        ax.fill_between(x, q1, q3, color="0.3", alpha=0.12, lw=0)
        for edge in (q1, q3):
            ax.plot(x, edge, color="0.3", lw=0.5, alpha=0.7)
    for i, label, y in drawn:
        start = max(shared - 1, 0)  # from the last shared trial, so each line joins it
        x = np.arange(start + 1, y.shape[1] + 1)
        q1, med, q3 = np.percentile(y[:, start:], [25, 50, 75], axis=0)
        color, style = PALETTE[i % len(PALETTE)], STYLES[i % len(STYLES)]
        seeds = f"{len(y)} seed{'s' if len(y) != 1 else ''}"
        ax.plot(x, med, color=color, ls=style, lw=1.6, label=f"{label} ({seeds})")
        ax.fill_between(x, q1, q3, color=color, alpha=0.12, lw=0)
        for edge in (q1, q3):
            ax.plot(x, edge, color=color, ls=style, lw=0.5, alpha=0.7)
    if reference:
        ax.axhline(reference, color="k", ls=":", lw=1, label=reference_label)
    ax.axhline(optimum, color="grey", ls="-", lw=0.8,
               label=f"{optimum_kind} {tflops_text(optimum)} TFLOPS")
    ax.axhline(0.95 * optimum, color="grey", ls="--", lw=0.8, label=f"95% of the {optimum_kind}")
    ax.set_ylabel("best TFLOPS so far")
    return _finish(fig, ax, title, legend="best")


def shared_trials(arms: Sequence[Any]) -> int:
    """How many leading trials every arm's curves (arrays: seeds x trials) agree on, seed by
    seed; 0 for one arm, arms of other seed counts, or a first trial that differs."""
    import numpy as np

    if len(arms) < 2 or len({y.shape[0] for y in arms}) != 1:
        return 0
    n = min(y.shape[1] for y in arms)
    same = np.all([np.all(y[:, :n] == arms[0][:, :n], axis=0) for y in arms[1:]], axis=0)
    return n if same.all() else int(np.argmin(same))


def run_trials(tflops: Sequence[float | None], statuses: Sequence[str], *, title: str,
               reference: float | None = None, reference_label: str = "",
               optimum: float | None = None) -> Any:
    """One run's figure: its best-so-far TFLOPS after each trial, every measured kernel as a
    dot, every failure as a cross on the axis (the legend counts them by status), the
    reference as a line (``reference_label`` names it) and a replayed dataset's best. The axis
    starts near where the run is (:func:`axis_bottom`), not at 0; the kernels below it are
    marked on the axis and counted, as the failures are."""
    fig, ax = _figure()
    ok = [(i, t) for i, (t, s) in enumerate(zip(tflops, statuses), 1) if s == "ok" and t]
    failed = [(i, s) for i, (t, s) in enumerate(zip(tflops, statuses), 1) if s != "ok"]
    best, curve = None, []
    for t, s in zip(tflops, statuses):
        if s == "ok" and t:
            best = max(best or 0.0, t)
        curve.append(float("nan") if best is None else best)  # no line before a first ok
    bottom = axis_bottom([t for _, t in ok], [reference, optimum])
    x = range(1, len(curve) + 1)
    ax.plot(x, curve, color=PALETTE[0], lw=1.8, drawstyle="steps-post", label="best so far")
    shown = [(i, t) for i, t in ok if t >= bottom]
    below = [(i, t) for i, t in ok if t < bottom]
    if shown:
        ax.scatter(*zip(*shown), s=9, color=PALETTE[4], alpha=0.8, lw=0, zorder=3,
                   label=f"measured ({len(ok)} ok)")
    on_axis = ax.get_xaxis_transform()  # x in trials, y in the axes: 0 is the axis's bottom
    if below:
        ax.scatter([i for i, _ in below], [0.0] * len(below), s=18, marker="v",
                   color=PALETTE[4], lw=0, clip_on=False, zorder=3, transform=on_axis,
                   label=f"{len(below)} ok below the axis (lowest "
                         f"{tflops_text(min(t for _, t in below))} TFLOPS)")
    if failed:
        counts = collections.Counter(s for _, s in failed)
        ax.scatter([i for i, _ in failed], [0.0] * len(failed), s=16, marker="x",
                   color=PALETTE[5], lw=0.9, clip_on=False, zorder=3, transform=on_axis,
                   label="failed (" + ", ".join(f"{n} {s}" for s, n in counts.most_common()) + ")")
    if reference:
        ax.axhline(reference, color="k", ls=":", lw=1, label=reference_label)
    if optimum:
        ax.axhline(optimum, color="grey", ls="--", lw=0.8,
                   label=f"dataset best {tflops_text(optimum)} TFLOPS")
    ax.set_ylabel("TFLOPS" + (f" (axis from {tflops_text(bottom)}, not 0)" if bottom else ""))
    ax.set_ylim(bottom=bottom)
    # where it hides the fewest points: a run's curve and dots fill any fixed corner
    return _finish(fig, ax, title, legend="best")


def axis_bottom(ok: Sequence[float], lines: Sequence[float | None]) -> float:
    """Where a run's TFLOPS axis starts: a margin below the lowest tenth of its kernels (so a
    few slow ones do not squash the rest to the top), or 0 where that is near 0 anyway (below
    a third of the top) or nothing ran."""
    import numpy as np

    if not ok:
        return 0.0
    lo = float(np.percentile(ok, 10))
    top = max([*ok, *(v for v in lines if v)])
    bottom = lo - 0.1 * (top - lo)
    return bottom if bottom > top / 3 else 0.0


def _finish(fig: Any, ax: Any, title: str, *, legend: str) -> Any:
    ax.set_xlabel("trials")
    # a long shape and GPU name run past the figure's width at this size: wrap each line
    ax.set_title("\n".join(textwrap.fill(line, 88) for line in title.splitlines()), fontsize=9)
    ax.legend(fontsize=7.5, loc=legend)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig
