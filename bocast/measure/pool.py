"""A process pool whose tasks have a time limit: a task over its limit, or a worker that dies
(a segfault in TVM, an abort in the driver), costs only that task; the worker is replaced.

Workers ignore SIGINT and SIGTERM (:mod:`bocast.interrupt`): a Ctrl-C reaches every process of
the terminal's group, and a task killed by it would come back as a crash, to be recorded as a
failure of its configuration. When the command stops, :meth:`TimedPool.map` kills its workers and
raises :class:`~bocast.interrupt.Interrupted` without reporting the unfinished tasks."""

from __future__ import annotations

import contextlib
import importlib
import multiprocessing as mp
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import wait
from typing import Any

from bocast import interrupt


@dataclass
class TaskFailure:
    """What a task returns when it never finished: ``kind`` is "timeout" or "crash"."""

    kind: str
    detail: str
    seconds: float


def _worker_main(conn, fn_ref: str, hide: tuple[str, ...] = ()) -> None:
    interrupt.ignore()  # started with both signals blocked (see _Worker); the parent decides
    for lib in hide:  # `import lib` now raises ImportError in this worker
        sys.modules.setdefault(lib, None)  # type: ignore[arg-type]
    module, name = fn_ref.split(":")
    fn = getattr(importlib.import_module(module), name)
    conn.send(("ready", None))
    while True:
        try:
            task = conn.recv()
        except EOFError:
            return
        if task is None:
            return
        try:
            conn.send(("ok", fn(task)))
        except Exception:  # noqa: BLE001 - report any error of the task as data
            conn.send(("error", traceback.format_exc()))


class _Worker:
    def __init__(self, ctx, fn_ref: str, hide: tuple[str, ...] = ()):
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker_main, args=(child, fn_ref, hide), daemon=True)
        with interrupt.blocked():  # until the worker ignores them itself
            self.proc.start()
        child.close()
        self.ready = False
        self.task: tuple[int, float] | None = None  # (index, started)

    def kill(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(timeout=10)
        self.conn.close()


class TimedPool:
    """Runs ``fn(task)`` for each task in worker processes (``fn_ref`` is "module:function").

    Results come back in task order: ``fn``'s return value, or a :class:`TaskFailure` for a task
    that timed out, crashed its worker, or raised (``kind`` "error", with the traceback). A task
    whose result is a dict with a true ``_restart`` has its worker replaced after it.
    ``hide``: libraries the workers cannot import (ImportError), for those that other
    libraries load only because they are installed."""

    def __init__(self, fn_ref: str, workers: int, *, start_method: str = "spawn",
                 startup_timeout_s: float = 180.0, hide: tuple[str, ...] = ()):
        self.fn_ref = fn_ref
        self.hide = tuple(hide)
        self.size = max(1, int(workers))
        self.startup_timeout_s = startup_timeout_s
        self._ctx = mp.get_context(start_method)
        self._workers: list[_Worker] = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        for w in self._workers:
            with contextlib.suppress(BrokenPipeError, OSError):
                w.conn.send(None)
            w.proc.join(timeout=5)
            w.kill()
        self._workers = []

    def map(self, tasks: Sequence[Any], timeout_s: float,
            on_result: Callable[[int, Any], None] | None = None) -> list[Any]:
        results: list[Any] = [None] * len(tasks)
        pending = list(range(len(tasks)))[::-1]
        done = 0
        while len(self._workers) < min(self.size, len(tasks)):
            self._workers.append(_Worker(self._ctx, self.fn_ref, self.hide))
        spawned = time.monotonic()

        def finish(i: int, value: Any) -> None:
            nonlocal done
            results[i] = value
            done += 1
            if on_result is not None:
                on_result(i, value)

        try:
            self._serve(tasks, timeout_s, pending, finish, lambda: done, spawned)
        except interrupt.Interrupted:
            self._kill_all()  # their tasks are abandoned, not reported: nothing is recorded
            raise
        return results

    def _kill_all(self) -> None:
        for w in self._workers:
            w.kill()
        self._workers = []

    def _serve(self, tasks, timeout_s, pending, finish, done, spawned) -> None:
        while done() < len(tasks):
            interrupt.check()
            for w in self._workers:
                if w.ready and w.task is None and pending:
                    i = pending.pop()
                    w.conn.send(tasks[i])
                    w.task = (i, time.monotonic())
            now = time.monotonic()
            deadlines = [w.task[1] + timeout_s - now for w in self._workers if w.task]
            # at most 0.5 s, so that a stop is seen while long builds are running
            ready = wait([w.conn for w in self._workers],
                         timeout=min(0.5, max(0.05, min(deadlines, default=1.0))))
            for w in list(self._workers):
                if w.conn not in ready:
                    continue
                try:
                    kind, value = w.conn.recv()
                except (EOFError, OSError):
                    code = w.proc.exitcode
                    interrupt.check()  # a worker that died as the command stopped is no result
                    if w.task is not None:
                        i, started = w.task
                        finish(i, TaskFailure("crash", f"worker exited with code {code}",
                                              time.monotonic() - started))
                    elif not w.ready:
                        raise RuntimeError(f"pool worker for {self.fn_ref} died at start "
                                           f"(exit code {code})") from None
                    self._replace(w)
                    continue
                if kind == "ready":
                    w.ready = True
                    continue
                assert w.task is not None  # results come only from a worker given a task
                i, started = w.task
                w.task = None
                finish(i, value if kind == "ok" else
                       TaskFailure("error", value, time.monotonic() - started))
                if kind == "ok" and isinstance(value, dict) and value.get("_restart"):
                    self._replace(w)  # the task left its process unusable (sticky CUDA error)
            now = time.monotonic()
            for w in list(self._workers):
                if w.task is not None and now - w.task[1] > timeout_s:
                    i, started = w.task
                    finish(i, TaskFailure("timeout", f"killed after {timeout_s:.0f} s",
                                          now - started))
                    self._replace(w)
            if not any(w.ready for w in self._workers) and \
                    time.monotonic() - spawned > self.startup_timeout_s:
                raise RuntimeError(f"no pool worker for {self.fn_ref} started within "
                                   f"{self.startup_timeout_s:.0f} s")

    def _replace(self, w: _Worker) -> None:
        w.kill()
        self._workers[self._workers.index(w)] = _Worker(self._ctx, self.fn_ref, self.hide)
