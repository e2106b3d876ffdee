"""Static builds (TVM lowering, then nvcc) for the tests, two at a time.

A test that builds several kernels used to build them one after another in the test process:
about 0.5 s of lowering and 1.5 s of nvcc each, one core busy. :func:`build_all` hands them to
two worker processes of one pool kept for the session (each imports TVM once, about 3 s, when
the first test needs it), in order, and returns the same dictionaries ``build_task`` returns in
the pool workers of ``bocast.measure.builder`` (which is where ``build_task`` runs in a tuning
run too)."""

from __future__ import annotations

import atexit
import multiprocessing as mp
import os
from collections.abc import Iterable, Mapping
from concurrent.futures import ProcessPoolExecutor
from typing import Any

WORKERS = 2
#: under pytest-xdist the other workers keep the cores busy: build in the test's own process
INLINE = "PYTEST_XDIST_WORKER" in os.environ
_pool: ProcessPoolExecutor | None = None


def _warm() -> None:
    import sys

    sys.modules.setdefault("torch", None)  # type: ignore[arg-type] # as bocast's builder pool
    import bocast.measure.builder  # noqa: F401 - TVM and the builder, once per worker


def build_all(tasks: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``[build_task(t) for t in tasks]``, two at a time."""
    global _pool
    from bocast.measure.builder import build_task

    tasks = [dict(t) for t in tasks]
    if len(tasks) == 1 or INLINE:
        return [build_task(t) for t in tasks]
    if _pool is None:
        _pool = ProcessPoolExecutor(WORKERS, mp_context=mp.get_context("spawn"),
                                    initializer=_warm)
        atexit.register(_pool.shutdown, cancel_futures=True)
    return list(_pool.map(build_task, tasks))


def build_configs(op, configs) -> list[dict[str, Any]]:
    """Each configuration of ``op`` built as a tuning run's builder builds it, two at a time."""
    import json

    from bocast.space.space import Space

    return build_all({"workload": op.workload, "config": json.loads(Space.key(c))}
                     for c in configs)


def check_v3_builds(op, configs) -> list[dict[str, Any]]:
    """Each of ``configs`` valid and built for sm_90a (:func:`build_configs`) without spills,
    a stack frame or serialized wgmma, with the dynamic shared memory the space's model
    counts; the build results."""
    for config in configs:
        assert op.space.validate(config) == [], config
    results = build_configs(op, configs)
    for config, res in zip(configs, results):
        assert res["status"] == "ok", (config, res["error"])
        f = res["features"]
        assert f["registers"] <= 255 and f.get("spill_stores", 0) == 0, (config, f)
        assert f.get("stack_bytes", 0) == 0 and not f.get("wgmma_serialized"), (config, f)
        assert f["dynamic_smem_bytes"] == op.space.columns([config])["dynamic_smem_bytes"][0]
    return results
