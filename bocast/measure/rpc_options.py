"""The ``rpc`` section of a configuration (runner: rpc), checked: the tracker, the servers' key
and how the runner uses the fleet (:class:`bocast.measure.rpc.RpcRunner` takes them as keyword
arguments)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bocast.measure import rpc_protocol as proto

OPTIONS = {"tracker", "key", "gpu_model", "sessions", "slack_s", "server_wait_s",
           "max_attempts", "token_file", "builds"}
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
    for name in ("slack_s", "server_wait_s"):
        v = out.get(name)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0):
            raise ValueError(f"rpc.{name}: expected a positive number of seconds, got {v!r}")
    return out
