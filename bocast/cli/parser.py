"""The ``bocast`` argument parser: one subcommand per command, every option checked by its
:mod:`bocast.schema` field, argparse's errors in the one-line form of every other bad input."""

from __future__ import annotations

import argparse
import dataclasses
import platform
from importlib import metadata
from typing import Any

from bocast import __version__, schema
from bocast.cli.run_commands import (
    cmd_ablation,
    cmd_compare,
    cmd_export,
    cmd_ops,
    cmd_records,
    cmd_remeasure,
    cmd_report,
    cmd_serve,
    cmd_shapes,
    cmd_suggest,
    cmd_tune,
)
from bocast.cli.space_commands import cmd_measure, cmd_space
from bocast.measure.parts import RUNNER_KINDS, runner_kind
from bocast.options import QUICK_OPTIONS
from bocast.space.operators.operator import operators
from bocast.tools import reporting

# ------------------------------------------------------------------------------ parser


def _add_workload_args(p: argparse.ArgumentParser, *, subspace: bool = False) -> None:
    if subspace:
        p.add_argument("op", nargs="?", help=f"operator: {', '.join(operators())} (none with "
                                             "--subspace)")
        p.add_argument("--subspace", help="a sub-space file (experiments/exhaustive/*.yaml): its "
                                          "workload and fixed knobs")
        p.add_argument("--fix", action="append", default=[], metavar="KNOB=VALUE",
                       help="restrict a knob to a value (repeat a knob for several values; a "
                            "split's value is its factors, comma-separated): --sample N draws "
                            "from that sub-space; measure --all measures all of it")
    else:
        p.add_argument("op", help=f"operator: {', '.join(operators())}")
    p.add_argument("--shape", help="extents, comma-separated (per operator; see `bocast ops`)")
    p.add_argument("--dtype", help="input:output types: fp16:fp32 (default) or fp16:fp16; "
                   "bf16:fp32 or bf16:bf16 on space v3 (gemm, bmm, the direct "
                   "convolutions); e4m3:bf16, e4m3:fp32, "
                   "e5m2xe4m3:bf16 or e5m2xe4m3:fp32 on space v3 (gemm: fp8 with per-tensor "
                   "scales; e5m2xe4m3: A in e5m2); e4m3b128:bf16 or e4m3b128:fp32 (gemm, v3: "
                   "fp8 with 1x128 and 128x128 block scales)")
    p.add_argument("--layout", help="operand layout where the operator has one (gemm: NT or NN)")
    p.add_argument("--fuse", help="gemm on space v3: the fused epilogue, act(scale (A B^T) + "
                                  "bias): none (default), bias, relu, gelu, silu, bias+relu, "
                                  "bias+gelu or bias+silu")
    p.add_argument("--space", help="schedule space generation: auto (default: v3 where it beat "
                                   "v2 at such shapes and takes the workload, else v2), v3 "
                                   "(Hopper TMA + wgmma, sm_90a: GEMM, bmm, conv2d), v2 "
                                   "(mma.sync, pipelined) or v1 (Heron's WMMA knobs, the space "
                                   "of the v1 datasets)")


def _add_records_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--records", help="the records library's folder (default $BOCAST_RECORDS, "
                                     "else ~/.cache/bocast/records)")


class _Parser(argparse.ArgumentParser):
    """argparse with the one-line error of every other bad input (usage is in --help)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _opt(p: argparse._ActionsContainer, flag: str, field: schema.Field, default: Any = None,
         **kwargs) -> None:
    """A command-line option checked by its schema field (type, range; default and help)."""
    default = field.default if default is None and not field.required else default
    p.add_argument(flag, type=field.parse, default=default, metavar=field.kind.__name__.upper(),
                   help=f"{field.doc} ({field.expected(cli=True, storage_limits=False)}"
                        + (f"; default {default})" if default is not None else ")"), **kwargs)


def _flag(p: argparse.ArgumentParser, flag: str, field: schema.Field) -> None:
    """A boolean schema field as a command-line switch (off unless given)."""
    assert field.kind is bool and field.default is False
    p.add_argument(flag, action="store_true", help=field.doc)


def version_line() -> str:
    """``bocast --version``: the installed distribution's version (the package's own
    ``__version__`` where it runs from a source tree not installed), and those of Python, TVM
    and torch as installed (read from their metadata: nothing heavy is imported)."""
    def installed(name: str) -> str | None:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    own = installed("bocast") or f"{__version__} (not installed: run from its source)"
    deps = ", ".join(f"{name} {installed(name) or 'not installed'}"
                     for name in ("apache-tvm", "torch"))
    return f"bocast {own} (Python {platform.python_version()}; {deps})"


def build_parser() -> argparse.ArgumentParser:

    parser = _Parser(prog="bocast", description=(
        "Tune Tensor Core kernels with Bayesian optimisation: `bocast tune gemm --shape "
        "4096,4096,4096` (live), `--runner replay` (recorded data, no GPU), `bocast suggest` "
        "(no measurement), `bocast compare` (strategies over seeds). `bocast COMMAND --help` "
        "for each."))
    common = _Parser(add_help=False)
    common.add_argument("--json", action="store_true", help="last line: one JSON summary")
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show tracebacks (also BOCAST_DEBUG=1)")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    parser.add_argument("--version", action="version", version=version_line(),
                        help="bocast's version, and those of Python, TVM and torch")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("space", parents=[common],
                       help="inspect, sample and statically build a schedule space")
    _add_workload_args(p, subspace=True)
    _opt(p, "--sample", schema.SAMPLE)
    _opt(p, "--seed", schema.SEED)
    p.add_argument("--describe", action="store_true", help="list knobs and known constraints")
    p.add_argument("--size", action="store_true", help="estimate the size of the feasible set")
    _opt(p, "--size-draws", schema.SIZE_DRAWS)
    p.add_argument("--check-build", action="store_true",
                   help="apply, lower and compile every sample with nvcc for sm_90")
    _opt(p, "--workers", schema.WORKERS)
    _opt(p, "--build-timeout", schema.BUILD_TIMEOUT)
    _flag(p, "--reject-spills", schema.REJECT_SPILLS)
    p.add_argument("--out", help="write the sampled configurations as JSON lines")
    p.add_argument("--out-builds", help="write per-configuration build results as JSON lines")
    _add_force(p, "--out and --out-builds")
    p.set_defaults(func=cmd_space)

    p = sub.add_parser("measure", parents=[common],
                       help="measure uniformly sampled configurations, or every feasible one of "
                            "a sub-space, into a store")
    _add_workload_args(p, subspace=True)
    _opt(p, "--sample", dataclasses.replace(schema.SAMPLE, min=1, default=None, nullable=True,
                                            doc="configurations to sample (or --all)"))
    p.add_argument("--all", action="store_true",
                   help="every feasible configuration (of the sub-space of --fix or --subspace)")
    _opt(p, "--max-seconds", schema.MAX_SECONDS)
    _opt(p, "--seed", schema.SEED)
    p.add_argument("--store", required=True, help="record store (SQLite); resumed if it exists")
    p.add_argument("--runner", default="local", type=runner_kind,
                   help="local (default: this machine's GPU), rpc (GPU servers of a tracker: "
                        "--tracker, --key), standin (synthetic timings on the CPU, tests), an "
                        "installed runner's name or package.module:ClassName "
                        "(docs/extending.md)")
    _add_rpc_args(p)
    _opt(p, "--batch", schema.Field("batch", int, 64, min=1, max=10_000,
                                    doc="configurations built per batch"))
    _opt(p, "--workers", schema.WORKERS)
    _opt(p, "--build-timeout", schema.BUILD_TIMEOUT)
    _flag(p, "--reject-spills", schema.REJECT_SPILLS)
    _opt(p, "--run-timeout", schema.RUN_TIMEOUT)
    _opt(p, "--repeats", schema.REPEATS)
    p.add_argument("--reference-again", action="store_true", help="re-time the reference")
    p.add_argument("--export", help="write a compact dataset: PREFIX.csv.xz and PREFIX.json")
    _add_force(p, "--export's dataset")
    _opt(p, "--progress-every", schema.PROGRESS_EVERY)
    p.set_defaults(func=cmd_measure)

    p = sub.add_parser("tune", parents=[common],
                       help="run one experiment configuration (YAML), or tune an operator's "
                            "shape: bocast tune gemm --shape 4096,4096,4096")
    p.add_argument("config", nargs="?", help="experiment configuration file, or an operator "
                                             f"({', '.join(operators())})")
    p.add_argument("--runner", type=runner_kind,
                   help=f"override the config's runner: {', '.join(RUNNER_KINDS)} (an "
                        "operator: default local, this machine's GPU; standin: synthetic "
                        "timings on the CPU, tests), an installed runner's name or "
                        "package.module:ClassName (docs/extending.md)")
    _add_rpc_args(p)
    p.add_argument("--gpu-model", help="rpc: measure only on GPUs of this name (or 'any')")
    _add_records_arg(p)
    p.add_argument("--plot", action="store_true",
                   help="also draw the run's figure beside its summary, convergence.png/.pdf/.svg "
                        "(best so far and every trial; needs pip install 'bocast[plot]')")
    g = p.add_argument_group("an operator instead of a configuration file")
    g.add_argument("--shape", action="append", help="extents, comma-separated (see `bocast "
                   "ops`); given more than once, each shape is a workload of one run")
    g.add_argument("--shapes", metavar="FILE", help="tune every workload of a shapes file (CSV "
                   "or YAML: op, shape, dtype, ...; `bocast shapes` writes one), one store each "
                   "under --output, each warm-starting from those before it")
    _opt(g, "--parallel", schema.Field(
        "parallel", int, None, min=1, max=1024, nullable=True,
        doc="many workloads: how many run at once (rpc: default the fleet's servers; local: "
            "one)"))
    for o in QUICK_OPTIONS:
        g.add_argument(o.flag, type=o.field.parse, help=o.help, metavar=None
                       if o.field.kind is str else o.field.kind.__name__.upper())
    g.add_argument("--fix", action="append", default=[], metavar="KNOB=VALUE",
                   help="keep the search in a sub-space: a knob restricted to a value (repeat "
                        "a knob for several; a split's value is its factors, comma-separated), "
                        "as bocast measure --fix (the configuration's field fix)")
    g.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="any configuration field (strategy.acquisition=ts, strategy.n_init=8, "
                        "runner_options.repeats=20, ...); repeat for several")
    p.set_defaults(func=cmd_tune)

    p = sub.add_parser("shapes", parents=[common],
                       help="list a torch model's matmul and convolution shapes from one "
                            "forward pass, as a shapes file for bocast tune --shapes")
    p.add_argument("target", metavar="MODULE:FN", help="a module (or a .py file) and a "
                   "function of it that returns (model, inputs)")
    p.add_argument("--out", metavar="FILE", help="write the shapes file (.csv or .yaml)")
    p.set_defaults(func=cmd_shapes)

    p = sub.add_parser("records", parents=[common],
                       help="the records library: list it, add or remove a store")
    p.add_argument("action", nargs="?", default="list", choices=("list", "add", "remove"))
    p.add_argument("store", nargs="?", help="add: a record store; remove: a library store's "
                                            "name (as listed) or path")
    _add_records_arg(p)
    p.set_defaults(func=cmd_records)

    p = sub.add_parser("suggest", parents=[common],
                       help="a new shape's best configurations as the records library ranks "
                            "them, no GPU, no measurement")
    _add_workload_args(p)
    _opt(p, "--top", schema.Field("top", int, 8, min=1, max=1000,
                                  doc="how many configurations"))
    p.add_argument("--gpu-model", help="only records of this GPU model (default: every GPU's, "
                                       "named)")
    _add_records_arg(p)
    p.set_defaults(func=cmd_suggest)

    p = sub.add_parser("compare", parents=[common],
                       help="strategies x seeds on one workload (replay or live)")
    p.add_argument("config", help="comparison configuration file")
    p.add_argument("--only", help="live: run only these strategy labels (comma-separated); "
                   "the results are written once every run of the comparison has finished")
    p.add_argument("--summarize", action="store_true",
                   help="live: run nothing, write the results from the finished record stores "
                        "(needs no GPU)")
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("report", parents=[common],
                       help="finished runs read from their record stores (read only): best "
                            "so far per budget, trials to a target, tests between arms")
    p.add_argument("paths", nargs="+", help="record stores, a comparison's output folder "
                   "(LABEL_seedN.db), tune-run folders (records.db) or folders of them")
    p.add_argument("--pattern", help="the stores under each folder whose path matches, e.g. "
                                     "'{label}_s{seed}/records.db'")
    p.add_argument("--arms", nargs="+", metavar="LABEL", help="only these arms, in this order")
    _opt(p, "--seeds", reporting.SEED, nargs="+")
    _opt(p, "--at", reporting.AT, nargs="+")
    _opt(p, "--level", reporting.LEVEL)
    p.add_argument("--baseline", metavar="LABEL",
                   help="each seed's target is this arm's best at --budget on the same seed "
                        "(default: the best of every store)")
    _opt(p, "--budget", reporting.BUDGET)
    _opt(p, "--within", reporting.WITHIN)
    p.add_argument("--out", metavar="PREFIX", help="also write PREFIX.md and PREFIX.json")
    _add_force(p, "--out's files")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("serve", help="RPC tracker and one GPU server per GPU for runner rpc "
                                     "(`bocast serve --help` lists the options)",
                       add_help=False)
    p.add_argument("serve_args", nargs=argparse.REMAINDER)
    p.set_defaults(func=lambda args: cmd_serve(args.serve_args))

    for name, what, func in (
            ("remeasure", "re-time the best kernels of record stores beside cuBLAS in one "
                          "process, several rounds (`bocast remeasure --help`)", cmd_remeasure),
            ("ablation", "strategies x options x seeds on several recorded tables (replay), "
                         "paired tests: one results file (`bocast ablation --help`)",
             cmd_ablation)):
        p = sub.add_parser(name, help=what, add_help=False)
        p.add_argument("tool_args", nargs=argparse.REMAINDER)
        p.set_defaults(func=lambda args, f=func: f(args.tool_args))

    p = sub.add_parser("export", parents=[common],
                       help="rebuild one record's kernel: TVMScript, CUDA, cubin, TVM library "
                            "and kernel.json (load it with bocast.load_kernel)")
    p.add_argument("store", help="record store (SQLite), read only")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--best", action="store_true", help="the ok record of highest TFLOPS")
    _opt(which, "--id", schema.Field("id", int, None, min=1, max=2**63 - 1, nullable=True,
                                     doc="the record of this row id"))
    which.add_argument("--key", help="the record of this configuration key (its JSON)")
    p.add_argument("--out", required=True, help="folder to write (new or empty)")
    p.add_argument("--any-status", action="store_true",
                   help="export a record whose status is not ok (it must still build)")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("ops", parents=[common], help="list the operators and their shape syntax")
    p.set_defaults(func=cmd_ops)
    return parser


def _add_force(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--force", action="store_true",
                   help=f"replace {what} if it exists (an output that is an input is refused "
                        "even so)")


def _add_rpc_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tracker", help="rpc: the tracker, HOST:PORT (see `bocast serve`)")
    p.add_argument("--key", help="rpc: the key the GPU servers registered under")
