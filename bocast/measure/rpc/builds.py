"""A GPU server's own builds (``bocast serve --build-workers N``): the runner sends build tasks
(workload, configuration, the builder's options, how to time), the server builds them with its
own cores and its own build cache and times each kernel on its GPU as soon as it is built.

Both halves go through the TVM RPC session the runner already holds
(:mod:`bocast.measure.rpc.runner`): ``bocast.rpc.submit(tasks)`` queues tasks and returns at once,
``bocast.rpc.poll(wait_s)`` returns the answers finished since the last poll. The runner keeps as
many tasks submitted as the server has build workers (``build_workers`` in ``bocast.rpc.info``) and
takes them from the batch's queue, so the batch is still the only queue: a server lost mid-batch has
every task it held put back there by the runner (:class:`bocast.measure.rpc.batch._Batch`).

Inside the server: ``N`` build threads, each with its own :class:`~bocast.measure.builder.
Builder` of one worker process (its time limit, crash isolation and the cache), feed one timing
thread, which hands each built kernel to the server's one measurement worker. A session that
ends (its runner done, or gone) ends its tasks: those not started are dropped, builds under way
finish into the cache, and no answer of theirs reaches the next session.
"""

from __future__ import annotations

import json
import queue
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from bocast.measure.builder import Builder, BuildResult
from bocast.measure.runner import kernel_task
from bocast.records.status import Status
from bocast.space.operators.operator import Operator, from_workload


def log(msg: str) -> None:
    """A line of a GPU server's log (stderr, with the time)."""
    print(time.strftime("%H:%M:%S ") + msg, file=sys.stderr, flush=True)


class ServerBuilds:
    """The build pool of one server; ``call(task, timeout_s)`` times one kernel on its GPU.
    Every server builds with the real builder, a stand-in server too (its runner's tasks ask
    it to lower only, as the stand-in runner's builder does)."""

    def __init__(self, workers: int, call: Callable[[dict[str, Any], float], dict[str, Any]]):
        self.workers = workers
        self.call = call
        self.inbox: queue.Queue = queue.Queue()
        self.built: queue.Queue = queue.Queue()
        self.answers: list[tuple[int, dict[str, Any]]] = []
        self.ready = threading.Condition()
        self.generation = 0
        self._ops: dict[str, Operator] = {}
        self._ops_lock = threading.Lock()
        self._builders = [Builder(workers=1, compile=False) for _ in range(workers)]
        for b in self._builders:
            threading.Thread(target=self._build_loop, args=(b,), daemon=True,
                             name="server-build").start()
        threading.Thread(target=self._time_loop, daemon=True, name="server-time").start()

    # --- what a session calls ------------------------------------------------------------
    def submit(self, tasks_json: str) -> str:
        gen = self.generation
        for task in json.loads(tasks_json):
            self.inbox.put((gen, task))
        return "ok"

    def poll(self, wait_s: float) -> str:
        """The answers ``[[id, {"build", "run"}], ...]`` finished since the last poll, waiting
        up to ``wait_s`` for the first."""
        with self.ready:
            if not self.answers:
                self.ready.wait(float(wait_s))
            out, self.answers = self.answers, []
        return json.dumps(out)

    def end_session(self) -> str:
        """Its tasks end with it: none not started is built, no answer reaches the next one.
        Returns how many kernels this server has built and taken from its cache so far."""
        with self.ready:
            self.generation += 1
            self.answers = []
        hits = sum(b.cache.hits for b in self._builders if b.cache is not None)
        return f"{sum(b.built for b in self._builders)} kernel(s) built here, {hits} from the cache"

    # --- inside ----------------------------------------------------------------------------
    def _answer(self, gen: int, i: int, answer: dict[str, Any]) -> None:
        with self.ready:
            if gen == self.generation:
                self.answers.append((i, answer))
                self.ready.notify_all()

    def _op(self, workload: dict[str, Any]) -> Operator:
        key = json.dumps(workload, sort_keys=True)
        with self._ops_lock:
            if key not in self._ops:
                self._ops[key] = from_workload(workload)
            return self._ops[key]

    def _build_loop(self, builder: Builder) -> None:
        try:
            builder.warm()
        except RuntimeError as e:  # its worker did not start: the first build tries again
            log(f"build worker: {e}")
        while True:
            gen, task = self.inbox.get()
            if gen != self.generation:
                continue
            try:
                op = self._op(task["workload"])
                opts = task.get("build") or {}
                builder.compile = bool(opts.get("compile", True))
                builder.timeout_s = float(opts.get("compile_timeout_s", 180.0))
                builder.reject_spills = bool(opts.get("reject_spills", False))
                (b,) = builder.build(op, [op.space.from_json(task["config"])])
            except Exception as e:  # noqa: BLE001 - a bad task is its answer, never the server's end
                # (a configuration this server's bocast does not know: another version)
                bad = BuildResult(key=str(task.get("key", "?")), status=Status.BUILD_ERROR,
                                  stage="server", error=str(e)[-2000:], transient=True)
                self._answer(gen, task.get("id", -1), {"build": bad.to_dict()})
                continue
            if b.status is Status.OK:
                self.built.put((gen, task, op, b))
            else:
                self._answer(gen, task["id"], {"build": b.to_dict()})

    def _time_loop(self) -> None:
        while True:
            gen, task, op, b = self.built.get()
            if gen != self.generation:
                continue
            run = task.get("run") or {}
            kt = kernel_task(op, b, seed=run.get("seed", 0), repeats=run.get("repeats", 10),
                             warmup_ms=run.get("warmup_ms", 20.0), l2=run.get("l2", "warm"),
                             paired=bool(run.get("paired", False)))
            try:
                raw = self.call(kt, float(task.get("timeout_s", 30.0)))
            except Exception as e:  # noqa: BLE001 - the kernel's answer; the thread goes on
                raw = {"_failure": {"kind": "error", "detail": str(e)[-2000:], "seconds": 0.0}}
            self._answer(gen, task["id"], {"build": b.to_dict(), "run": raw})
