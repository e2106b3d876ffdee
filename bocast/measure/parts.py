"""The measuring parts of a live run, made in one place (as MetaSchedule's ``Runner.create``):
every entry point (``bocast tune``/``bocast.tune``, ``bocast compare``, ``bocast measure``)
asks here for its runner and builder instead of constructing them itself.

Runner kinds: ``tvm`` (the local GPU, in a worker process; ``measure`` calls it ``gpu``),
``rpc`` (GPU servers behind a tracker), ``standin`` (synthetic timings on the CPU). Replay is
not made here: it replaces the measurer (:class:`bocast.measure.replay.ReplayMeasurer`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: the kinds :func:`make_runner` makes, and the other spellings it accepts
RUNNER_KINDS = ("tvm", "rpc", "standin")
ALIASES = {"gpu": "tvm"}


def make_runner(kind: str, *, timeout_s: float, repeats: int, seed: int = 0,
                rpc: Mapping[str, Any] | None = None):
    """The runner of ``kind``: ``timeout_s`` bounds one kernel's run, ``repeats`` timed
    replays, ``seed`` the input data; ``rpc``: the tracker, key and GPU model (kind rpc)."""
    kind = ALIASES.get(kind, kind)
    if kind == "tvm":
        from bocast.measure.runner import GpuRunner

        return GpuRunner(timeout_s=timeout_s, repeats=repeats, seed=seed)
    if kind == "rpc":
        from bocast.measure.rpc import RpcRunner

        return RpcRunner(**dict(rpc or {}), timeout_s=timeout_s, repeats=repeats, seed=seed)
    if kind == "standin":
        from bocast.measure.standin import StandinRunner

        return StandinRunner(timeout_s=timeout_s, repeats=repeats, seed=seed)
    raise ValueError(f"runner kind {kind!r}: one of {', '.join(RUNNER_KINDS)}")


def make_builder(*, workers: int | None, timeout_s: float, reject_spills: bool = False,
                 compile: bool = True):
    """The builder: ``workers`` processes (None: the machine's cores), ``timeout_s`` per build,
    ``reject_spills`` the ptxas filter, ``compile`` False for the stand-in (no nvcc)."""
    from bocast.measure.builder import Builder

    return Builder(workers=workers, timeout_s=timeout_s, reject_spills=reject_spills,
                   compile=compile)
