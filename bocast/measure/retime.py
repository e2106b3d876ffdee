"""Re-timing: built kernels and the vendor reference timed in turn, in rounds, in one runner
process, so that every ratio is to a reference reading of the same process and minutes.

A run's kernels are timed one after another over minutes while the GPU warms and its clock
falls (an H200 read 1980 MHz idle and 1530 MHz busy); a reference timed once, at the start, on
the cooler GPU made the printed ratio overstate (1.14x printed, 1.02-1.05x interleaved: issue
40). :func:`retime` is the remedy, shared by the end of every live run (:func:`final_figure`)
and ``bocast remeasure``: each round times the reference, then every kernel in a fresh random
order; a last reference closes the last round. Where the runner can (:meth:`bocast.measure.runner.
WorkerRunner.run_paired`), a kernel and the reference are timed in one task, their CUDA-graph
replays alternating, and a kernel's ratio in a round is the median of those pairs: the clock
moves on the scale of milliseconds under load (1380-1740 MHz within one re-timing on an H200),
and readings seconds apart differed by 3-9% in a round (issue 40's first measurement).
Otherwise a kernel's ratio in a round is its TFLOPS over the mean of the reference readings
around that round. Its ratio is the median over rounds, its figure the median of its TFLOPS.

Choosing the best of several kernels by the same readings that give its figure overstates it
(the fastest of five near-equal medians is partly the luckiest): a run's figure is therefore
timed again, the chosen kernel and the reference alone in turn (:func:`final_figure`).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from bocast.measure.telemetry import TELEMETRY
from bocast.records.record import Record, speed
from bocast.records.status import Status
from bocast.space.knobs import Config
from bocast.space.operators.operator import Operator
from bocast.space.space import Space

#: what a re-timing's figures mean where the runner times a kernel and the reference in one
#: task (:meth:`bocast.measure.runner.WorkerRunner.run_paired`), recorded with them
METHOD_PAIRED = ("the best kernels timed in rounds in one runner process, each round every "
                 "kernel in a fresh random order, each kernel's CUDA-graph replays alternating "
                 "with the reference's in one task (20 pairs, about 1 ms each); a kernel's ratio "
                 "in a round is the median over its pairs of the reference's time over its "
                 "own, its ratio the median over rounds, its figure the median of its TFLOPS; "
                 "a run's figure: the kernel of the highest ratio, timed again in new rounds "
                 "(readings that did not choose it)")
#: what a re-timing's figures mean otherwise, recorded with them
METHOD = ("the best kernels and the reference timed in turn in one runner process: each round "
          "the reference, then every kernel in a fresh random order; the reference once more "
          "after the last round; a kernel's ratio in a round is its TFLOPS over the mean of the "
          "reference readings before and after that round, its ratio the median over rounds, "
          "its figure the median of its TFLOPS; a run's figure: the kernel of the highest "
          "ratio, timed again with the reference alone (readings that did not choose it)")


def pairs(runner) -> bool:
    """Whether ``runner`` times a kernel and the reference in one task (``run_paired``)."""
    return callable(getattr(runner, "run_paired", None))


def method_of(runner) -> str:
    """The re-timing method :func:`retime` uses with ``runner`` (recorded with its figures: a
    kept figure of another method is timed again)."""
    return METHOD_PAIRED if pairs(runner) else METHOD


def spread(xs: Sequence[float]) -> dict[str, float]:
    """median, min, max and count of readings."""
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def retime(runner, builder, groups: Sequence[tuple[Operator, Sequence[Config]]], *,
           rounds: int, seed: int = 0,
           on_round: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Build each group's configurations with ``builder`` (groups: one operator each, as a
    store of several spaces holds), then time ``rounds`` rounds with ``runner``; the
    reference is the first group's operator's. Returns ``{"reference": {"readings", "tflops":
    spread, "what"}, "kernels": [{"key", "config", "space", "build_status", "readings",
    "tflops": spread or None, "vs_reference"}] (groups' order), "rounds", "method",
    "timing"}``. A kernel that fails in a round keeps that round's error; one that never
    times has no figure. ``on_round(i)`` after each round (progress)."""
    rng = np.random.default_rng(seed)
    kernels: list[dict[str, Any]] = []
    builds = []
    for op, configs in groups:
        for c, b in zip(configs, builder.build(op, list(configs)) if configs else []):
            kernels.append({"key": b.key, "config": _jsonable(c),
                            "space": op.workload.get("space", ""),
                            "build_status": str(b.status), "readings": [], "errors": []})
            if b.status is not Status.OK:
                kernels[-1]["errors"].append(b.error[-300:])
            builds.append((op, b))
    ok = [i for i, (_, b) in enumerate(builds) if b.status is Status.OK]
    paired = pairs(runner)
    reference_op = groups[0][0]
    references: list[dict[str, Any]] = []
    for r in range(rounds):
        if not paired:
            references.append(_reading(runner.reference(reference_op)))
        for i in (ok[j] for j in rng.permutation(len(ok))):
            op, b = builds[i]
            if paired:
                res, extra = runner.run_paired(op, b)
            else:
                res, extra = runner.run(op, [b])[0], {}
            if res.status is Status.OK and res.tflops and (extra or not paired):
                reading = {"round": r + 1, "tflops": res.tflops, "latency_ms": res.latency_ms,
                           **{k: getattr(res, k) for k in TELEMETRY
                              if getattr(res, k) is not None}}
                if paired:
                    reading["ratio"] = extra["ratio"]
                    references.append({**_reading(extra["reference"]), "round": r + 1,
                                       "with": b.key})
                kernels[i]["readings"].append(reading)
            else:
                kernels[i]["errors"].append(f"round {r + 1}: {res.status}: {res.error[:200]}")
        if on_round is not None:
            on_round(r + 1)
    if not paired:
        references.append(_reading(runner.reference(reference_op)))
    if not references:
        raise RuntimeError("no kernel could be timed with the reference")
    ref = spread([x["tflops"] for x in references])
    for k in kernels:
        got = [x["tflops"] for x in k["readings"]]
        ratios = [x["ratio"] if paired else
                  x["tflops"] / ((references[x["round"] - 1]["tflops"]
                                  + references[x["round"]]["tflops"]) / 2)
                  for x in k["readings"]]
        k["tflops"] = spread(got) if got else None
        k["ratios"] = ratios
        k["vs_reference"] = statistics.median(ratios) if ratios else None
    return {"reference": {"readings": references, "tflops": ref,
                          "what": references[0].get("what", "")},
            "kernels": kernels, "rounds": rounds, "paired": paired,
            "method": METHOD_PAIRED if paired else METHOD,
            "timing": runner.timing() if hasattr(runner, "timing") else {}}


def _jsonable(config: Config) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in config.items()}


def _reading(ref: dict[str, Any] | None) -> dict[str, Any]:
    if not ref or not ref.get("tflops"):
        raise RuntimeError("the runner timed no reference, so nothing can be re-timed "
                           "against one")
    return {k: ref[k] for k in ("tflops", "latency_ms", "what", *TELEMETRY) if k in ref}


def top_configs(records: Sequence[Record], n: int) -> list[Record]:
    """The ``n`` fastest distinct succeeded records, fastest first (by their in-run figure:
    :func:`bocast.records.record.speed`)."""
    key = speed(records)
    ranked = sorted((r for r in records if r.succeeded), key=lambda r: -key(r))
    out, seen = [], set()
    for r in ranked:
        if r.key not in seen:
            seen.add(r.key)
            out.append(r)
        if len(out) == n:
            break
    return out


def best_of(retimed: dict[str, Any]) -> dict[str, Any] | None:
    """The re-timed kernel of the highest ratio to the reference (None if none timed)."""
    timed = [k for k in retimed["kernels"] if k["vs_reference"] is not None]
    return max(timed, key=lambda k: k["vs_reference"]) if timed else None


def final_figure(runner, builder, op: Operator, records: Sequence[Record], *, top: int,
                 rounds: int, seed: int = 0,
                 on_round: Callable[[int], None] | None = None) -> dict[str, Any] | None:
    """A live run's figure: its ``top`` best kernels re-timed with the reference
    (:func:`retime`); ``{"best": the kernel of the highest median, ..., "keys": the re-timed
    keys}``. None when the run has no succeeded kernel."""
    picks = top_configs(records, top)
    if not picks:
        return None
    builder = _Kept(builder)  # the confirmation times a kernel already built for the choice
    out = retime(runner, builder, [(op, [op.space.from_json(r.config) for r in picks])],
                 rounds=rounds, seed=seed, on_round=on_round)
    in_run = {r.key: r for r in picks}
    for k in out["kernels"]:
        k["in_run_tflops"] = in_run[k["key"]].tflops
        k["in_run_vs_reference"] = in_run[k["key"]].vs_reference  # paired trials only
    chosen = best_of(out)
    out["keys"] = [r.key for r in picks]
    out["chosen_among"] = out["kernels"]
    if chosen is not None and len(picks) > 1:
        # the figure on readings that did not choose it: the kernel and the reference alone
        config = next(r.config for r in picks if r.key == chosen["key"])
        again = retime(runner, builder, [(op, [op.space.from_json(config)])], rounds=rounds,
                       seed=seed)
        confirmed = again["kernels"][0]
        if confirmed["vs_reference"] is not None:
            chosen = {**confirmed, "in_run_tflops": chosen["in_run_tflops"],
                      "in_run_vs_reference": chosen["in_run_vs_reference"],
                      "choosing_rounds": {k: chosen[k] for k in ("tflops", "vs_reference")}}
            out["reference_choosing"] = out["reference"]
            out["reference"] = again["reference"]
    out["best"] = chosen
    return out


class _Kept:
    """A builder that builds each configuration once and hands its result out again."""

    def __init__(self, builder):
        self.builder, self.built = builder, {}

    def build(self, op: Operator, configs: Sequence[Config]) -> list:
        todo = [c for c in configs if Space.key(c) not in self.built]
        for c, b in zip(todo, self.builder.build(op, todo) if todo else []):
            self.built[Space.key(c)] = b
        return [self.built[Space.key(c)] for c in configs]
