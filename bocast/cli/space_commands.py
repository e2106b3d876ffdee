"""``bocast space`` (inspect, count, sample and statically build a schedule space) and
``bocast measure`` (a uniform sample, or every feasible configuration of a sub-space, measured
into a store through the one loop, optionally exported as a dataset)."""

from __future__ import annotations

import collections
import json
import os
import statistics
import sys
import time
from typing import Any

import numpy as np

from bocast.api import need_machine
from bocast.cli.common import (
    T0,
    UsageError,
    _check_size,
    _emit,
    _fixed_text,
    _jsonable_allowed,
    _need_compiler,
    _operator_from,
    _restriction,
    _table_of,
)
from bocast.files import atomic_write
from bocast.locations import check_outputs, check_writable
from bocast.measure.parts import make_builder, make_measurer, make_runner, runner_class
from bocast.progress import Progress, say
from bocast.records.datasets import dataset_files
from bocast.records.public import export_dataset
from bocast.records.store import Store
from bocast.run.assembly import assemble
from bocast.run.warm_sources import run_architecture
from bocast.space.candidates import SpaceCandidates
from bocast.space.operators.operator import on_gpu
from bocast.space.space import MAX_ENUMERATION, Space
from bocast.strategies.listed import Listed

# -------------------------------------------------------------------------------- space


def cmd_space(args) -> int:
    op = _operator_from(args)
    space = op.space
    outputs = {flag: path for flag, path in (("--out", args.out),
                                             ("--out-builds", args.out_builds)) if path}
    for flag, path in outputs.items():
        check_writable(path, flag)
    check_outputs(outputs, {"--subspace file": args.subspace} if args.subspace else {},
                  existing=None if args.force else "--force")
    if args.out_builds is not None and not args.check_build:
        raise UsageError("--out-builds: the build results come from --check-build")
    if args.check_build and args.sample:
        _need_compiler("--check-build")
    allowed = _restriction(args, op)

    lines = [f"{op.name} {op.workload}"] + ([f"space {op.space_choice}"]
                                           if op.space_choice else []) + [
             f"{len(space.knobs)} knobs, "
             f"{len(space.constraints)} known constraints, "
             f"{space.structural_size:,} structural configurations"]
    if args.describe:
        lines.append(space.describe())
    summary: dict[str, Any] = {"op": op.name, "workload": op.workload,
                               "structural_size": space.structural_size}
    if allowed is not None:
        say(f"counting the feasible configurations of the sub-space ({_fixed_text(allowed)})")
        n = space.count_feasible(allowed)
        _check_size(args, n)
        lines.append(f"sub-space ({_fixed_text(allowed)}): {n:,} feasible of "
                     f"{space.restricted_structural_size(allowed):,} structural (exact)")
        summary.update(subspace_feasible=n, subspace=_jsonable_allowed(allowed))
    if args.size:
        say(f"estimating the feasible set of {op.name} {op.workload['shape']} "
            f"(up to {args.size_draws:,} draws)")
        size = space.size(draws=args.size_draws, rng=args.seed)
        lines.append(f"feasible set: {size.describe()}")
        summary.update(feasible_size=size.feasible, feasible_size_exact=size.exact,
                       feasible_size_ci95=list(size.ci95))

    t = time.perf_counter()
    if args.sample:
        say(f"sampling {args.sample:,} configurations of {op.name} {op.workload['shape']} "
            f"(seed {args.seed})")
    configs = (_sample_restricted(op, args.sample, args.seed, allowed) if allowed else
               space.sample(args.sample, args.seed)) if args.sample else []
    sample_s = time.perf_counter() - t
    valid = sum(1 for v in space.validate_many(configs) if not v)
    if args.sample:
        lines.append(f"sampled {len(configs)} configurations (seed {args.seed}) in "
                     f"{sample_s:.2f} s; {valid} of them pass the known constraints")
    summary.update(sampled=len(configs), valid=valid, sample_seconds=round(sample_s, 3))
    if args.out:
        with atomic_write(args.out) as f:
            for c in configs:
                f.write(Space.key(c) + "\n")
        lines.append(f"wrote {args.out}")

    if args.check_build and configs:
        t = time.perf_counter()
        with make_builder(workers=args.workers, timeout_s=args.build_timeout,
                          reject_spills=args.reject_spills) as builder, \
                Progress("built", len(configs), unit="kernels") as meter:
            say(f"building {len(configs)} kernels for sm_90 (apply, lower, nvcc) with "
                f"{builder.workers} processes")
            failed = [0]

            def progress(i, res):
                failed[0] += res.failure_class is not None
                meter.update(step=1, note=f"{failed[0]} failed")

            results = builder.build(op, configs, on_result=progress)
        build_s = time.perf_counter() - t
        failures = collections.Counter(r.failure_class for r in results if r.failure_class)
        built = sum(r.failure_class is None for r in results)
        lines.append(f"built {built}/{len(results)} for sm_90 in {build_s:.1f} s "
                     f"({len(results) / build_s:.2f} kernels/s with {builder.workers} workers)")
        for cls, n in sorted(failures.items()):
            lines.append(f"  {cls}: {n}")
            example = next(r for r in results if r.failure_class == cls)
            lines.append("    e.g. " + example.error.replace("\n", " | ")[-300:])
        ok = [r for r in results if r.failure_class is None]
        if ok:
            regs = [r.features.get("registers", 0) for r in ok]
            smem = [r.features.get("smem_bytes", 0) + r.features.get("dynamic_smem_bytes", 0)
                    for r in ok]  # static (ptxas) + dynamic (launch)
            spills = sum(1 for r in ok if r.features.get("spill_stores", 0) > 0)
            stack = sum(1 for r in ok if r.features.get("stack_bytes", 0) > 0)
            lines.append(f"  registers median {statistics.median(regs):.0f} (max {max(regs):.0f}); "
                         f"shared memory median {statistics.median(smem) / 1024:.1f} KB "
                         f"(max {max(smem) / 1024:.1f} KB); {spills} with spills, {stack} with "
                         "a stack frame")
        summary.update(built=built, build_failed=len(results) - built,
                       failures=dict(failures), build_seconds=round(build_s, 2))
        if args.out_builds:
            with atomic_write(args.out_builds) as f:
                for c, r in zip(configs, results):
                    f.write(json.dumps({"config": json.loads(Space.key(c)), **r.to_dict()}) + "\n")
    summary["seconds"] = round(time.perf_counter() - T0, 3)
    lines.append(f"total {summary['seconds']:.2f} s")
    _emit(args, summary, lines)
    return 0


# ------------------------------------------------------------------------------ measure


def _make_runner(name: str, args):
    rpc = {"tracker": args.tracker, "key": args.key} if args.tracker or args.key else None
    return make_runner(name, timeout_s=args.run_timeout, repeats=args.repeats, seed=args.seed,
                       rpc=rpc)


def summarize_records(records, reference: dict | None) -> tuple[dict[str, Any], list[str]]:
    counts = collections.Counter(str(r.status) for r in records)
    ok = sorted((r.tflops for r in records if r.succeeded), reverse=True)
    summary: dict[str, Any] = {"rows": len(records), "status": dict(counts)}
    shares = ", ".join(f"{k} {v} ({100 * v / len(records):.0f}%)"
                       for k, v in counts.most_common()) if records else ""
    lines = [f"{len(records)} rows: {shares}"] if records else []
    if ok:
        summary.update(best_tflops=ok[0], median_tflops=statistics.median(ok))
        line = f"TFLOPS best {ok[0]:.1f}, median {statistics.median(ok):.1f}"
        if reference and reference.get("tflops"):
            summary["best_vs_reference"] = ok[0] / reference["tflops"]
            line += (f"; reference {reference['tflops']:.1f} ({reference.get('what', '')}), "
                     f"best = {ok[0] / reference['tflops']:.2f}x")
        lines.append(line)
    return summary, lines


def _check_store(args, op, allowed, subspace: dict | None) -> None:
    """An existing ``--store`` opens (a sound bocast store of this workload) and, for a table,
    holds none of another sub-space; only read (the run creates or writes it once its runner
    has started)."""
    if not (os.path.isfile(args.store) and os.path.getsize(args.store) > 0):
        return
    with Store.open(args.store, op.workload) as store:
        held = store.get_meta("subspace")
    if subspace is not None and held is not None and \
            {k: v for k, v in held.items() if k != "feasible"} != _table_of(args, allowed):
        raise UsageError(f"--store: {args.store} holds the table of another sub-space: {held}")



def _on_local_gpu(op, runner: str):
    """``op`` for the local GPU's SM count (space v3's grid and waves: ``operator.on_gpu``)."""
    arch = run_architecture(runner)
    return on_gpu(op, arch[1] if arch else None)


def cmd_measure(args) -> int:
    op = _operator_from(args)
    exhaustive = args.all or args.subspace is not None
    if exhaustive == (args.sample is not None):
        raise UsageError("give --sample N (a uniform sample), or --all / --subspace FILE (every "
                         "feasible configuration)")
    allowed = _restriction(args, op)
    cls = runner_class(args.runner)
    if not cls.live:
        raise UsageError(f"--runner {args.runner}: measure times kernels as they are built; "
                         "this runner reads recorded timings")
    if cls.fleet and not (args.tracker and args.key):  # a fleet runner's options
        raise UsageError(f"--runner {args.runner} needs --tracker HOST:PORT and --key KEY")
    if (args.tracker or args.key) and not cls.fleet:
        raise UsageError(f"--tracker, --key: only for --runner rpc (this one: {args.runner})")
    need_machine(cls, f"bocast measure --runner {args.runner}",
                 "--runner standin runs the synthetic CPU stand-in, for tests")
    if cls.needs_gpu:
        op = _on_local_gpu(op, args.runner)
    check_writable(args.store, "--store")
    if args.export:
        for path in dataset_files(args.export):
            check_writable(path, "--export")
        check_outputs({"--export": dataset_files(args.export)},
                      {"--store": args.store,
                       **({"--subspace file": args.subspace} if args.subspace else {})},
                      existing=None if args.force else "--force")
    _check_store(args, op, allowed, {} if exhaustive else None)
    if exhaustive:
        # enumerated before the store opens: a sub-space too large writes nothing
        structural = op.space.restricted_structural_size(allowed)
        if 1_000_000 < structural <= MAX_ENUMERATION:  # seconds or more
            say(f"enumerating the feasible configurations of {op.name} {op.workload['shape']} "
                f"({_fixed_text(allowed or {})}): {structural:,} structural")
        configs = op.space.enumerate_feasible(allowed)
        _check_size(args, len(configs))
        # measured in a seeded random order, so a table stopped part-way (a device session's
        # time ran out, an interrupt) is a uniform sample of its sub-space, and the next call
        # resumes it
        order = np.random.default_rng(args.seed).permutation(len(configs))
        configs = [configs[i] for i in order]
        subspace = {**_table_of(args, allowed), "feasible": len(configs)}
        what = (f"every feasible configuration of the sub-space ({_fixed_text(allowed or {})}): "
                f"{len(configs)}, in random order (seed {args.seed})")
    elif allowed:
        configs = _sample_restricted(op, args.sample, args.seed, allowed)
        subspace = None
        what = f"{len(configs)} sampled with {_fixed_text(allowed)} (seed {args.seed})"
    else:
        configs = op.space.sample(args.sample, args.seed, unique=True)
        subspace = None
        what = f"{len(configs)} sampled (seed {args.seed})"
    return _measure(args, op, configs, what, subspace)


def _sample_restricted(op, n: int, seed: int, allowed) -> list:
    """Up to ``n`` distinct configurations drawn uniformly from the sub-space ``allowed``
    (``--fix``), without enumerating it (space v3's skinny GEMMs have tens of millions of
    structural configurations with one knob fixed); fewer when it holds fewer. Rounds of draws
    from one generator (:meth:`SpaceCandidates.sample_restricted`: 2n draws, the distinct ones
    not yet taken) until n or a round finds none new (one round alone left a
    sub-space near n in size short)."""
    cands, rng = SpaceCandidates(op.space, op.workload), np.random.default_rng(seed)
    out: list = []
    seen: set[str] = set()
    while len(out) < n:
        # 2n draws a round, the distinct ones not yet taken; none new: (about) exhausted
        got = cands.sample_restricted(n, rng, allowed, seen)[: n - len(out)]
        if not got:
            break
        out += got
        seen.update(Space.key(c) for c in got)
    if not out:
        raise UsageError(f"--fix: no feasible configuration of {op.name} {op.workload['shape']} "
                         f"with {_fixed_text(allowed)} in 200,000 draws (`bocast space --fix "
                         "...` counts them exactly)")
    return out


def _measure(args, op, configs, what, subspace) -> int:

    runner = _make_runner(args.runner, args)
    t0 = time.perf_counter()
    with runner, make_builder(workers=args.workers, timeout_s=args.build_timeout,
                              compile=runner_class(args.runner).compiles,
                              reject_spills=args.reject_spills) as builder:
        device = runner.described()
        # the runner started: only now is the store created, so a failed start leaves none
        store = Store(args.store, op.workload)
        with store:
            if subspace is not None:
                held = store.get_meta("subspace")
                if held not in (None, subspace):
                    raise UsageError(f"--store: {args.store} holds the table of another "
                                     f"sub-space: {held}")
                store.set_meta("subspace", subspace)
            done = store.keys()
            todo = [c for c in configs if Space.key(c) not in done]
            lines = [(f"{op.name} {op.workload}: {what}, {len(configs) - len(todo)} already "
                      f"in {args.store}, {len(todo)} to measure")]
            say(lines[0])
            reference = store.get_meta("reference")
            if reference is None or args.reference_again:
                reference = runner.reference(op)
                store.set_meta("reference", reference)
            say(f"device: {device.get('gpu')} driver {device.get('driver')}; reference "
                f"{reference.get('latency_ms', 0):.4f} ms, {reference.get('tflops', 0):.1f} "
                f"TFLOPS ({reference.get('what', '')})")
            best = [0.0]
            with Progress("measured", len(todo), unit="configurations",
                          every_n=args.progress_every, every_s=30) as meter:
                def progress(rec):
                    if rec.succeeded:
                        best[0] = max(best[0], rec.tflops)
                    meter.update(step=1, best=best[0] or None)

                # made before the loop: its session is recorded even when nothing is left
                measurer = make_measurer(op, store, runner, builder, on_record=progress,
                                         session_info={"device": device, "runner": runner.name,
                                                       "command": " ".join(sys.argv)})
                # the one loop, over a strategy that lists the configurations: batch i + 1
                # builds while batch i runs, and no batch is asked after --max-seconds
                listed = Listed(SpaceCandidates(op.space, op.workload), todo, seed=args.seed)
                measured = assemble(listed, measurer=measurer, trials=len(todo),
                                    seconds=args.max_seconds, batch_size=args.batch,
                                    source=f"{'all' if subspace is not None else 'sample'}"
                                           f"(seed={args.seed})").run().records if todo else []
    seconds = time.perf_counter() - t0
    with Store.open(args.store) as store:  # the runner and builder have stopped
        records = store.records()
        summary, more = summarize_records(records, reference)
        left = len(todo) - len(measured)
        lines += more + [f"measured {len(measured)} in {seconds:.1f} s "
                         f"({len(measured) / max(seconds, 1e-9):.2f} configurations/s)"
                         + (f"; {left} left for the next call (--max-seconds)" if left else "")]
        summary.update(op=op.name, workload=op.workload, store=args.store,
                       measured_now=len(measured), left=left, seconds=round(seconds, 2),
                       reference=reference, device=device)
        if subspace is not None:
            summary["subspace"] = subspace
        if args.export:
            csv_path, meta_path = export_dataset(args.store, args.export, {
                "workload": op.workload, "reference": reference, "device": device,
                "sessions": store.sessions(), "sample_seed": args.seed,
                **({"subspace": subspace, "complete": left == 0} if subspace else {}),
                "timing": "CUDA events around CUDA-graph replays of back-to-back launches; "
                          f"median of {args.repeats} replays; inputs uniform[-1,1) fp16",
            })
            lines.append(f"exported {csv_path} and {meta_path}")
    _emit(args, summary, lines[1:])
    return 0
