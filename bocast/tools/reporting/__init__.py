"""``bocast report`` and :func:`report`: finished runs read from their record stores (read only,
on the CPU), grouped into arms (a label) x seeds, reported per budget.

    bocast report runs/compare_gemm1024 --at 8 16 32 64
    bocast report runs/warm --pattern '{label}_s{seed}/records.db' --baseline cold \\
        --budget 200 --within 16

The inputs: a store; a comparison's ``output`` folder (its stores are
:data:`bocast.run.comparison.STORE_NAME`, ``LABEL_seedN.db``); a tune run's folder (``records.db``
beside ``summary.json``, the arm named by the folder, less a ``_sN`` seed suffix: the layout
of ``bocast tune --output`` and of ``experiments/device/warm_default.sh``) or a folder of them;
or, with ``pattern``, the stores under a folder whose relative paths match it. A store is
opened with :meth:`bocast.records.store.Store.open` (the checks of every command; nothing written).

Reported, per arm: the best so far after N trials (:func:`bocast.run.tuner.best_so_far`: ok
records), median [interquartile range] over the seeds that ran N trials, each arm to its own
length; the trials to ``level`` of a target (the best of every store, or with ``baseline`` each
seed's target is ``level`` x that arm's best at ``budget`` on the same seed: issue 11's
warm-start criterion) and how many seeds reach it within ``within`` trials; ratios to the
vendor reference where the stores' meta holds one, named ("x cuBLAS"). Between arms, at each
budget where both have 2 seeds or more: one-sided Mann-Whitney U p-values both ways
(unpaired), and paired on the seeds both ran, the count of seeds each is higher and the
two-sided Wilcoxon signed-rank p; the configurations both arms measured give the drift
between them (TFLOPS ratio), which is live measurement noise or the drift between calls."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bocast import schema
from bocast.errors import InputError
from bocast.files import atomic_write
from bocast.locations import check_outputs, check_writable
from bocast.schema import Field

if TYPE_CHECKING:
    from bocast.tools.reporting.inputs import Run

AT = Field("at", int, min=1, max=10_000_000, doc="budgets in trials where the best so far is "
                                                  "reported (default 8, 16, 32, ... and the "
                                                  "longest run)")
LEVEL = Field("level", float, 0.95, above=0.0, max=1.0,
              doc="trials to this fraction of the target")
BUDGET = Field("budget", int, None, min=1, max=10_000_000, nullable=True,
               doc="the target is the best at this many trials (default: each run's end)")
WITHIN = Field("within", int, None, min=1, max=10_000_000, nullable=True,
               doc="count the seeds that reach the target within this many trials")
SEED = Field("seeds", int, min=0, max=schema.SEED.max, doc="only these seeds")  # a run's


@dataclass(frozen=True)
class Report:
    """What :func:`report` found: ``runs`` and the summary (:meth:`to_dict`: what ``bocast
    report --json`` prints last and ``--out`` writes to PREFIX.json); :meth:`markdown` is the
    table the command prints."""

    runs: tuple[Run, ...]
    workloads: list[dict[str, Any]]
    at: tuple[int, ...]
    level: float
    baseline: str | None
    budget: int | None
    within: int | None
    arms: dict[str, dict[str, Any]]
    target: dict[str, Any]
    tests: dict[str, dict[str, Any]]

    def to_dict(self) -> dict[str, Any]:
        return {"stores": [{"path": r.path, "label": r.label, "seed": r.seed,
                            "trials": r.trials} for r in self.runs],
                "workloads": self.workloads,
                "at": list(self.at), "level": self.level, "baseline": self.baseline,
                "budget": self.budget, "within": self.within, "target": self.target,
                "arms": self.arms, "tests": self.tests}

    def markdown(self) -> str:
        from bocast.tools.reporting.text import markdown

        return markdown(self)

    def write(self, prefix: str, *, force: bool = False) -> list[str]:
        """PREFIX.md and PREFIX.json, each with its provenance (refused over an input, and
        over an existing file unless ``force``: :func:`check_outputs`)."""
        from bocast.records.provenance import provenance

        paths = _outputs(prefix, [r.path for r in self.runs], force)
        prov = provenance()
        with atomic_write(paths[1]) as f:
            json.dump({**self.to_dict(), "provenance": prov}, f, indent=1, sort_keys=True)
        with atomic_write(paths[0]) as f:
            f.write(self.markdown() + f"\n\nGenerated {prov['date']} at commit "
                    f"{prov['git_sha']} from {len(self.runs)} record stores (read only).\n")
        return paths


def report(paths: str | os.PathLike | Sequence[str | os.PathLike], *,
           pattern: str | None = None, arms: Sequence[str] | None = None,
           seeds: Sequence[int] | None = None, at: Sequence[int] | None = None,
           level: float = 0.95, baseline: str | None = None, budget: int | None = None,
           within: int | None = None, out: str | None = None, force: bool = False) -> Report:
    """The runs of the stores under ``paths`` (see the module) as ``bocast report`` reports
    them; ``out``: also write PREFIX.md and PREFIX.json (checked before any store is read).
    Bad input (an option, a path, a damaged or foreign store) raises :class:`InputError`
    naming it."""
    from bocast.tools.reporting import inputs, stats

    if pattern is not None and "{label}" not in pattern:
        raise InputError(f"pattern: {pattern!r} names no {{label}} (and {{seed}} where the "
                         "path holds it)")
    names = [str(os.fspath(p)) for p in
             ([paths] if isinstance(paths, (str, os.PathLike)) else paths)]
    if not names:
        raise InputError("paths: name a record store or a folder of them")
    at = sorted({AT.check(b) for b in at}) if at is not None else None
    level = LEVEL.check(level)
    budget, within = BUDGET.check(budget), WITHIN.check(within)
    wanted = set(seeds) if seeds is not None else None
    for s in wanted or ():
        SEED.check(s)
    repeated = sorted({s for s in seeds or () if list(seeds or ()).count(s) > 1})
    if repeated:
        raise InputError(f"seeds: {repeated} given more than once")
    found = [f for f in inputs.find_stores(names, pattern) if arms is None or f[1] in arms]
    if out is not None:
        _outputs(out, [p for p, _, _ in found], force)
    runs = [r for r in (inputs.read(*f) for f in found) if wanted is None or r.seed in wanted]
    labels = [a for a in arms if any(r.label == a for r in runs)] if arms is not None else \
        list(dict.fromkeys(r.label for r in runs))
    missing = [a for a in arms or () if a not in labels]
    if missing or not runs:
        raise InputError(f"arms: no store of {missing} under {names}" if missing else
                         f"{names}: no store" + (f" of seeds {sorted(wanted)}" if wanted else ""))
    empty = [r.path for r in runs if not r.trials]
    if empty:  # a store made and never measured into: no curve to report
        raise InputError(f"{empty[0]} holds no records: nothing to report")
    seen: dict[tuple[str, int], str] = {}
    for r in runs:
        if (r.label, r.seed) in seen:
            raise InputError(f"two stores of arm {r.label} seed {r.seed}: "
                             f"{seen[r.label, r.seed]} and {r.path}; name one")
        seen[r.label, r.seed] = r.path
    if baseline is not None and baseline not in labels:
        raise InputError(f"baseline: {baseline!r} is not one of the arms {labels}")
    longest = max(r.trials for r in runs)
    if within is not None and within > longest:  # it would count every seed as reaching nothing
        raise InputError(f"within: {within} trials is more than the longest run's {longest}")
    if at is None:
        at = [b for b in (2 ** k for k in range(3, 40)) if b < longest] + [longest]
    by_arm = {a: sorted((r for r in runs if r.label == a), key=lambda r: r.seed) for a in labels}
    target, targets = stats.targets(runs, by_arm, level, baseline, budget)
    rep = Report(runs=tuple(r for a in labels for r in by_arm[a]),
                 workloads=stats.distinct(dict(r.workload) for r in runs), at=tuple(at),
                 level=level, baseline=baseline, budget=budget, within=within,
                 arms={a: stats.arm(rs, at, targets, within) for a, rs in by_arm.items()},
                 target=target, tests=stats.tests(by_arm, at, baseline))
    if out is not None:
        rep.write(out, force=force)
    return rep


def _outputs(prefix: str, inputs: Sequence[str], force: bool) -> list[str]:
    paths = [prefix + ".md", prefix + ".json"]
    check_outputs({"out": paths}, {"record store": list(inputs)},
                  existing=None if force else "force=True (--force)")
    for p in paths:
        check_writable(p, "out")
    return paths
