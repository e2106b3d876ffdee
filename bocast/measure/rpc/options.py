"""The ``rpc`` section of a configuration (runner: rpc), checked: the tracker, the servers' key and
how the runner uses the fleet (:class:`bocast.measure.rpc.runner.RpcRunner` takes them as keyword
arguments)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from bocast.measure.kinds import runner_class
from bocast.measure.rpc import auth
from bocast.measure.rpc import protocol as proto

OPTIONS = {"tracker", "key", "gpu_model", "sessions", "slack_s", "server_wait_s",
           "max_attempts", "token_file", "builds", "ahead"}
#: where the kernels are built: ``server`` (each server builds what it times, with its cores)
#: or ``local`` (the tuner's builder, the servers only time)
BUILDS = ("server", "local")


def parse_options(raw: Any) -> dict[str, Any]:
    """The ``rpc`` mapping of a configuration, checked; ValueError names the bad field."""
    if not isinstance(raw, Mapping):
        raise ValueError(f"rpc: expected a mapping with tracker and key, got {raw!r}")
    unknown = sorted(set(raw) - OPTIONS)
    if unknown:
        raise ValueError(f"rpc: unknown field(s) {unknown}; known: {sorted(OPTIONS)}")
    out = dict(raw)
    for name in ("tracker", "key"):
        if not isinstance(out.get(name), str) or not out[name]:
            raise ValueError(f"rpc.{name}: missing (tracker: HOST:PORT, key: the servers' key)")
    proto.parse_addr(out["tracker"])
    if out.get("token_file") is not None and not isinstance(out["token_file"], str):
        raise ValueError(f"rpc.token_file: expected a file name, got {out['token_file']!r}")
    if out.get("builds", "server") not in BUILDS:
        raise ValueError(f"rpc.builds: expected one of {', '.join(BUILDS)}, got "
                         f"{out['builds']!r}")
    if out.get("gpu_model") is not None and not isinstance(out["gpu_model"], str):
        raise ValueError(f"rpc.gpu_model: expected a GPU name or 'any', got {out['gpu_model']!r}")
    for name in ("sessions", "max_attempts"):
        v = out.get(name)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise ValueError(f"rpc.{name}: expected a positive integer, got {v!r}")
    v = out.get("ahead")
    if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 8):
        raise ValueError(f"rpc.ahead: expected batches proposed ahead, 0 to 8, got {v!r}")
    for name in ("slack_s", "server_wait_s"):
        v = out.get(name)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0):
            raise ValueError(f"rpc.{name}: expected a positive number of seconds, got {v!r}")
    return out


def follows_fleet(raw: Mapping[str, Any], runner: str, options: Mapping[str, Any]) -> bool:
    """Whether a run's batch follows its fleet: a fleet runner (``Runner.fleet``: rpc) with
    servers that build, and no ``batch_size`` in the configuration ``raw`` (a file's, or given
    as an option)."""
    return runner_class(runner).fleet and options.get("builds", "server") == "server" \
        and "batch_size" not in raw


def fleet(options: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The fleet a run with the ``rpc`` ``options`` measures on: the servers registered under
    the key now, of the runner's GPU model (``gpu_model``: that one, ``any``: every one, unset:
    the one model registered, as :meth:`bocast.measure.rpc.runner.RpcRunner.device` chooses), each
    as its ``bocast.rpc.info``. A ValueError where the tracker cannot say, none is registered
    or several models are and none is chosen (the run would fail there anyway)."""
    addr = proto.parse_addr(options["tracker"])
    try:
        token = auth.load_token(options.get("token_file"))
        infos = [s.get("bocast") or {} for s in proto.servers(addr, options["key"], token)]
    except (auth.AuthError, proto.TrackerError) as e:
        raise ValueError(str(e)) from None
    models = {(i.get("device") or {}).get("gpu") for i in infos}
    model = options.get("gpu_model")
    if model is None and len(models) > 1:
        raise ValueError(f"servers under key {options['key']!r} have several GPU models "
                         f"{sorted(map(str, models))}: set rpc.gpu_model to one (or 'any')")
    fleet = [i for i in infos if model in (None, "any") or (i.get("device") or {}).get("gpu")
             == model]
    if not fleet:
        raise ValueError(f"no server{' of ' + model if model else ''} registered under key "
                         f"{options['key']!r} at {addr[0]}:{addr[1]}")
    return fleet


def fleet_batch(options: Mapping[str, Any],
                servers: list[dict[str, Any]] | None = None) -> tuple[int, str]:
    """The batch that keeps the fleet (``servers``, else :func:`fleet`) busy: every build
    worker of its servers, one kernel each (builds are most of a kernel's time: a 4096^3 GEMM
    builds in 1.5 s and runs in 40 ms); and the line that says so. A ValueError as
    :func:`fleet`."""
    infos = servers or fleet(options)
    workers = [int(i.get("build_workers") or 0) for i in infos]
    batch = max(1, sum(workers))
    return batch, (f"batch {batch}: the build workers of the {len(infos)} server(s) under key "
                   f"{options['key']!r} ({'+'.join(map(str, workers)) or 'none'}); batch_size "
                   "fixes it")


def batch_for_run(cfg: Any, store_path: str) -> str | None:
    """Runner rpc with servers that build and no batch_size given: ``cfg.batch_size`` set to
    the fleet's (:func:`fleet_batch`), or, resuming, to the batch
    the run began with (a resumed run is the same run, whatever the fleet is now); the line
    that says which. None where the configuration's batch stands."""
    from bocast.records.store import Store

    if not follows_fleet(cfg.raw, cfg.runner, cfg.rpc):
        return None
    if os.path.isfile(store_path) and os.path.getsize(store_path) > 0:
        with Store.open(store_path) as store:
            held = (store.get_meta("run") or {}).get("batch_size")
        if isinstance(held, int) and held > 0:
            cfg.batch_size = held
            return f"batch {held}: the batch this run began with (the fleet's then)"
    try:
        cfg.batch_size, note = fleet_batch(cfg.rpc)
    except ValueError:
        return None  # no tracker: the runner's start says so
    return note
