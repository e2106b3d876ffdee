"""What a run of many workloads is (:func:`prepare_many`, for :mod:`bocast.many`): its entries
checked whole (each workload's configuration, duplicates), its output, its window, and the plan
a run already in that output began with (``OUTPUT/plan.json``). Nothing is written here."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bocast import api
from bocast.errors import InputError, RpcUnavailable
from bocast.locations import check_writable
from bocast.run.shapes_file import Shape, command_options, entry, read

PLAN = "plan.json"
#: a run's settings that are one per workload: the run sets them itself
PER_WORKLOAD = {"store": "each workload's store is OUTPUT/NN_.../records.db",
                "dataset": "replay takes each workload's shipped dataset"}


@dataclass
class Item:
    """One workload of the run: its entry, where it was given, its tune configuration."""

    index: int
    entry: Shape
    where: str  # "FILE line N", "--shape ...", "shapes[i]"
    config: dict[str, Any]
    workload: dict[str, Any]  # as its store names it (space auto resolved)

    @property
    def folder(self) -> str:
        return str(self.config["output"])

    @property
    def store(self) -> str:
        return os.path.join(self.folder, "records.db")

    @property
    def text(self) -> str:
        w = self.workload  # gemm 128x4096x4096 fp16:fp32 NT v3
        return " ".join([w["op"], "x".join(map(str, w["shape"])),
                         *(str(w[k]) for k in ("dtype", "layout", "fuse", "space") if w.get(k))])


@dataclass
class Plan:
    """A checked run of many: its workloads in order, its output, its window (workloads at
    once, which also fixes each one's warm-start sources), its runner kind and tracker, the
    records library, the budget of each workload, and plan.json's content."""

    items: list[Item]
    output: str
    window: int
    runner: str
    rpc: dict[str, Any]
    records: str | None
    budget: dict[str, Any]
    plan: dict[str, Any]


def _entries(op: str | None, shapes: Any) -> tuple[list[tuple[Shape, str]], str]:
    """(each entry with where it was given, what the list is called in a default output)."""
    if isinstance(shapes, (str, os.PathLike)):
        path = os.fspath(shapes)
        if op is not None:
            raise InputError(f"{path}: a shapes file names each workload's operator; give no "
                             "operator with it")
        stem = os.path.splitext(os.path.basename(path))[0]
        return [(e, f"{path} line {e.line}") for e in read(path)], stem
    if op is None and not all(isinstance(s, (Shape, Mapping)) for s in shapes):
        raise InputError("shapes: a shape alone needs its operator (op=, bocast tune OP)")
    out = []
    for i, s in enumerate(shapes):
        if isinstance(s, Shape):
            out.append((s, f"shapes[{i}]"))
        elif isinstance(s, Mapping):
            out.append((entry({"op": op, **s}, f"shapes[{i}]"), f"shapes[{i}]"))
        else:
            where = f"--shape {s}" if isinstance(s, str) else f"shapes[{i}]"
            out.append((entry({"op": op, "shape": s}, where), where))
    if not out:
        raise InputError("shapes: none given")
    return out, f"{op}_{len(out)}shapes"


def prepare_many(op: str | None, shapes: Any, *, runner: str | None = None,
                 parallel: int | None = None, rpc: Mapping[str, Any] | None = None,
                 records: str | os.PathLike | None = None, **settings: Any) -> Plan:
    """Check a run of many whole (every workload's configuration, duplicates, the plan of a
    run already in its output, the window) before anything is written."""
    from bocast.measure.parts import runner_class, runner_kind
    from bocast.measure.rpc import options as rpc_options
    from bocast.run import config as cfgmod
    from bocast.space.operators.operator import canonical_workload, from_workload

    listed, stem = _entries(op, shapes)
    command_options(listed, settings)  # --layout, --fuse: every entry's operator takes them
    for key, why in PER_WORKLOAD.items():
        if settings.get(key) is not None:
            raise InputError(f"{key}: not for a run of many shapes ({why})")
    kind = runner_kind(runner) or "local"
    cls = runner_class(kind)
    if parallel is not None and (isinstance(parallel, bool) or not isinstance(parallel, int)
                                 or parallel < 1):
        raise InputError(f"parallel: expected a positive integer, got {parallel!r}")
    if (parallel or 1) > 1 and cls.needs_gpu:
        raise InputError(f"parallel: the {kind} runner times on this machine's GPU, one "
                         "workload after another (--runner rpc spreads them over a fleet)")
    output = settings.pop("output", None)
    items: list[Item] = []
    seen: dict[str, str] = {}
    for i, (e, where) in enumerate(listed):
        own = e.options()  # its dtype, layout, fuse over the command's
        try:
            cfg = api.quick_config(e.op, e.shape, runner=kind, **{**settings, **own,
                                                                   "output": "."})
            cfgmod.parse(cfg, rpc=rpc)  # every field checked before anything runs
            w = canonical_workload(from_workload(cfg["workload"]).workload)
        except InputError as err:
            raise InputError(f"{where}: {err}") from None
        key = json.dumps(w, sort_keys=True)
        if key in seen:
            raise InputError(f"{where}: the same workload as {seen[key]} ({e.text}); list it "
                             "once (count says how often the model runs it)")
        seen[key] = where
        items.append(Item(i, e, where, cfg, w))
    if output is None:
        digest = hashlib.sha1("\n".join(seen).encode()).hexdigest()[:8]
        c = items[0].config
        output = os.path.join("runs", f"{stem}_{digest}_{c['strategy']['name']}_s{c['seed']}")
    check_writable(output, "output", directory=True)
    if os.path.isfile(os.path.join(output, "records.db")):  # its summary would be written over
        raise InputError(f"output: {output} holds a single run (records.db); a run of many "
                         "workloads needs a folder of its own: give another --output")
    for it in items:
        w = it.workload
        name = "_".join([f"{it.index + 1:02d}", w["op"], "x".join(map(str, w["shape"])),
                         *(str(w[k]).replace(":", "-").replace("+", "-")
                           for k in ("dtype", "layout", "fuse", "space") if w.get(k))])
        it.config["output"] = os.path.join(output, name)
    first = cfgmod.parse(items[0].config, rpc=rpc)
    if cls.live:
        api.need_machine(cls, f"runner {kind}", "use --runner replay with recorded datasets")
    plan: dict[str, Any] = {"workloads": [_planned(it.config) for it in items]}
    held = read_json(os.path.join(output, PLAN))
    if held is None and os.path.exists(os.path.join(output, PLAN)) or held is not None and not (
            isinstance(held, dict) and isinstance(held.get("window"), int)):
        raise InputError(f"output: {os.path.join(output, PLAN)} is damaged (not a plan this "
                         "command wrote); give another --output, or restore it")
    follows = rpc_options.follows_fleet(first.raw, first.runner, first.rpc)
    # first.rpc: the rpc section, which only runner rpc has (its fleet)
    servers = _fleet(first) if held is None and first.rpc and (
        parallel is None or follows) else []
    if held is not None:
        if held.get("workloads") != plan["workloads"]:
            raise InputError(f"output: {output} holds a run of another list or other options "
                             f"({_first_difference(held.get('workloads'), plan['workloads'])});"
                             " give another --output, or the same command to resume it")
        window = int(held["window"])
        if parallel is not None and parallel != window:
            raise InputError(f"parallel: the run in {output} began with {window}, which fixes "
                             "each workload's warm-start sources; leave it out or give "
                             f"{window}")
    else:
        window = parallel or (len(servers) if first.rpc else 1)
    plan["window"] = window
    rpc = dict(rpc or {})
    if follows:  # one batch for every workload: the fleet's when the run began (a server lost
        # mid-run changes no later workload's batch; a resume keeps it)
        batch = held.get("batch_size") if held is not None else \
            rpc_options.fleet_batch(first.rpc, servers)[0]
        if isinstance(batch, int) and batch > 0:
            plan["batch_size"] = batch
            for it in items:
                it.config["batch_size"] = batch
    if first.rpc and window > 1:
        # workloads at once share the servers batch by batch; a pipelined run's feed would
        # hold its servers for the whole run (bocast.run.pipeline)
        rpc["ahead"] = 0
    return Plan(items, output, window, first.runner, rpc,
                os.fspath(records) if records else None,
                {"trials": first.trials, "seconds": first.seconds}, plan)


def _planned(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """What makes a workload's run what it is, as plan.json holds it: its configuration but
    the budget (a larger one only adds trials) and the tracker (it may move)."""
    out = {k: v for k, v in cfg.items() if k not in ("budget", "rpc")}
    if out.get("dataset"):
        out["dataset"] = os.path.basename(str(out["dataset"]))
    return json.loads(json.dumps(out, sort_keys=True))


def _first_difference(held: Any, now: list[dict[str, Any]]) -> str:
    if not isinstance(held, list) or len(held) != len(now):
        return f"{len(held) if isinstance(held, list) else 0} workloads there, {len(now)} here"
    for i, (a, b) in enumerate(zip(held, now), 1):
        for k in sorted(set(a) | set(b)):
            if a.get(k) != b.get(k):
                return f"workload {i}'s {k}: {a.get(k)!r} there, {b.get(k)!r} here"
    return "the same workloads"


def _fleet(cfg) -> list[dict[str, Any]]:
    """The servers the run measures on (:func:`bocast.measure.rpc.options.fleet`: those of
    the runner's GPU model under the key); RpcUnavailable where there are none."""
    from bocast.measure.rpc import options as rpc_options

    try:
        return rpc_options.fleet(cfg.rpc)
    except ValueError as e:
        raise RpcUnavailable(str(e)) from None


def read_json(path: str) -> Any:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None
