"""The commands that run or read whole runs: ``bocast tune`` (a configuration file, or an
operator's shape with flags), ``compare``, ``report`` (finished runs per budget, from their
stores), ``suggest``, ``records`` (the records library), ``export`` (a record's kernel),
``ops`` and ``serve`` (the RPC tracker and GPU servers)."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

from bocast import api, many, many_plan
from bocast.cli.common import UsageError, _emit, _fix_field, _operator_from
from bocast.errors import InputError
from bocast.kernel import export
from bocast.measure.parts import runner_kind
from bocast.options import QUICK_OPTIONS
from bocast.progress import say
from bocast.records import library
from bocast.run import figures
from bocast.run.model_shapes import shapes_of
from bocast.run.shapes_file import COLUMNS
from bocast.space.operators.operator import get_operator, operators, parse_shape
from bocast.tools import reporting

# --------------------------------------------------------------------------------- tune


#: ``bocast tune OP`` flags: (flag, setting of api.quick_config)
QUICK_FLAGS = (("--shape", "shape"), *((o.flag, o.name) for o in QUICK_OPTIONS))


def _quick_settings(args) -> tuple[str | None, dict[str, Any]]:
    """(the runner, the settings) of ``bocast tune OP --shape ... [--set key=value]``: the
    options of :func:`bocast.api.quick_config` (and of each workload of a run of many)."""
    import yaml

    from bocast.config_files import YamlLimitError, parse_yaml

    settings: dict[str, Any] = {}
    for _, name in QUICK_FLAGS:
        value = getattr(args, name)
        if value is not None and name != "shape":
            settings[name] = value
    if isinstance(settings.get("warm_start"), str) and settings["warm_start"] not in (
            "auto", "none", ""):  # "": refused by quick_config
        settings["warm_start"] = [p for p in settings["warm_start"].split(",") if p]
    # a setting's flag and its field are one setting: given both ways, or twice, is refused
    # (else the last would win without a word)
    given = {o.key: o.flag for o in QUICK_OPTIONS if getattr(args, o.name) is not None}
    given.update({o.name: o.flag for o in QUICK_OPTIONS if getattr(args, o.name) is not None})
    given.update({"runner": "--runner"} if args.runner is not None else {})
    runner = args.runner
    for item in args.set:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--set: expected KEY=VALUE, got {item!r}")
        if key in ("op", "shape", "workload"):
            raise UsageError(f"--set {key}: the operator and --shape name the workload "
                             "(--set workload.dtype=... sets one of its fields)")
        if key in given:
            raise UsageError(f"--set {key}: given already ({given[key]}); give it once")
        given[key] = f"--set {key}"
        try:
            value = parse_yaml(text) if text else ""
        except YamlLimitError as e:  # within the limits of a configuration file
            raise UsageError(f"--set {key}: {e.problem}") from None
        except yaml.YAMLError:
            value = text
        if key == "runner":  # quick_config's own argument, as --runner's
            runner = runner_kind(value)
        else:
            settings[key] = value
    return runner, settings


def _quick_config(args) -> dict[str, Any]:
    """The configuration of ``bocast tune OP --shape ... [--fix knob=value] [--set
    key=value]``."""
    runner, settings = _quick_settings(args)
    shape = parse_shape(args.shape[0]) if args.shape else None
    get_operator(args.config)
    if args.fix and "fix" in settings:
        raise UsageError("--fix and --set fix: give the sub-space one way")
    cfg = api.quick_config(args.config, shape, runner=runner, **settings)
    if args.fix:
        cfg["fix"] = _fix_field(cfg["workload"], args.fix)
    return cfg


def cmd_tune(args) -> int:
    overrides = {k: v for k, v in (("tracker", args.tracker), ("key", args.key),
                                   ("gpu_model", args.gpu_model)) if v}
    if args.shapes or len(args.shape or []) > 1:
        return _tune_many(args, overrides)
    if args.config is None:
        raise UsageError("tune: name a configuration file or an operator (or --shapes FILE)")
    if args.parallel is not None:
        raise UsageError("--parallel: only for many workloads (--shape given more than once, "
                         "or --shapes FILE)")
    quick = args.config in operators() and not os.path.exists(args.config)
    if not quick:
        given = [flag for flag, name in QUICK_FLAGS if getattr(args, name) is not None] + \
            (["--fix"] if args.fix else []) + (["--set"] if args.set else [])
        if given:
            raise UsageError(f"{', '.join(given)}: only with an operator (bocast tune OP "
                             f"--shape ...); a configuration file names them itself")
    try:  # validates everything before writing anything
        config: Any = _quick_config(args) if quick else args.config
        run = api.prepare(config, runner=None if quick else args.runner, rpc=overrides,
                          records=args.records, plot=args.plot)
    except InputError as e:
        raise UsageError(str(e)) from None  # already led by the file's name
    summary, lines = run.execute(progress=True)
    _emit(args, {k: summary[k] for k in summary if k != "provenance"}, lines)
    return 0


def _tune_many(args, overrides: dict[str, Any]) -> int:
    """``bocast tune OP --shape A --shape B ...`` and ``bocast tune --shapes FILE``
    (:mod:`bocast.many`): the table printed last."""
    if args.shapes and args.shape:
        raise UsageError("--shape and --shapes: list the workloads one way")
    if args.config is not None and (args.config not in operators()
                                    or os.path.exists(args.config)):
        raise UsageError(f"{args.config}: many workloads are an operator's shapes (bocast tune "
                         "OP --shape A --shape B) or a shapes file (--shapes FILE), not a "
                         "configuration file")
    if args.shape and args.config is None:
        raise UsageError("--shape: name the operator (bocast tune OP --shape A --shape B)")
    if args.plot:
        raise UsageError("--plot: one run's figure; draw a workload's with bocast tune OP "
                         "--shape ... --output ITS_FOLDER --plot")
    if args.fix:  # a knob's values are one space's; many workloads may have others
        raise UsageError("--fix: one workload's sub-space; tune each workload with its own "
                         "(bocast tune OP --shape S --fix KNOB=VALUE)")
    try:
        runner, settings = _quick_settings(args)
        plan = many_plan.prepare_many(args.config, args.shapes or args.shape, runner=runner,
                                      parallel=args.parallel, rpc=overrides,
                                      records=args.records, **settings)
    except InputError as e:
        raise UsageError(str(e)) from None
    result = many.ManyRun(plan).execute(progress=True)
    n = sum(r["status"] == "finished" for r in result.workloads)
    _emit(args, {k: v for k, v in result.summary.items() if k != "provenance"},
          [result.table, f"{n} workloads in {result.output}: summary.json, summary.md; each "
                         "workload's records.db and summary.json in its folder"])
    return 0


def cmd_shapes(args) -> int:
    """``bocast shapes MODULE:FN``: FN() gives (model, inputs); one forward pass lists the
    model's matmul and convolution workloads (:func:`bocast.shapes_of`)."""
    import importlib
    import importlib.util

    module, sep, name = args.target.rpartition(":")
    if not sep or not module or not name:
        raise UsageError(f"shapes: expected MODULE:FN (a module or a .py file, and a function "
                         f"returning (model, inputs)), got {args.target!r}")
    if module.endswith(".py") and not os.path.isfile(module):
        raise UsageError(f"shapes: {module}: no such file")
    # the user's code: whatever it raises is one line naming it, never "internal error"
    try:
        if module.endswith(".py"):
            spec = importlib.util.spec_from_file_location("bocast_shapes_target", module)
            loaded = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
            spec.loader.exec_module(loaded)  # type: ignore[union-attr]
        else:
            loaded = importlib.import_module(module)
    except Exception as e:  # noqa: BLE001 - any failure of the user's module is its own
        raise UsageError(f"shapes: importing {module} failed: {type(e).__name__}: {e}") from None
    fn = getattr(loaded, name, None)
    if not callable(fn):
        raise UsageError(f"shapes: {module} has no function {name}")
    try:
        got = fn()
    except Exception as e:  # noqa: BLE001 - as above
        raise UsageError(f"shapes: {args.target}() raised {type(e).__name__}: {e}") from None
    if not (isinstance(got, tuple) and len(got) == 2):
        raise UsageError(f"shapes: {args.target}() must return (model, inputs), got "
                         f"{type(got).__name__}")
    model, inputs = got
    found = shapes_of(model, *(inputs if isinstance(inputs, (tuple, list)) else (inputs,)))
    if args.out:
        found.write(args.out)
    # the file's columns: fuse where an entry has one
    head = [c for c in COLUMNS if c != "fuse" or any(e.fuse for e in found)]
    rows = [["" if e.row()[c] is None else str(e.row()[c]) for c in head] for e in found]
    width = [max(len(c) for c in col) for col in zip(head, *rows)]
    lines = [" ".join(c.ljust(w) for c, w in zip(r, width)).rstrip() for r in [head, *rows]]
    lines += [f"not listed: {s}" for s in found.skipped]
    lines += [f"listed without its bias fused: {s}" for s in found.unfused]
    lines.append(f"{len(found)} workloads" + (f" written to {args.out}; tune them: bocast tune "
                                              f"--shapes {args.out}" if args.out else ""))
    _emit(args, {"shapes": [e.row() for e in found], "skipped": found.skipped,
                 "unfused": found.unfused, "out": args.out}, lines)
    return 0


# ------------------------------------------------------------------------------ records


def cmd_records(args) -> int:
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
    # each column as wide as its widest value: a GPU's or a shape's name is never cut
    cells = [[str(r["op"]), "x".join(map(str, r["shape"] or [])), str(r["space"]),
              str(r["gpu"] or "?"), str(r["rows"]),
              f"{r['best_tflops']:.1f}" if r["best_tflops"] is not None else "-", str(r["name"])]
             for r in rows]
    head = ["op", "shape", "space", "gpu", "rows", "best", "name"]
    width = [max(len(c) for c in col) for col in zip(head, *cells)]

    def row(c: list[str]) -> str:
        return " ".join([*(v.ljust(w) for v, w in zip(c[:4], width)),
                         *(v.rjust(w) for v, w in zip(c[4:6], width[4:6]))]) + "  " + c[6]

    lines = [f"records library {folder} ({sum(not e.shipped for e in entries)} stores) and "
             f"{sum(e.shipped for e in entries)} shipped datasets:", row(head)]
    lines += [row(c) for c in cells]
    _emit(args, {"records": folder, "entries": rows, "skipped": skipped}, lines)
    return 0


def cmd_suggest(args) -> int:
    from bocast.tools.suggestions import suggest

    op = _operator_from(args)
    got = suggest(op, k=args.top, gpu=args.gpu_model, records=library.directory(args.records))
    for line in got.notes:
        say(line)
    shape = ",".join(map(str, op.workload["shape"]))
    other = got.read_off
    read_off = other or "this shape"
    lines = [f"{op.name} {'x'.join(map(str, op.workload['shape']))} "
             f"(space {op.workload.get('space', 'v1')}): the {len(got.items)} configurations "
             "the records library ranks best, no measurement, highest predicted first; TFLOPS "
             f"read off {got.scale}"
             + (f" ({other}, another shape: this one's own can be far from them)"
                if other else "") + ", a guess with a band, not a measurement",
             "from: 'source row' one of the sources' best measured kernels, 'model' the source "
             "model's pick; z: the predicted standing among the sources' kernels (standard "
             "scores of log TFLOPS, 0 their mean), sd: its standard deviation; TFLOPS and band: "
             "z and z - sd .. z + sd read off the table named ('past its best': both ends above "
             "that table's best, which is the most it reads)",
             f"{'#':>2} {'from':<10} {'z':>6} {'sd':>5} {'TFLOPS':>8} {'band':>15}  "
             f"{'read off':<{max(8, len(read_off))}}  config"]
    for i, s in enumerate(got.items, 1):
        band = "past its best" if s.past_best else f"{s.low:.0f}-{s.high:.0f}"
        lines.append(f"{i:>2} {s.why:<10} {s.z:>6.2f} {s.z_sd:>5.2f} {s.tflops:>8.1f} "
                     f"{band:>15}  {read_off:<{max(8, len(read_off))}}  {json.dumps(s.config)}")
    lines.append(f"measure them first: bocast tune {op.name} --shape {shape}"
                 f"{' --space ' + str(op.workload['space']) if args.space else ''} (its "
                 "warm start, auto, starts from the same records)")
    _emit(args, got.summary(), lines)
    return 0


# ------------------------------------------------------------------------------ compare


def cmd_compare(args) -> int:
    only = [x for x in args.only.split(",") if x] if args.only else None
    try:
        cfg = api.prepare_compare(args.config, summarize=args.summarize, only=only)
    except InputError as e:
        raise UsageError(str(e)) from None  # already led by the file's name
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
    no_figure = figures.missing()
    lines = [table, f"wrote {cfg.results}.md/.csv/.json"
             + (f" (no figure: {no_figure}; {figures.INSTALL})" if no_figure else "/.png/.pdf/.svg")
             + f" and records under {cfg.output} in {summary['seconds']:.0f} s"]
    keep = ("median_best", "median_trials_to_95pct", "median_best_vs_reference",
            "median_trials_to_95pct_of_baseline", "retimed")
    brief = {"name": cfg.name, "seconds": summary["seconds"], "results": cfg.results,
             "optimum_tflops": summary["optimum_tflops"], "optimum_kind": summary["optimum_kind"],
             "reference_tflops": summary["reference_tflops"],
             "strategies": {lab: {k: s[k] for k in keep if k in s}
                            for lab, s in summary["strategies"].items()},
             "mann_whitney_u": summary["mann_whitney_u"]}
    _emit(args, brief, lines)
    return 0


# ------------------------------------------------------------------------------- report


def cmd_report(args) -> int:
    rep = reporting.report(args.paths, pattern=args.pattern, arms=args.arms, seeds=args.seeds,
                        at=args.at, level=args.level, baseline=args.baseline,
                        budget=args.budget, within=args.within, out=args.out,
                        force=args.force)
    lines = [rep.markdown()]
    if args.out:
        lines.append(f"\nwrote {args.out}.md and {args.out}.json")
    _emit(args, rep.to_dict(), lines)
    return 0


# ------------------------------------------------------------------------------- export


def cmd_export(args) -> int:
    record = "best" if args.best else args.id if args.id is not None else args.key
    kernel = export(args.store, out=args.out, record=record, any_status=args.any_status)
    rec, k = kernel.meta["record"], kernel.meta["kernel"]
    figures = (f"{rec['tflops']:.1f} TFLOPS, " if rec["tflops"] else "") + \
        (f"{rec['latency_ms']:.4f} ms, " if rec["latency_ms"] else "")
    lines = [f"exported record {rec['id']} of {args.store} ({rec['status']}, {figures}"
             f"timed by {kernel.meta['timing']['runner']}) to {args.out}: "
             f"{', '.join(sorted(kernel.meta['files']))}, kernel.json",
             f"{k['name']}: grid {k['grid']}, block {k['block']}"
             + (f", cluster {k['cluster']}" if k.get("cluster", [1, 1, 1]) != [1, 1, 1] else "")
             + f", {k['dynamic_smem_bytes']} B "
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



def cmd_serve(rest: Sequence[str]) -> int:
    """``bocast serve ARGS`` is ``python -m bocast.measure.rpc.server serve ARGS``, and
    ``bocast serve tracker ARGS`` starts a tracker alone."""
    from bocast.measure.rpc import server as rpc_server

    rest = list(rest)
    return rpc_server.main(rest if rest[:1] == ["tracker"] else ["serve", *rest],
                           prog="bocast serve")


def cmd_remeasure(rest: Sequence[str]) -> int:
    """``bocast remeasure ARGS`` is ``python -m bocast.tools.remeasure ARGS``."""
    from bocast.tools import remeasure

    return _tool(remeasure.main, rest, "bocast remeasure")


def cmd_ablation(rest: Sequence[str]) -> int:
    """``bocast ablation FILE`` is ``python -m bocast.tools.ablation FILE``."""
    from bocast.tools import ablation

    return _tool(ablation.main, rest, "bocast ablation")


def _tool(main, rest: Sequence[str], prog: str) -> int:
    """A tool's ``main`` under the command's contract: a refusal it ends with (SystemExit
    with a message) is an input error, one line, exit 2."""
    try:
        return int(main(list(rest), prog=prog) or 0)
    except SystemExit as e:
        if isinstance(e.code, str):
            raise InputError(e.code) from None
        return int(e.code or 0)


def cmd_ops(args) -> int:
    ops = operators()
    lines = [f"{name:<18} {cls.shape_help} (default {cls.default_shape})"
             for name, cls in ops.items()]
    _emit(args, {name: {"shape": cls.shape_help, "default": cls.default_shape}
                 for name, cls in ops.items()}, lines)
    return 0
