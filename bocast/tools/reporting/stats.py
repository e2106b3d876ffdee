"""``bocast report``'s statistics over runs (:class:`~bocast.tools.reporting.inputs.Run`): per arm
the best so far at each budget and the trials to the target, and the tests between arms (see
:mod:`bocast.tools.reporting`). The quartiles, the paired test and the best-so-far curve are the
comparison's and the tuner's (one definition each)."""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from bocast.errors import InputError
from bocast.progress import reference_label
from bocast.run.comparison import quartiles, wilcoxon_p
from bocast.run.tuner import first_reaching
from bocast.tools.reporting.inputs import Run


def distinct(items) -> list:
    out: list = []
    for x in items:
        if x not in out:
            out.append(x)
    return out


def _spread(values: Sequence[float]) -> dict[str, Any]:
    q1, med, q3 = quartiles(values)
    return {"median": med, "iqr": [q1, q3]}


def targets(runs: Sequence[Run], by_arm: Mapping[str, Sequence[Run]], level: float,
             baseline: str | None, budget: int | None
             ) -> tuple[dict[str, Any], dict[int, float | str]]:
    """The target's description, and per seed the TFLOPS to reach (or why there is none)."""
    if baseline is None:
        long = [r for r in runs if budget is None or r.trials >= budget]
        if not long:
            raise InputError(f"budget: no run has {budget} trials (the longest has "
                             f"{max(r.trials for r in runs)})")
        best = max(r.curve[(budget or r.trials) - 1] for r in long)
        what = "the best of every store" + (f" at {budget} trials" if budget else "")
        seeds = {r.seed for r in runs}
        return ({"of": what, "best": best, "tflops": level * best},
                {s: level * best if best > 0 else "no ok trial" for s in seeds})
    per: dict[int, float | str] = {}
    bests: dict[str, float | None] = {}
    base = {r.seed: r for r in by_arm[baseline]}
    for s in sorted({r.seed for r in runs}):
        b = base.get(s)
        n = budget or (b.trials if b else 0)
        if b is None:
            per[s] = f"no {baseline} run"
        elif b.trials < n:
            per[s] = f"{baseline} ran {b.trials} trials"
        elif not b.curve[n - 1]:
            per[s] = f"{baseline} has no ok trial"
        else:
            per[s] = level * b.curve[n - 1]
        bests[str(s)] = b.curve[n - 1] if b is not None and b.trials >= n else None
    at = f"at {budget} trials" if budget else "at the end of its run"
    return {"of": f"{baseline}'s best {at} on the same seed", "best": bests,
            "tflops": {str(s): t for s, t in per.items() if not isinstance(t, str)}}, per


def arm(rs: Sequence[Run], at: Sequence[int], targets: Mapping[int, float | str],
         within: int | None) -> dict[str, Any]:
    refs = [r.reference for r in rs if r.reference]
    ref = ({"tflops": statistics.median(x["tflops"] for x in refs),
            "what": refs[0].get("what", ""), "name": reference_label(refs[0]),
            "stores": len(refs), "recorded": refs[0].get("recorded")} if refs else None)
    best_at: dict[str, Any] = {}
    for b in at:
        vals = {r.seed: r.curve[b - 1] for r in rs if r.trials >= b}
        best_at[str(b)] = {**_spread(list(vals.values())), "seeds": len(vals),
                           "per_seed": {str(s): v for s, v in vals.items()}} if vals else None
        if vals and ref:
            best_at[str(b)]["vs_reference"] = best_at[str(b)]["median"] / ref["tflops"]
    per: dict[str, int | None | str] = {}
    censored = []
    for r in rs:
        t = targets.get(r.seed)
        if isinstance(t, str) or t is None:
            per[str(r.seed)] = t or "no target"
            continue
        hit = first_reaching(r.curve, t)
        per[str(r.seed)] = hit
        censored.append(hit if hit is not None else r.trials + 1)
    hits = [v for v in per.values() if isinstance(v, int)]
    reach = {"per_seed": per, **(_spread(censored) if censored else {}),
             "reached": len(hits), "of": len(censored)}
    if within is not None:
        reach["within"] = sum(v <= within for v in hits)
    return {"seeds": [r.seed for r in rs], "trials": {str(r.seed): r.trials for r in rs},
            "stores": [r.path for r in rs], "reference": ref, "best_at": best_at,
            "best": {**_spread([r.curve[-1] for r in rs]),
                     "per_seed": {str(r.seed): r.curve[-1] for r in rs}},
            "retimed": _retimed(rs),
            "trials_to_target": reach}


def _retimed(rs: Sequence[Run]) -> dict[str, Any] | None:
    """The runs' own figures, where they ended with a re-timing: the best kernel's re-timed
    TFLOPS and its ratio to the reference timed in turn with it, median over those seeds."""
    got = {r.seed: r.retimed for r in rs if r.retimed}
    if not got:
        return None
    return {**_spread([g["tflops"] for g in got.values()]),
            "vs_reference": statistics.median(g["vs_reference"] for g in got.values()),
            "what": next(iter(got.values()))["what"], "seeds": len(got),
            "per_seed": {str(s): g for s, g in got.items()}}


def tests(by_arm: Mapping[str, Sequence[Run]], at: Sequence[int],
           baseline: str | None) -> dict[str, dict[str, Any]]:
    """Per pair of arms (each against ``baseline``, else every pair): the tests at each
    budget (see the module) and the drift on the configurations both measured."""
    from scipy.stats import mannwhitneyu

    pairs = ([(a, baseline) for a in by_arm if a != baseline] if baseline is not None
             else list(itertools.combinations(by_arm, 2)))
    out: dict[str, dict[str, Any]] = {}
    for a, b in pairs:
        budgets: dict[str, Any] = {}
        for n in at:
            va = {r.seed: r.curve[n - 1] for r in by_arm[a] if r.trials >= n}
            vb = {r.seed: r.curve[n - 1] for r in by_arm[b] if r.trials >= n}
            t: dict[str, Any] = {}
            if min(len(va), len(vb)) >= 2:
                x, y = list(va.values()), list(vb.values())
                t["p_a_higher"] = float(mannwhitneyu(x, y, alternative="greater").pvalue)
                t["p_b_higher"] = float(mannwhitneyu(y, x, alternative="greater").pvalue)
            shared = sorted(set(va) & set(vb))
            if len(shared) >= 2:
                d = [va[s] - vb[s] for s in shared]
                t.update(paired_seeds=len(shared), a_higher=sum(x > 0 for x in d),
                         b_higher=sum(x < 0 for x in d), wilcoxon_p=wilcoxon_p(d))
            if t:
                budgets[str(n)] = t
        out[f"{a} vs {b}"] = {"a": a, "b": b, "at": budgets, "drift": _drift(by_arm[a],
                                                                            by_arm[b])}
    return out


def _drift(ra: Sequence[Run], rb: Sequence[Run]) -> dict[str, Any] | None:
    """The configurations both arms measured ok: how many, and TFLOPS a / b (the median of
    each arm's measurements of one configuration), median [IQR] over them."""
    ta: dict[str, list[float]] = {}
    tb: dict[str, list[float]] = {}
    for runs, into in ((ra, ta), (rb, tb)):
        for r in runs:
            for k, v in r.tflops.items():
                into.setdefault(k, []).append(v)
    shared = sorted(set(ta) & set(tb))
    if not shared:
        return None
    ratios = [statistics.median(ta[k]) / statistics.median(tb[k]) for k in shared]
    return {"configurations": len(shared), **_spread(ratios)}
