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
    op_cls = get_operator(args.op)
    shape = parse_shape(args.shape) if args.shape else None
    options = {}
    if args.dtype:
        options["dtype"] = args.dtype
    if args.layout:
        options["layout"] = args.layout
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

        with Builder(workers=args.workers, timeout_s=args.build_timeout) as builder:
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
            smem = [r.features.get("smem_bytes", 0) for r in ok]
            spills = sum(1 for r in ok if r.features.get("spill_stores", 0) > 0)
            lines.append(f"  registers median {statistics.median(regs):.0f} (max {max(regs):.0f}); "
                         f"shared memory median {statistics.median(smem) / 1024:.1f} KB "
                         f"(max {max(smem) / 1024:.1f} KB); {spills} with spills")
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


# ------------------------------------------------------------------------------ parser


def _add_workload_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("op", help=f"operator: {', '.join(operators())}")
    p.add_argument("--shape", help="extents, comma-separated (per operator; see `bocast ops`)")
    p.add_argument("--dtype", help="input:output types, e.g. fp16:fp32 (default) or fp16:fp16")
    p.add_argument("--layout", help="operand layout where the operator has one (gemm: NT or NN)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="bocast", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("space", help="inspect, sample and statically build a schedule space")
    _add_workload_args(p)
    p.add_argument("--sample", type=int, default=0, help="number of feasible configurations")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--describe", action="store_true", help="list knobs and known constraints")
    p.add_argument("--size", action="store_true", help="estimate the size of the feasible set")
    p.add_argument("--size-draws", type=int, default=200_000)
    p.add_argument("--check-build", action="store_true",
                   help="apply, lower and compile every sample with nvcc for sm_90")
    p.add_argument("--workers", type=int, default=None, help="build processes (default: cores)")
    p.add_argument("--build-timeout", type=float, default=180.0, help="seconds per build")
    p.add_argument("--out", help="write the sampled configurations as JSON lines")
    p.add_argument("--out-builds", help="write per-configuration build results as JSON lines")
    p.add_argument("--json", action="store_true", help="last line: one JSON summary")
    p.set_defaults(func=cmd_space)

    p = sub.add_parser("ops", help="list the operators and their shape syntax")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_ops)
    return parser


def cmd_ops(args) -> int:
    ops = operators()
    lines = [f"{name:<18} {cls.shape_help} (default {cls.default_shape})" for name, cls in ops.items()]
    _emit(args, {name: {"shape": cls.shape_help, "default": cls.default_shape}
                 for name, cls in ops.items()}, lines)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (UsageError, WorkloadError, SpaceError) as e:
        print(f"bocast: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
