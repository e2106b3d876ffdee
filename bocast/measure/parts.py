"""The measuring parts of a live run, made in one place (as MetaSchedule's ``Runner.create``):
every entry point (``bocast tune``/``bocast.tune``, ``bocast compare``, ``bocast measure``)
asks here for its runner and builder instead of constructing them itself.

Runner kinds: ``local`` (the local GPU, in a worker process), ``rpc`` (GPU servers behind a
tracker), ``standin`` (synthetic timings on the CPU) and ``replay`` (a recorded dataset's
timings). The old names ``tvm`` (configurations) and ``gpu`` (``bocast measure``) still work and
say once that they are now ``local`` (:func:`runner_kind`). Replay is not made here yet: it
replaces the measurer (:class:`bocast.measure.replay.ReplayMeasurer`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bocast.progress import say

#: every runner kind a configuration or a command names
RUNNER_KINDS = ("local", "rpc", "replay", "standin")
#: kinds that time kernels as they are built (the others read recorded timings)
LIVE_KINDS = ("local", "rpc", "standin")
#: the names the local runner had before 2026-11-26
OLD_NAMES = {"tvm": "local", "gpu": "local"}
_told: set[str] = set()


def runner_kind(name: Any) -> Any:
    """``name`` with an old spelling replaced (one line on stderr the first time); anything
    else as given, for the caller's check to refuse by name."""
    if isinstance(name, str) and name in OLD_NAMES:
        if name not in _told:
            _told.add(name)
            say(f"note: runner {name!r} is now called {OLD_NAMES[name]!r} (the old name still "
                "works)")
        return OLD_NAMES[name]
    return name


def make_runner(kind: str, *, timeout_s: float, repeats: int, seed: int = 0,
                rpc: Mapping[str, Any] | None = None):
    """The runner of ``kind``: ``timeout_s`` bounds one kernel's run, ``repeats`` timed
    replays, ``seed`` the input data; ``rpc``: the tracker, key and GPU model (kind rpc)."""
    kind = runner_kind(kind)
    if kind == "local":
        from bocast.measure.runner import GpuRunner

        return GpuRunner(timeout_s=timeout_s, repeats=repeats, seed=seed)
    if kind == "rpc":
        from bocast.measure.rpc import RpcRunner

        return RpcRunner(**dict(rpc or {}), timeout_s=timeout_s, repeats=repeats, seed=seed)
    if kind == "standin":
        from bocast.measure.standin import StandinRunner

        return StandinRunner(timeout_s=timeout_s, repeats=repeats, seed=seed)
    raise ValueError(f"runner kind {kind!r}: make_runner makes {', '.join(LIVE_KINDS)}")


def make_builder(*, workers: int | None, timeout_s: float, reject_spills: bool = False,
                 compile: bool = True):
    """The builder: ``workers`` processes (None: the machine's cores), ``timeout_s`` per build,
    ``reject_spills`` the ptxas filter, ``compile`` False for the stand-in (no nvcc)."""
    from bocast.measure.builder import Builder

    return Builder(workers=workers, timeout_s=timeout_s, reject_spills=reject_spills,
                   compile=compile)
