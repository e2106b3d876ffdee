"""The ``bocast`` command.

Every subcommand prints a human summary; with ``--json`` its last line is one JSON object.
Bad input ends with one line ``bocast: error: ...`` and exit code 2.
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
import time
from typing import Any, Sequence

import numpy as np

from bocast.operator import WorkloadError, get_operator, operators, parse_shape
from bocast.space import Space, SpaceError

T0 = time.perf_counter()


class UsageError(Exception):
    """Bad input: reported in one line, exit code 2."""


def _emit(args, summary: dict[str, Any], lines: Sequence[str]) -> None:
    for line in lines:
        print(line)
    if args.json:
        print(json.dumps(summary, sort_keys=True))


def _operator_from(args):
    """The operator named on the command line, or the one of ``--subspace``'s file."""
    if getattr(args, "subspace", None):
        from bocast.operator import from_workload
        from bocast.subspace import load

        if args.op or args.shape or args.dtype or args.layout or args.space:
            raise UsageError("--subspace names its own workload: give no operator, --shape, "
                             "--dtype, --layout or --space with it")
        args.loaded_subspace = load(args.subspace)
        return from_workload(args.loaded_subspace.workload)
    if not args.op:
        raise UsageError("name an operator (or give --subspace FILE)")
    op_cls = get_operator(args.op)
    shape = parse_shape(args.shape) if args.shape else None
    options = {}
    if args.dtype:
        options["dtype"] = args.dtype
    if args.layout:
        options["layout"] = args.layout
    if args.space:
        options["space"] = args.space
    return op_cls.from_args(shape, **options)


# -------------------------------------------------------------------------------- space


def cmd_space(args) -> int:
    op = _operator_from(args)
    space = op.space
    if args.sample < 0:
        raise UsageError("--sample must be >= 0")
    lines = [f"{op.name} {op.workload}", f"{len(space.knobs)} knobs, "
             f"{len(space.constraints)} known constraints, "
             f"{space.structural_size:,} structural configurations"]
    if args.describe:
        lines.append(space.describe())
    summary: dict[str, Any] = {"op": op.name, "workload": op.workload,
                               "structural_size": space.structural_size}
    allowed = _restriction(args, op)
    if allowed is not None:
        n = space.count_feasible(allowed)
        lines.append(f"sub-space ({_fixed_text(allowed)}): {n:,} feasible of "
                     f"{space.restricted_structural_size(allowed):,} structural (exact)")
        summary.update(subspace_feasible=n, subspace=_jsonable_allowed(allowed))
    if args.size:
        size = space.size(draws=args.size_draws, rng=args.seed)
        lines.append(f"feasible set: {size.describe()}")
        summary.update(feasible_size=size.feasible, feasible_size_exact=size.exact,
                       feasible_size_ci95=list(size.ci95))

    t = time.perf_counter()
    configs = space.sample(args.sample, args.seed) if args.sample else []
    sample_s = time.perf_counter() - t
    valid = sum(1 for v in space.validate_many(configs) if not v)
    lines.append(f"sampled {len(configs)} configurations (seed {args.seed}) in {sample_s:.2f} s; "
                 f"{valid} pass validate()")
    summary.update(sampled=len(configs), valid=valid, sample_seconds=round(sample_s, 3))
    if args.out:
        with open(args.out, "w") as f:
            for c in configs:
                f.write(Space.key(c) + "\n")
        lines.append(f"wrote {args.out}")

    if args.check_build and configs:
        from bocast.measure.builder import Builder
        from bocast.measure.nvcc import why_no_compiler

        reason = why_no_compiler()
        if reason:
            raise UsageError(f"--check-build: {reason}")
        t = time.perf_counter()
        done = [0]

        def progress(i, res):
            done[0] += 1
            if not args.json and sys.stderr.isatty():
                print(f"\r  built {done[0]}/{len(configs)}", end="", file=sys.stderr, flush=True)

        with Builder(workers=args.workers, timeout_s=args.build_timeout,
                     reject_spills=args.reject_spills) as builder:
            results = builder.build(op, configs, on_result=progress)
        if not args.json and sys.stderr.isatty():
            print(file=sys.stderr)
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
            with open(args.out_builds, "w") as f:
                for c, r in zip(configs, results):
                    f.write(json.dumps({"config": json.loads(Space.key(c)), **r.to_dict()}) + "\n")
    summary["seconds"] = round(time.perf_counter() - T0, 3)
    lines.append(f"total {summary['seconds']:.2f} s")
    _emit(args, summary, lines)
    return 0


# ------------------------------------------------------------------------------ measure


def _make_runner(name: str, args):
    kwargs = dict(timeout_s=args.run_timeout, repeats=args.repeats, seed=args.seed)
    if name == "gpu":
        from bocast.measure.runner import GpuRunner

        return GpuRunner(**kwargs)
    if name == "standin":
        from bocast.measure.standin import StandinRunner

        return StandinRunner(**kwargs)
    if name == "rpc":
        if not (args.tracker and args.key):
            raise UsageError("--runner rpc needs --tracker HOST:PORT and --key KEY")
        from bocast.measure.rpc import RpcRunner

        return RpcRunner(args.tracker, args.key, **kwargs)
    raise UsageError(f"unknown runner {name!r}: use gpu, rpc or standin")


def summarize_records(records, reference: dict | None) -> tuple[dict[str, Any], list[str]]:
    counts = collections.Counter(str(r.status) for r in records)
    ok = sorted((r.tflops for r in records if r.ok and r.tflops), reverse=True)
    summary: dict[str, Any] = {"rows": len(records), "status": dict(counts)}
    lines = [f"{len(records)} rows: " + ", ".join(f"{k} {v} ({100 * v / len(records):.0f}%)"
                                                  for k, v in counts.most_common())] if records else []
    if ok:
        summary.update(best_tflops=ok[0], median_tflops=statistics.median(ok))
        line = f"TFLOPS best {ok[0]:.1f}, median {statistics.median(ok):.1f}"
        if reference and reference.get("tflops"):
            summary["best_vs_reference"] = ok[0] / reference["tflops"]
            line += (f"; reference {reference['tflops']:.1f} ({reference.get('what', '')}), "
                     f"best = {ok[0] / reference['tflops']:.2f}x")
        lines.append(line)
    return summary, lines


def _restriction(args, op) -> dict | None:
    """The knob restriction of ``--subspace`` or ``--fix`` (None: the whole space)."""
    from bocast.subspace import parse_fix_args

    sub = getattr(args, "loaded_subspace", None)
    if sub is not None:
        if args.fix:
            raise UsageError("--fix and --subspace: put the fixed knobs in the file")
        n = sub.count(op.space)
        if sub.expected is not None and n != sub.expected:
            raise UsageError(f"{args.subspace}: the sub-space has {n} feasible configurations, "
                             f"the file says {sub.expected} (the space changed?)")
        return sub.allowed
    return parse_fix_args(op.space, args.fix) if args.fix else None


def _jsonable_allowed(allowed: dict) -> dict:
    return {k: [list(v) if isinstance(v, tuple) else v for v in vals] for k, vals in allowed.items()}


def _fixed_text(allowed: dict) -> str:
    return ", ".join(f"{k}={'|'.join(map(str, v))}" for k, v in allowed.items()) or "no knob fixed"


def cmd_measure(args) -> int:
    from bocast.measure.builder import Builder
    from bocast.measure.engine import Measurer
    from bocast.records import Store, StoreError, export_dataset

    op = _operator_from(args)
    exhaustive = args.all or bool(args.subspace)
    if exhaustive == (args.sample is not None):
        raise UsageError("give --sample N (a uniform sample), or --all / --subspace FILE (every "
                         "feasible configuration)")
    if args.fix and not exhaustive:
        raise UsageError("--fix restricts --all: give --all too")
    if args.sample is not None and args.sample <= 0:
        raise UsageError("--sample must be > 0")
    if args.max_seconds is not None and args.max_seconds <= 0:
        raise UsageError("--max-seconds must be > 0")
    allowed = _restriction(args, op)
    if exhaustive:  # enumerated before the store opens: a sub-space too large writes nothing
        configs = op.space.enumerate_feasible(allowed)
        # measured in a seeded random order, so a table stopped part-way (a device session's
        # time ran out) is a uniform sample of its sub-space, and the next call resumes it
        order = np.random.default_rng(args.seed).permutation(len(configs))
        configs = [configs[i] for i in order]
        subspace = {**(args.loaded_subspace.describe() if args.subspace else
                       {"name": "", "allowed": _jsonable_allowed(allowed or {})}),
                    "feasible": len(configs)}
        what = f"every feasible configuration of the sub-space ({_fixed_text(allowed or {})}): " \
               f"{len(configs)}, in random order (seed {args.seed})"
    else:
        configs = op.space.sample(args.sample, args.seed, unique=True)
        subspace = None
        what = f"{len(configs)} sampled (seed {args.seed})"
    try:
        store = Store(args.store, op.workload)
    except StoreError as e:
        raise UsageError(str(e)) from None
    if subspace is not None:
        held = store.get_meta("subspace")
        if held not in (None, subspace):
            store.close()
            raise UsageError(f"{args.store} holds the table of another sub-space: {held}")
        store.set_meta("subspace", subspace)
    done = store.keys()
    todo = [c for c in configs if Space.key(c) not in done]
    lines = [f"{op.name} {op.workload}: {what}, "
             f"{len(configs) - len(todo)} already in {args.store}, {len(todo)} to measure"]
    print(lines[0], flush=True)
    runner = _make_runner(args.runner, args)
    t0 = time.perf_counter()
    with runner, Builder(workers=args.workers, timeout_s=args.build_timeout,
                         compile=args.runner != "standin",
                         reject_spills=args.reject_spills) as builder:
        device = runner.device()
        reference = store.get_meta("reference")
        if reference is None or args.reference_again:
            reference = runner.reference(op)
            store.set_meta("reference", reference)
        print(f"device: {device.get('gpu')} driver {device.get('driver')}; reference "
              f"{reference.get('latency_ms', 0):.4f} ms, {reference.get('tflops', 0):.1f} TFLOPS "
              f"({reference.get('what', '')})", flush=True)
        measurer = Measurer(op, store, builder, runner, session_info={
            "device": device, "runner": runner.name, "command": " ".join(sys.argv)})
        n_done = [0]

        def progress(rec):
            n_done[0] += 1
            if n_done[0] % args.progress_every == 0:
                print(f"  {n_done[0]}/{len(todo)} measured, {time.perf_counter() - t0:.0f} s",
                      flush=True)

        deadline = None if args.max_seconds is None else time.monotonic() + args.max_seconds
        measured = measurer.measure_batches(
            [todo[i:i + args.batch] for i in range(0, len(todo), args.batch)],
            source=f"{'all' if exhaustive else 'sample'}(seed={args.seed})", on_record=progress,
            deadline=deadline)
    seconds = time.perf_counter() - t0
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
    store.close()
    _emit(args, summary, lines[1:])
    return 0


# --------------------------------------------------------------------------------- tune


def cmd_tune(args) -> int:
    from bocast import config as cfgmod
    from bocast.candidates import SpaceCandidates
    from bocast.measure.replay import ReplayMeasurer
    from bocast.records import Store, StoreError, provenance
    from bocast.strategies import StrategyError, make_strategy
    from bocast.tuner import Tuner

    # validate everything before writing anything
    overrides = {k: v for k, v in (("tracker", args.tracker), ("key", args.key),
                                   ("gpu_model", args.gpu_model)) if v}
    try:
        cfg = cfgmod.load(args.config, runner=args.runner, rpc=overrides)
    except cfgmod.ConfigError as e:
        raise UsageError(f"{args.config}: {e}") from None
    try:
        op, dataset = cfgmod.workload_and_dataset(cfg.workload, cfg.runner, cfg.dataset)
    except cfgmod.ConfigError as e:
        raise UsageError(f"{args.config}: {e}") from None
    if dataset is not None:
        candidates = dataset.candidates()
    elif cfg.runner == "rpc":  # kernels run on the servers; this host only builds them
        candidates = SpaceCandidates(op.space)
    else:
        import torch

        if not torch.cuda.is_available():
            raise UsageError(f"{args.config}: runner tvm needs a CUDA GPU; this machine has none "
                             "(use --runner replay with a recorded dataset)")
        candidates = SpaceCandidates(op.space)
    try:
        strategy = make_strategy(cfg.strategy, candidates, seed=cfg.seed, **cfg.strategy_options)
    except StrategyError as e:
        raise UsageError(f"{args.config}: strategy: {e}") from None
    try:
        store = Store(f"{cfg.output}/records.db", op.workload)
    except StoreError as e:
        raise UsageError(f"{args.config}: output: {e}") from None

    previous = store.records()
    closers = []
    if dataset is not None:
        measurer = ReplayMeasurer(dataset, store)
        reference = (dataset.reference or {}).get("tflops")
        print(f"runner: replay of {cfg.dataset} ({len(dataset.configs)} recorded configurations; "
              "no GPU is used)", file=sys.stderr)
    else:
        from bocast.measure.builder import Builder
        from bocast.measure.engine import Measurer
        from bocast.measure.rpc import RpcRunner
        from bocast.measure.runner import GpuRunner

        ro = cfg.runner_options
        kw = dict(timeout_s=ro.get("run_timeout", 30), repeats=ro.get("repeats", 10),
                  seed=cfg.seed)
        runner = RpcRunner(**cfg.rpc, **kw) if cfg.runner == "rpc" else GpuRunner(**kw)
        closers.append(runner)
        device = runner.device()
        ref = store.get_meta("reference") or runner.reference(op)
        builder = Builder(workers=ro.get("workers"), timeout_s=ro.get("build_timeout", 180),
                          reject_spills=ro.get("reject_spills", False))
        closers.append(builder)
        store.set_meta("reference", ref)
        reference = ref.get("tflops")
        measurer = Measurer(op, store, builder, runner, session_info={
            "device": device, "runner": cfg.runner, "config": cfg.raw})
        print(f"runner: live on {device.get('gpu')}; reference {reference:.1f} TFLOPS",
              file=sys.stderr)
    if previous:
        print(f"resuming: {len(previous)} trials already in {cfg.output}/records.db",
              file=sys.stderr)
    tuner = Tuner(strategy, measurer, trials=cfg.trials, seconds=cfg.seconds,
                  batch_size=cfg.batch_size, optimum=dataset.best_tflops if dataset else None,
                  reference=reference, progress=not args.json)
    try:
        result = tuner.run(previous)
    finally:
        for c in closers:
            c.close()
    summary = {**result.summary(), "config": cfg.path, "config_sha256": cfg.digest,
               "strategy": cfg.strategy, "strategy_options": strategy.hyper, "seed": cfg.seed,
               "runner": cfg.runner, "dataset": cfg.dataset, "output": cfg.output,
               "provenance": provenance()}
    with open(f"{cfg.output}/summary.json", "w") as f:
        json.dump(summary, f, indent=1, sort_keys=True, default=str)
    store.close()
    best = result.best_tflops or 0.0
    lines = [f"{cfg.strategy} ({strategy.hyper.get('acquisition', '')}) seed {cfg.seed}: "
             f"{result.trials} trials, best {best:.1f} TFLOPS"
             + (f" = {best / reference:.2f}x reference" if reference else "")]
    if result.optimum:
        lines.append(f"dataset best {result.optimum:.1f} TFLOPS; 95% reached at trial "
                     f"{result.trials_to(0.95)}")
    lines.append(f"records: {cfg.output}/records.db; summary: {cfg.output}/summary.json")
    _emit(args, {k: summary[k] for k in summary if k != "provenance"}, lines)
    return 0


# ------------------------------------------------------------------------------ compare


def cmd_compare(args) -> int:
    from bocast import compare
    from bocast.config import ConfigError

    try:
        cfg = compare.load(args.config)
        compare.validate(cfg)
        if cfg.runner == "tvm" and not args.summarize:
            import torch

            if not torch.cuda.is_available():
                raise ConfigError("runner: tvm compares live on a CUDA GPU; this machine has "
                                  "none (use runner: replay with a recorded dataset)")
    except ConfigError as e:
        raise UsageError(f"{args.config}: {e}") from None
    only = [x for x in args.only.split(",") if x] if args.only else None
    if args.summarize:
        only = []
    try:
        summary = compare.run(cfg, progress=(lambda m: None) if args.json else print, only=only)
    except ConfigError as e:
        raise UsageError(f"{args.config}: {e}") from None
    if "missing" in summary:
        _emit(args, summary, [f"ran {', '.join(only) or 'nothing'}; results are written once "
                              f"these runs have finished too: {', '.join(summary['missing'])}"])
        return 0
    lines = [open(cfg.results + ".md").read(), f"wrote {cfg.results}.md/.csv/.json/.png "
             f"and records under {cfg.output} in {summary['seconds']:.0f} s"]
    keep = ("median_best", "median_trials_to_95pct", "median_best_vs_reference",
            "median_trials_to_95pct_of_baseline")
    brief = {"name": cfg.name, "seconds": summary["seconds"], "results": cfg.results,
             "optimum_tflops": summary["optimum_tflops"], "optimum_kind": summary["optimum_kind"],
             "reference_tflops": summary["reference_tflops"],
             "strategies": {lab: {k: s[k] for k in keep if k in s}
                            for lab, s in summary["strategies"].items()},
             "mann_whitney_u": summary["mann_whitney_u"]}
    _emit(args, brief, lines)
    return 0


# ------------------------------------------------------------------------------ parser


def _add_workload_args(p: argparse.ArgumentParser, *, subspace: bool = False) -> None:
    if subspace:
        p.add_argument("op", nargs="?", help=f"operator: {', '.join(operators())} (none with "
                                             "--subspace)")
        p.add_argument("--subspace", help="a sub-space file (experiments/exhaustive/*.yaml): its "
                                          "workload and fixed knobs")
        p.add_argument("--fix", action="append", default=[], metavar="KNOB=VALUE",
                       help="restrict a knob to a value (repeat a knob for several values; a "
                            "split's value is its factors, comma-separated)")
    else:
        p.add_argument("op", help=f"operator: {', '.join(operators())}")
    p.add_argument("--shape", help="extents, comma-separated (per operator; see `bocast ops`)")
    p.add_argument("--dtype", help="input:output types, e.g. fp16:fp32 (default) or fp16:fp16")
    p.add_argument("--layout", help="operand layout where the operator has one (gemm: NT or NN)")
    p.add_argument("--space", help="schedule space generation: v2 (default; pipelined) or v1 "
                                   "(Heron's WMMA knobs, the space of the v1 datasets)")


REJECT_SPILLS_HELP = ("build-time filter: record kernels whose ptxas report shows register "
                      "spills or a stack frame as build_rejected, without running them")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="bocast", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("space", help="inspect, sample and statically build a schedule space")
    _add_workload_args(p, subspace=True)
    p.add_argument("--sample", type=int, default=0, help="number of feasible configurations")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--describe", action="store_true", help="list knobs and known constraints")
    p.add_argument("--size", action="store_true", help="estimate the size of the feasible set")
    p.add_argument("--size-draws", type=int, default=200_000)
    p.add_argument("--check-build", action="store_true",
                   help="apply, lower and compile every sample with nvcc for sm_90")
    p.add_argument("--workers", type=int, default=None, help="build processes (default: cores)")
    p.add_argument("--build-timeout", type=float, default=180.0, help="seconds per build")
    p.add_argument("--reject-spills", action="store_true", help=REJECT_SPILLS_HELP)
    p.add_argument("--out", help="write the sampled configurations as JSON lines")
    p.add_argument("--out-builds", help="write per-configuration build results as JSON lines")
    p.add_argument("--json", action="store_true", help="last line: one JSON summary")
    p.set_defaults(func=cmd_space)

    p = sub.add_parser("measure", help="measure uniformly sampled configurations, or every "
                                       "feasible one of a sub-space, into a store")
    _add_workload_args(p, subspace=True)
    p.add_argument("--sample", type=int, help="configurations to sample")
    p.add_argument("--all", action="store_true",
                   help="every feasible configuration (of the sub-space of --fix or --subspace)")
    p.add_argument("--max-seconds", type=float, default=None,
                   help="start no new batch after this many seconds; the next call resumes "
                        "from the store (a device session's time limit)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--store", required=True, help="record store (SQLite); resumed if it exists")
    p.add_argument("--runner", default="gpu", help="gpu (default), rpc (GPU servers of a "
                                                  "tracker) or standin (synthetic, tests)")
    _add_rpc_args(p)
    p.add_argument("--batch", type=int, default=64, help="configurations built per batch")
    p.add_argument("--workers", type=int, default=None, help="build processes (default: cores)")
    p.add_argument("--build-timeout", type=float, default=180.0)
    p.add_argument("--reject-spills", action="store_true", help=REJECT_SPILLS_HELP)
    p.add_argument("--run-timeout", type=float, default=30.0, help="seconds per kernel run")
    p.add_argument("--repeats", type=int, default=10, help="timed repeats per kernel")
    p.add_argument("--reference-again", action="store_true", help="re-time the reference")
    p.add_argument("--export", help="write a compact dataset: PREFIX.csv.gz and PREFIX.json")
    p.add_argument("--progress-every", type=int, default=50)
    p.add_argument("--json", action="store_true", help="last line: one JSON summary")
    p.set_defaults(func=cmd_measure)

    p = sub.add_parser("tune", help="run one experiment configuration (YAML)")
    p.add_argument("config", help="experiment configuration file")
    p.add_argument("--runner", choices=["replay", "tvm", "rpc"],
                   help="override the config's runner")
    _add_rpc_args(p)
    p.add_argument("--gpu-model", help="rpc: measure only on GPUs of this name (or 'any')")
    p.add_argument("--json", action="store_true", help="last line: one JSON summary")
    p.set_defaults(func=cmd_tune)

    p = sub.add_parser("compare", help="strategies x seeds on one workload (replay or live)")
    p.add_argument("config", help="comparison configuration file")
    p.add_argument("--only", help="live: run only these strategy labels (comma-separated); "
                   "the results are written once every run of the comparison has finished")
    p.add_argument("--summarize", action="store_true",
                   help="live: run nothing, write the results from the finished record stores "
                        "(needs no GPU)")
    p.add_argument("--json", action="store_true", help="last line: one JSON summary")
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("serve", help="RPC tracker and one GPU server per GPU for runner rpc "
                                     "(`bocast serve --help` lists the options)",
                       add_help=False)
    p.add_argument("serve_args", nargs=argparse.REMAINDER)
    p.set_defaults(func=lambda args: cmd_serve(args.serve_args))

    p = sub.add_parser("ops", help="list the operators and their shape syntax")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_ops)
    return parser


def _add_rpc_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tracker", help="rpc: the tracker, HOST:PORT (see `bocast serve`)")
    p.add_argument("--key", help="rpc: the key the GPU servers registered under")


def cmd_serve(rest: Sequence[str]) -> int:
    """``bocast serve ARGS`` is ``python -m bocast.measure.rpc_server serve ARGS``, and
    ``bocast serve tracker ARGS`` starts a tracker alone."""
    from bocast.measure import rpc_server

    rest = list(rest)
    return rpc_server.main(rest if rest[:1] == ["tracker"] else ["serve", *rest])


def cmd_ops(args) -> int:
    ops = operators()
    lines = [f"{name:<18} {cls.shape_help} (default {cls.default_shape})" for name, cls in ops.items()]
    _emit(args, {name: {"shape": cls.shape_help, "default": cls.default_shape}
                 for name, cls in ops.items()}, lines)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    from bocast.measure.rpc import RpcUnavailable

    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["serve"]:  # its options are rpc_server's, which argparse cannot forward
        return cmd_serve(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (UsageError, WorkloadError, SpaceError, RpcUnavailable) as e:
        print(f"bocast: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
