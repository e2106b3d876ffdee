"""The Markdown of a :class:`bocast.tools.reporting.Report`: what ``bocast report`` prints and
``--out`` writes to PREFIX.md (the numbers of its :meth:`~bocast.tools.reporting.Report.to_dict`,
formatted)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bocast.run.comparison import format_p

if TYPE_CHECKING:
    from bocast.tools.reporting import Report


def tflops(x: float) -> str:
    return f"{x:.1f}" if abs(x) >= 1 else f"{x:.3g}"


def _seeds(seeds: list[int]) -> str:
    return ", ".join(map(str, seeds))


def _ref(ref: dict[str, Any]) -> str:
    return f"{ref['name']} {tflops(ref['tflops'])} TFLOPS" + (
        f" ({ref['what']})" if ref["what"] and ref["what"] != ref["name"] else "")


def _trials(arm: dict[str, Any]) -> str:
    n = sorted(set(arm["trials"].values()))
    return f"{n[0]} trials" + (" each" if len(arm["seeds"]) > 1 else "") if len(n) == 1 else \
        f"{n[0]}-{n[-1]} trials"


def markdown(rep: Report) -> str:
    d = rep.to_dict()
    arms = d["arms"]
    names = list(arms)
    lines = [f"# bocast report: {len(names)} arm(s), {len(rep.runs)} record stores", ""]
    for w in d["workloads"]:
        lines.append(f"Workload {w.get('op')} {'x'.join(map(str, w.get('shape', [])))} "
                     f"({', '.join(f'{k} {v}' for k, v in w.items() if k not in ('op', 'shape'))})"
                     + (" (the stores hold different workloads)"
                        if len(d["workloads"]) > 1 else "") + ".")
    for a, arm in arms.items():
        ref = arm["reference"]
        lines.append(f"- {a}: seeds {_seeds(arm['seeds'])} ({_trials(arm)}); reference "
                     + ("none in its stores' meta nor in a dataset they replayed: no ratios"
                        if not ref else
                        f"{_ref(ref)}, recorded in dataset {ref['recorded']} (the dataset's "
                        "timing: a replay times nothing)" if ref.get("recorded") else
                        f"{_ref(ref)}, from {ref['stores']} of its stores' meta"))
    lines += ["", "## Best so far (TFLOPS)", "",
              "Best ok trial after N trials: median [interquartile range] over the seeds that "
              "ran N trials (k/n: only k of the arm's n seeds did; -: none did, the arm's "
              "length follows); the ratio is the median's, to the arm's named reference.", "",
              "| trials | " + " | ".join(names) + " |", "|---:|" + "---|" * len(names)]
    for b in rep.at:
        cells = []
        for arm in arms.values():
            e = arm["best_at"][str(b)]
            if e is None:
                cells.append(f"- ({_trials(arm)})")
                continue
            ref = arm["reference"]
            cells.append(f"{tflops(e['median'])} [{tflops(e['iqr'][0])}-{tflops(e['iqr'][1])}]"
                         + (f" {e['seeds']}/{len(arm['seeds'])}"
                            if e["seeds"] < len(arm["seeds"]) else "")
                         + (f" = {e['vs_reference']:.2f}x {ref['name']}" if ref else ""))
        lines.append(f"| {b} | " + " | ".join(cells) + " |")
    lines.append("| each run's end | " + " | ".join(
        f"{tflops(a['best']['median'])} [{tflops(a['best']['iqr'][0])}-"
        f"{tflops(a['best']['iqr'][1])}]" for a in arms.values()) + " |")
    if any(a["retimed"] for a in arms.values()):
        lines.append("| re-timed at the end (the runs' figure) | " + " | ".join(
            _retimed_cell(a) for a in arms.values()) + " |")
        lines += ["", "The rows above are in-run timings, each kernel timed once as the run "
                  "went, against the reference of its store's meta. \"re-timed\": each live "
                  "run ended by timing its best kernels and the reference in turn, in rounds, "
                  "in one process (bocast.measure.retime): the figure `bocast tune` printed, "
                  "median over seeds of the best kernel's median and of its ratio."]
    lines += _reaching(rep, d) + _tests(d)
    return "\n".join(lines)


def _retimed_cell(arm: dict[str, Any]) -> str:
    r = arm["retimed"]
    if not r:
        return "- (not re-timed)"
    return (f"{tflops(r['median'])} [{tflops(r['iqr'][0])}-{tflops(r['iqr'][1])}]"
            + (f" {r['seeds']}/{len(arm['seeds'])}" if r["seeds"] < len(arm["seeds"]) else "")
            + f" = {r['vs_reference']:.2f}x {r['what'] or 'reference'}")


def _reaching(rep: Report, d: dict[str, Any]) -> list[str]:
    target, arms = d["target"], d["arms"]
    pct = f"{rep.level:.0%}" if round(rep.level * 100, 6).is_integer() else f"{rep.level:g}x"
    per_seed = rep.baseline is not None
    lines = ["", f"## Trials to {pct} of {target['of']}", "",
             ("Per seed: the target is the baseline's best on that seed x the level."
              if per_seed else f"Target: {pct} of {tflops(target['best'])} = "
              f"{tflops(target['tflops'])} TFLOPS.")
             + " The first trial whose best so far reaches it; a run that never does counts as "
             "its trials + 1 in the median.", "",
             "| seed | " + ("target TFLOPS | " if per_seed else "") + " | ".join(arms) + " |",
             "|---:|" + ("---:|" if per_seed else "") + "---|" * len(arms)]
    seeds = sorted({s for a in arms.values() for s in a["seeds"]})
    for s in seeds:
        t = target["tflops"].get(str(s)) if per_seed else None
        cells = []
        for a in arms.values():
            v = a["trials_to_target"]["per_seed"].get(str(s), "")
            cells.append(f"not in {a['trials'][str(s)]}" if v is None else str(v))
        lines.append(f"| {s} | " + (f"{tflops(t) if t else '-'} | " if per_seed else "")
                     + " | ".join(cells) + " |")
    pad = "| " if per_seed else ""
    rows = [("median [IQR]", lambda r: f"{r['median']:g} [{r['iqr'][0]:g}-{r['iqr'][1]:g}]"
             if "median" in r else "-"),
            ("reached", lambda r: f"{r['reached']} of {r['of']}")]
    if rep.within is not None:
        rows.append((f"within {rep.within}", lambda r: f"{r['within']} of {r['of']}"))
    for name, cell in rows:
        lines.append(f"| {name} | {pad}"
                     + " | ".join(cell(a["trials_to_target"]) for a in arms.values()) + " |")
    return lines


def _tests(d: dict[str, Any]) -> list[str]:
    if not d["tests"]:
        return []
    lines = ["", "## Between arms", "",
             "p: one-sided Mann-Whitney U over the seeds that ran N trials (unpaired), each "
             "way; paired on the seeds both arms ran (in a comparison a seed gives every arm "
             "the same initial design): seeds where each arm is higher, and the two-sided "
             "Wilcoxon signed-rank p. Blank: fewer than 2 seeds.", "",
             "| A vs B | trials | p (A higher) | p (B higher) | seeds A higher / B higher | "
             "Wilcoxon p |", "|---|---:|---:|---:|---:|---:|"]
    drift = []
    for name, t in d["tests"].items():
        for n, x in t["at"].items():
            pa, pb = (format_p(x[k]) if k in x else "" for k in ("p_a_higher", "p_b_higher"))
            paired = (f"{x['a_higher']} / {x['b_higher']} of {x['paired_seeds']} | "
                      f"{format_p(x['wilcoxon_p'])}" if "paired_seeds" in x else " |")
            lines.append(f"| {name} | {n} | {pa} | {pb} | {paired} |")
        if t["drift"]:
            r = t["drift"]
            drift.append(f"- {name}: {r['configurations']} configurations measured ok by both; "
                         f"TFLOPS {t['a']} / {t['b']} median {r['median']:.4f} "
                         f"[{r['iqr'][0]:.4f}-{r['iqr'][1]:.4f}]")
    if drift:
        lines += ["", "Drift between arms (the same configuration measured by both: live noise, "
                  "or the drift between calls; exactly 1 on replay and the stand-in):", ""]
        lines += drift
    return lines
