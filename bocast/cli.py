"""The ``bocast`` command.

Every subcommand prints a human summary on stdout; with ``--json`` its last line is one JSON
object, and stdout holds nothing else. Progress and status lines go to stderr (a bar on a
terminal, a line every few seconds elsewhere).

Every option and configuration field is checked before any work (``bocast.schema``): bad input
ends with one line ``bocast: error: ...`` and exit code 2, and leaves nothing behind. SIGINT or
SIGTERM ends a command with one line and exit code 130; every finished record is kept and the
same command resumes from it. ``--debug`` (or ``BOCAST_DEBUG=1``) adds the traceback.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import signal
import statistics
import sys
import time
import traceback
from collections.abc import Sequence
from typing import Any

import numpy as np

from bocast import interrupt, schema
from bocast.candidates import SpaceCandidates
from bocast.errors import InputError
from bocast.measure.parts import RUNNER_KINDS, runner_kind
from bocast.operator import from_workload, get_operator, make, operators, parse_shape
from bocast.progress import Progress, say
from bocast.schema import check_outputs, check_writable
from bocast.space import MAX_ENUMERATION, Space
from bocast.strategies.listed import Listed
from bocast.tuner import Tuner

T0 = time.perf_counter()


class UsageError(InputError):
    """Bad input: reported in one line, exit code 2."""


def _emit(args, summary: dict[str, Any], lines: Sequence[str]) -> None:
    for line in lines:
        print(line)
    if args.json:
        print(json.dumps(summary, sort_keys=True))


def _operator_from(args):
    """The operator named on the command line, or the one of ``--subspace``'s file."""
    if getattr(args, "subspace", None) is not None:
        from bocast.subspace import load

        given = [flag for flag, v in (("operator", args.op), ("--shape", args.shape),
                                      ("--dtype", args.dtype), ("--layout", args.layout),
                                      ("--space", args.space)) if v is not None]
        if given:
            raise UsageError(f"--subspace names its own workload: give no {', '.join(given)} "
                             "with it")
        try:
            args.loaded_subspace = load(args.subspace)
        except InputError as e:
            raise UsageError(f"--subspace: {e}") from None
        return from_workload(args.loaded_subspace.workload)
    if args.op is None:
        raise UsageError("name an operator (or give --subspace FILE)")
    shape = parse_shape(args.shape) if args.shape is not None else None
    options = {k: getattr(args, k) for k in ("dtype", "layout", "space")
               if getattr(args, k) is not None}
    get_operator(args.op)  # an unknown operator is named before its shape
    return make(args.op, shape, **options)


def _need_compiler(what: str) -> None:
    from bocast.api import need_compiler

    need_compiler(what)


def _need_gpu(what: str, alternative: str) -> None:
    from bocast.api import need_gpu

    need_gpu(what, alternative)


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
    from bocast.files import atomic_write

    lines = [f"{op.name} {op.workload}", f"{len(space.knobs)} knobs, "
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
    configs = space.sample(args.sample, args.seed) if args.sample else []
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
        from bocast.measure.parts import make_builder

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
    from bocast.measure.parts import make_runner

    return make_runner(name, timeout_s=args.run_timeout, repeats=args.repeats, seed=args.seed,
                       rpc={"tracker": getattr(args, "tracker", None),
                            "key": getattr(args, "key", None)} if name == "rpc" else None)


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


def _restriction(args, op) -> dict | None:
    """The knob restriction of ``--subspace`` or ``--fix`` (None: the whole space)."""
    from bocast.subspace import parse_fix_args

    sub = getattr(args, "loaded_subspace", None)
    if sub is not None:
        if args.fix:
            raise UsageError("--fix and --subspace: put the fixed knobs in the file")
        return sub.allowed
    return parse_fix_args(op.space, args.fix) if args.fix else None


def _table_of(args, allowed) -> dict[str, Any]:
    """What identifies an exhaustive table in its store (its ``feasible`` count aside)."""
    if args.subspace is not None:
        return args.loaded_subspace.describe()
    return {"name": "", "allowed": _jsonable_allowed(allowed or {})}


def _check_store(args, op, allowed, subspace: dict | None) -> None:
    """An existing ``--store`` opens (a sound bocast store of this workload) and, for a table,
    holds none of another sub-space; only read (the run creates or writes it once its runner
    has started)."""
    from bocast.store import Store

    if not (os.path.isfile(args.store) and os.path.getsize(args.store) > 0):
        return
    with Store.open(args.store, op.workload) as store:
        held = store.get_meta("subspace")
    if subspace is not None and held is not None and \
            {k: v for k, v in held.items() if k != "feasible"} != _table_of(args, allowed):
        raise UsageError(f"--store: {args.store} holds the table of another sub-space: {held}")


def _check_size(args, n: int) -> None:
    """A sub-space file's ``feasible`` against the count of its configurations."""
    sub = getattr(args, "loaded_subspace", None)
    if sub is not None and sub.expected is not None and n != sub.expected:
        raise UsageError(f"--subspace: {args.subspace}: the sub-space has {n} feasible "
                         f"configurations, the file says {sub.expected} (the space changed?)")


def _jsonable_allowed(allowed: dict) -> dict:
    return {k: [list(v) if isinstance(v, tuple) else v for v in vals]
            for k, vals in allowed.items()}


def _fixed_text(allowed: dict) -> str:
    return ", ".join(f"{k}={'|'.join(map(str, v))}" for k, v in allowed.items()) or "no knob fixed"


def cmd_measure(args) -> int:
    op = _operator_from(args)
    exhaustive = args.all or args.subspace is not None
    if exhaustive == (args.sample is not None):
        raise UsageError("give --sample N (a uniform sample), or --all / --subspace FILE (every "
                         "feasible configuration)")
    if args.fix and not exhaustive:
        raise UsageError("--fix restricts --all: give --all too")
    allowed = _restriction(args, op)
    if args.runner == "local":
        _need_gpu("bocast measure --runner local", "--runner standin runs the synthetic CPU "
                  "stand-in, for tests")
        _need_compiler("bocast measure --runner local")
    if args.runner == "rpc":
        if not (args.tracker and args.key):
            raise UsageError("--runner rpc needs --tracker HOST:PORT and --key KEY")
        _need_compiler("bocast measure --runner rpc")
    check_writable(args.store, "--store")
    if args.export:
        from bocast.datasets import dataset_files

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
    else:
        configs = op.space.sample(args.sample, args.seed, unique=True)
        subspace = None
        what = f"{len(configs)} sampled (seed {args.seed})"
    return _measure(args, op, configs, what, subspace)


def _measure(args, op, configs, what, subspace) -> int:
    from bocast.measure.engine import Measurer
    from bocast.measure.parts import make_builder
    from bocast.records import Store, export_dataset

    runner = _make_runner(args.runner, args)
    t0 = time.perf_counter()
    with runner, make_builder(workers=args.workers, timeout_s=args.build_timeout,
                              compile=args.runner != "standin",
                              reject_spills=args.reject_spills) as builder:
        device = runner.device()
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

                measurer = Measurer(op, store, builder, runner, on_record=progress,
                                    session_info={"device": device, "runner": runner.name,
                                                  "command": " ".join(sys.argv)})
                # the one loop, over a strategy that lists the configurations: batch i + 1
                # builds while batch i runs, and no batch is asked after --max-seconds
                listed = Listed(SpaceCandidates(op.space, op.workload), todo, seed=args.seed)
                measured = Tuner(listed, measurer, trials=len(todo), seconds=args.max_seconds,
                                 batch_size=args.batch,
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


# --------------------------------------------------------------------------------- tune


#: ``bocast tune OP`` flags: (flag, setting of api.quick_config)
QUICK_FLAGS = (("--shape", "shape"), ("--dtype", "dtype"), ("--layout", "layout"),
               ("--space", "space"), ("--strategy", "strategy"), ("--trials", "trials"),
               ("--seed", "seed"), ("--batch-size", "batch_size"), ("--dataset", "dataset"),
               ("--output", "output"), ("--store", "store"), ("--warm-start", "warm_start"))


def _quick_config(args) -> dict[str, Any]:
    """The configuration of ``bocast tune OP --shape ... [--set key=value]``."""
    import yaml

    from bocast import api

    settings: dict[str, Any] = {}
    for _, name in QUICK_FLAGS:
        value = getattr(args, name)
        if value is not None and name != "shape":
            settings[name] = value
    if isinstance(settings.get("warm_start"), str) and settings["warm_start"] not in (
            "auto", "none"):
        settings["warm_start"] = [p for p in settings["warm_start"].split(",") if p]
    for item in args.set:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--set: expected KEY=VALUE, got {item!r}")
        try:
            settings[key] = yaml.safe_load(text) if text else ""
        except yaml.YAMLError:
            settings[key] = text
    shape = parse_shape(args.shape) if args.shape is not None else None
    get_operator(args.config)
    return api.quick_config(args.config, shape, runner=args.runner, **settings)


def cmd_tune(args) -> int:
    from bocast import api

    overrides = {k: v for k, v in (("tracker", args.tracker), ("key", args.key),
                                   ("gpu_model", args.gpu_model)) if v}
    quick = args.config in operators() and not os.path.exists(args.config)
    if not quick:
        given = [flag for flag, name in QUICK_FLAGS if getattr(args, name) is not None] + \
            (["--set"] if args.set else [])
        if given:
            raise UsageError(f"{', '.join(given)}: only with an operator (bocast tune OP "
                             f"--shape ...); a configuration file names them itself")
    try:  # validates everything before writing anything
        config: Any = _quick_config(args) if quick else args.config
        run = api.prepare(config, runner=None if quick else args.runner, rpc=overrides,
                          records=args.records)
    except InputError as e:
        raise UsageError(str(e)) from None  # already led by the file's name
    summary, lines = run.execute(progress=True)
    _emit(args, {k: summary[k] for k in summary if k != "provenance"}, lines)
    return 0


# ------------------------------------------------------------------------------ records


def cmd_records(args) -> int:
    from bocast import library

    folder = library.directory(args.records)
    if args.action != "list":
        if not args.store:
            raise UsageError(f"records {args.action}: name the store")
        if args.action == "add":
            path, what = library.add(args.store, folder)
            _emit(args, {"action": "add", "path": path, "result": what, "records": folder},
                  [f"{what}: {path}"])
        else:
            path = library.remove(args.store, folder)
            _emit(args, {"action": "remove", "path": path, "records": folder},
                  [f"removed {path}"])
        return 0
    entries, skipped = library.scan(folder, stats=True)
    for line in skipped:
        say(line)
    rows = [e.describe() for e in entries]
    lines = [f"records library {folder} ({sum(not e.shipped for e in entries)} stores) and "
             f"{sum(e.shipped for e in entries)} shipped datasets:",
             f"{'op':<18} {'shape':<28} {'space':<5} {'gpu':<26} {'rows':>6} {'best':>8}  name"]
    for r in rows:
        best = f"{r['best_tflops']:.1f}" if r["best_tflops"] is not None else "-"
        lines.append(f"{r['op']!s:<18} {'x'.join(map(str, r['shape'] or [])):<28} "
                     f"{r['space']:<5} {str(r['gpu'] or '?')[:26]:<26} {r['rows']:>6} "
                     f"{best:>8}  {r['name']}")
    _emit(args, {"records": folder, "entries": rows, "skipped": skipped}, lines)
    return 0


def cmd_suggest(args) -> int:
    from bocast import library
    from bocast.suggestions import suggest

    op = _operator_from(args)
    got = suggest(op, k=args.top, gpu=args.gpu_model, records=library.directory(args.records))
    for line in got.notes:
        say(line)
    shape = ",".join(map(str, op.workload["shape"]))
    lines = [f"{op.name} {'x'.join(map(str, op.workload['shape']))} "
             f"(space {op.workload.get('space', 'v1')}): the {len(got.items)} configurations "
             "the records library ranks best, no measurement; TFLOPS read on "
             f"{got.scale}'s distribution (a guess with a one-sd band, not a measurement)",
             f"{'#':>2} {'from':<10} {'z':>6} {'sd':>5} {'TFLOPS':>8} {'band':>15}  config"]
    for i, s in enumerate(got.items, 1):
        lines.append(f"{i:>2} {s.why:<10} {s.z:>6.2f} {s.z_sd:>5.2f} {s.tflops:>8.1f} "
                     f"{f'{s.low:.0f}-{s.high:.0f}':>15}  {json.dumps(s.config)}")
    lines.append(f"measure them first: bocast tune {op.name} --shape {shape}"
                 f"{' --space ' + str(op.workload['space']) if args.space else ''} (its "
                 "warm start, auto, starts from the same records)")
    _emit(args, got.summary(), lines)
    return 0


# ------------------------------------------------------------------------------ compare


def cmd_compare(args) -> int:
    from bocast import api

    try:
        cfg = api.prepare_compare(args.config, summarize=args.summarize)
    except InputError as e:
        raise UsageError(str(e)) from None  # already led by the file's name
    only = [x for x in args.only.split(",") if x] if args.only else None
    try:
        summary = api.run_compare(cfg, only=only, summarize=args.summarize, progress=True)
    except InputError as e:
        raise UsageError(f"{args.config}: {e}") from None
    if "missing" in summary:
        _emit(args, summary, [f"ran {', '.join(only or []) or 'nothing'}; results are written once "
                              f"these runs have finished too: {', '.join(summary['missing'])}"])
        return 0
    with open(cfg.results + ".md") as f:
        table = f.read()
    lines = [table, f"wrote {cfg.results}.md/.csv/.json/.png/.pdf "
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


# ------------------------------------------------------------------------------- export


def cmd_export(args) -> int:
    from bocast.kernel import export

    record = "best" if args.best else args.id if args.id is not None else args.key
    kernel = export(args.store, out=args.out, record=record, any_status=args.any_status)
    rec, k = kernel.meta["record"], kernel.meta["kernel"]
    figures = (f"{rec['tflops']:.1f} TFLOPS, " if rec["tflops"] else "") + \
        (f"{rec['latency_ms']:.4f} ms, " if rec["latency_ms"] else "")
    lines = [f"exported record {rec['id']} of {args.store} ({rec['status']}, {figures}"
             f"timed by {kernel.meta['timing']['runner']}) to {args.out}: "
             f"{', '.join(sorted(kernel.meta['files']))}, kernel.json",
             f"{k['name']}: grid {k['grid']}, block {k['block']}, {k['dynamic_smem_bytes']} B "
             f"dynamic shared memory, {k['features'].get('registers', 0):.0f} registers; "
             f"arguments {kernel.signature}"]
    if k["features_match_store"] is False:
        lines.append("note: ptxas's figures of this build differ from the stored ones "
                     f"(now {k['features']}, stored {rec['features']}): not the kernel "
                     "the record timed")
    _emit(args, {"out": args.out, "id": rec["id"], "key": rec["key"], "status": rec["status"],
                 "tflops": rec["tflops"], "latency_ms": rec["latency_ms"],
                 "files": kernel.meta["files"],
                 "features_match_store": k["features_match_store"]}, lines)
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
    p.add_argument("--space", help="schedule space generation: v2 (default; pipelined), v3 "
                                   "(GEMM only: Hopper TMA + wgmma, sm_90a) or v1 (Heron's WMMA "
                                   "knobs, the space of the v1 datasets)")


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
                   choices=("local", "rpc", "standin"),
                   help="local (default: this machine's GPU), rpc (GPU servers of a tracker: "
                        "--tracker, --key) or standin (synthetic timings on the CPU, tests)")
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
    p.add_argument("config", help="experiment configuration file, or an operator "
                                  f"({', '.join(operators())})")
    p.add_argument("--runner", choices=list(RUNNER_KINDS), type=runner_kind,
                   help="override the config's runner (an operator: default local, this "
                        "machine's GPU; standin: synthetic timings on the CPU, tests)")
    _add_rpc_args(p)
    p.add_argument("--gpu-model", help="rpc: measure only on GPUs of this name (or 'any')")
    p.add_argument("--records", help="the records library's folder (default $BOCAST_RECORDS, "
                                     "else ~/.cache/bocast/records)")
    g = p.add_argument_group("an operator instead of a configuration file")
    g.add_argument("--shape", help="extents, comma-separated (see `bocast ops`)")
    g.add_argument("--dtype", help="input:output types (default fp16:fp32)")
    g.add_argument("--layout", help="operand layout (gemm: NT or NN)")
    g.add_argument("--space", help="schedule space: v2 (default), v1 or v3 (Hopper, GEMM)")
    g.add_argument("--strategy", help="bo (default), cga, random, ...")
    _opt(g, "--trials", schema.Field("trials", int, None, min=1, max=10_000_000,
                                     nullable=True, doc="trials (default 64)"))
    _opt(g, "--seed", schema.Field("seed", int, None, min=0, max=2**32 - 1, nullable=True,
                                   doc="seed (default 0)"))
    _opt(g, "--batch-size", schema.Field("batch_size", int, None, min=1, max=100_000,
                                         nullable=True, doc="batch size (default 16)"))
    g.add_argument("--dataset", help="replay: a recorded dataset (default: the shipped one of "
                                     "the workload)")
    g.add_argument("--output", help="folder of records.db and summary.json (default "
                                    "runs/OP_SHAPE_SPACE_STRATEGY_sSEED)")
    g.add_argument("--store", help="the record store (default OUTPUT/records.db)")
    g.add_argument("--warm-start", help="auto (default: from the records library), none, or "
                                        "sources, comma-separated")
    g.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="any configuration field (strategy.acquisition=ts, budget.seconds=600, "
                        "runner_options.repeats=20, ...); repeat for several")
    p.set_defaults(func=cmd_tune)

    p = sub.add_parser("records", parents=[common],
                       help="the records library: list it, add or remove a store")
    p.add_argument("action", nargs="?", default="list", choices=("list", "add", "remove"))
    p.add_argument("store", nargs="?", help="add: a record store; remove: a library store's "
                                            "name (as listed) or path")
    p.add_argument("--records", help="the library's folder (default $BOCAST_RECORDS, else "
                                     "~/.cache/bocast/records)")
    p.set_defaults(func=cmd_records)

    p = sub.add_parser("suggest", parents=[common],
                       help="a new shape's best configurations as the records library ranks "
                            "them, no GPU, no measurement")
    _add_workload_args(p)
    _opt(p, "--top", schema.Field("top", int, 8, min=1, max=1000,
                                  doc="how many configurations"))
    p.add_argument("--gpu-model", help="only records of this GPU model (default: every GPU's, "
                                       "named)")
    p.add_argument("--records", help="the records library's folder (default $BOCAST_RECORDS, "
                                     "else ~/.cache/bocast/records)")
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

    p = sub.add_parser("serve", help="RPC tracker and one GPU server per GPU for runner rpc "
                                     "(`bocast serve --help` lists the options)",
                       add_help=False)
    p.add_argument("serve_args", nargs=argparse.REMAINDER)
    p.set_defaults(func=lambda args: cmd_serve(args.serve_args))

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


def cmd_serve(rest: Sequence[str]) -> int:
    """``bocast serve ARGS`` is ``python -m bocast.measure.rpc_server serve ARGS``, and
    ``bocast serve tracker ARGS`` starts a tracker alone."""
    from bocast.measure import rpc_server

    rest = list(rest)
    return rpc_server.main(rest if rest[:1] == ["tracker"] else ["serve", *rest],
                           prog="bocast serve")


def cmd_ops(args) -> int:
    ops = operators()
    lines = [f"{name:<18} {cls.shape_help} (default {cls.default_shape})"
             for name, cls in ops.items()]
    _emit(args, {name: {"shape": cls.shape_help, "default": cls.default_shape}
                 for name, cls in ops.items()}, lines)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    from bocast.measure.rpc import RpcUnavailable

    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["serve"]:  # its options are rpc_server's, which argparse cannot forward
        return cmd_serve(argv[1:])
    args = build_parser().parse_args(argv)
    debug = bool(getattr(args, "debug", False) or os.environ.get("BOCAST_DEBUG"))
    before = {s: signal.getsignal(s) for s in interrupt.SIGNALS}
    interrupt.install()
    try:
        return args.func(args)
    except (interrupt.Interrupted, KeyboardInterrupt) as e:
        name = str(e) if isinstance(e, interrupt.Interrupted) else "SIGINT"
        _fail(f"bocast: interrupted ({name}): every finished record is kept; the same command "
              "resumes", debug)
        return 130
    except (InputError, OSError, RpcUnavailable) as e:  # OSError: a file it could not read/write
        _fail(f"bocast: error: {_one_line(e)}", debug)
        return 2
    except Exception as e:  # noqa: BLE001 - a bug: say so in one line, traceback on request
        _fail(f"bocast: internal error: {type(e).__name__}: {_one_line(e)} (a bug; --debug or "
              "BOCAST_DEBUG=1 shows the traceback)", debug)
        return 1
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())[:1000]


def _fail(line: str, debug: bool) -> None:
    if debug:
        traceback.print_exc()
    print(line, file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
