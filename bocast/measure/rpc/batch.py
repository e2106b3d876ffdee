"""One batch of the RPC runner (one :meth:`~bocast.measure.rpc.runner.RpcRunner.run` call): the
queue of its kernels, the sessions working on it (one thread per server), a lost server's kernels
put back in the queue (or, after too many, answered as a failure), and the answers, each kernel's
first one kept. A batch of build tasks (servers that build what they time:
:mod:`bocast.measure.rpc.builds`) is the same queue; :func:`serve_builds` is its session."""

from __future__ import annotations

import collections
import json
import queue
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bocast.measure.builder import BuildResult, from_dict, jsonable
from bocast.measure.pool import TaskFailure
from bocast.measure.runner import RunResult, WorkerRunner
from bocast.records.status import Status
from bocast.space.knobs import Config
from bocast.space.operators.operator import Operator
from bocast.space.space import Space


@dataclass
class _Call:
    task: dict[str, Any]   # the worker task, without its cubin; or a build task (server builds)
    cubin: bytes
    timeout_s: float       # how long its server may take to answer, before the slack
    direct: bool = False   # a worker task in a batch of build tasks (a feed's reference)


@dataclass(eq=False)
class _Session:
    """One thread holding (or waiting for) one server during one batch."""

    phase: str = "tracker"      # tracker | connect | run | done
    since: float = field(default_factory=time.monotonic)
    deadline: float | None = None
    held: set[int] = field(default_factory=set)  # the kernels its server has now
    server: str = ""
    abandoned: bool = False     # declared hung: whatever it answers later is dropped
    refused: bool = False       # a server of another GPU model, held idle until the batch ends


class _Batch:
    """The queue of one :meth:`~bocast.measure.rpc.runner.RpcRunner.run` and the sessions working on
    it."""

    def __init__(self, calls: list[_Call], builds: bool = False):
        self.calls = calls
        self.builds = builds  # build tasks for servers that build (bocast.measure.rpc.builds)
        self.todo = collections.deque(range(len(calls)))
        self.attempts = [0] * len(calls)
        self.lost_on: list[list[str]] = [[] for _ in calls]
        self.done = [False] * len(calls)
        self.answers: queue.Queue = queue.Queue()
        self.lock = threading.Lock()
        self.finished = threading.Event()
        self.sessions: list[_Session] = []
        self.last_server_s = time.monotonic()  # when a session last held a server
        self.notes: list[str] = []
        self.fatal: str | None = None  # why no server can ever be had (the token disagrees)
        # a feed (bocast.measure.rpc.feed): calls are added while it runs, until it is closed
        self.open = False
        self.more = threading.Condition(self.lock)

    def add(self, calls: Sequence[_Call]) -> list[int]:
        """Queue more calls (a feed); their indices, in order."""
        with self.lock:
            first = len(self.calls)
            self.calls.extend(calls)
            self.attempts += [0] * len(calls)
            self.lost_on += [[] for _ in calls]
            self.done += [False] * len(calls)
            self.todo.extend(range(first, len(self.calls)))
            self.more.notify_all()
            return list(range(first, len(self.calls)))

    def close(self) -> None:
        """No more calls: sessions waiting for work end."""
        with self.lock:
            self.open = False
            self.more.notify_all()

    def wait_for_work(self, idle_s: float) -> bool:
        """An open feed's session with nothing to do: wait up to ``idle_s`` for calls; False
        when none came (the session then ends and its server goes back to the tracker)."""
        with self.lock:
            if not self.todo and self.open and not self.finished.is_set():
                self.more.wait(idle_s)
            return bool(self.todo)

    def starved(self, server_wait_s: float) -> bool:
        """No session has held a usable server for ``server_wait_s`` while kernels waited."""
        with self.lock:
            live = [s for s in self.sessions
                    if s.phase in ("connect", "run") and not (s.abandoned or s.refused)]
            if live or not self.todo:  # nothing queued: an open feed between proposals
                self.last_server_s = time.monotonic()
                return False
            return time.monotonic() - self.last_server_s > server_wait_s

    def take(self, s: _Session, slack_s: float, n: int = 1) -> list[int]:
        """Up to ``n`` more kernels for ``s`` (none once the queue is empty). Its deadline: the
        longest limit of what it holds plus ``slack_s``, from now (no answer by then: hung)."""
        with self.lock:
            got: list[int] = []
            while self.todo and len(got) < n:
                i = self.todo.popleft()
                if not self.done[i]:
                    got.append(i)
            s.held.update(got)
            if got:
                s.phase, s.since = "run", time.monotonic()
            if got or not s.held:  # asking for more is no progress: the deadline stands
                self._deadline(s, slack_s)
            return got

    def _deadline(self, s: _Session, slack_s: float) -> None:
        s.deadline = time.monotonic() + max(self.calls[i].timeout_s for i in s.held) + slack_s \
            if s.held else None

    def lost(self, s: _Session, why: str, max_attempts: int) -> None:
        """``s``'s server is gone: each kernel it held goes back to the queue (or, after too
        many lost servers, is answered as a runtime error)."""
        with self.lock:
            held, s.held = sorted(s.held, reverse=True), set()
            for i in held:
                if self.done[i]:
                    continue
                self.attempts[i] += 1
                self.lost_on[i].append(s.server)
                if self.attempts[i] >= max_attempts:
                    self.answers.put((i, None, {"_failure": {
                        "kind": "server-lost",
                        "detail": f"{self.attempts[i]} servers lost while running it: {why}",
                        "seconds": 0.0}}))
                else:
                    self.todo.appendleft(i)

    def answer(self, s: _Session, i: int, info: dict, raw: dict, slack_s: float = 0.0) -> None:
        with self.lock:
            if s.abandoned or i not in s.held:
                return
            s.held.discard(i)
            if s.held:
                s.since = time.monotonic()  # progress: the rest get their time from now
            self._deadline(s, slack_s)
        self.answers.put((i, info, raw))


def measured_on(info: Mapping[str, Any]) -> dict[str, Any]:
    return {"host": info.get("host"), "port": info.get("port"),
            "gpu_index": info.get("gpu_index"), "gpu": (info.get("device") or {}).get("gpu")}


def server_name(info: Mapping[str, Any]) -> str:
    gpu = f" gpu {info['gpu_index']}" if info.get("gpu_index") not in (None, "") else ""
    return f"{info.get('host')}:{info.get('port')}{gpu}"


def one_line(e: BaseException) -> str:
    text = str(e).strip()
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return (lines[-1] if lines else type(e).__name__)[:300]


# ------------------------------------------------------------------- servers that build

#: how long a session of an open feed waits for more work before it gives its server back
#: (between two of a run's proposals the queue is empty for well under a second)
FEED_IDLE_S = 5.0


def build_calls(op: Operator, configs: Sequence[Config], build: Mapping[str, Any], *,
                timeout_s: float, timing: Mapping[str, Any]) -> list[_Call]:
    """The build tasks of ``configs``: the workload and configuration, the builder's options
    ``build``, and how to time (``timing``; ``timeout_s`` per run). A server has the build's
    limit, nvcc's and a worker's start (30 s) and the run's to answer."""
    limit = float(build.get("compile_timeout_s", 180.0)) + 30.0 + timeout_s
    return [_Call({"key": Space.key(c), "workload": op.workload, "config": jsonable(c),
                   "build": dict(build), "run": dict(timing), "timeout_s": timeout_s},
                  b"", limit) for c in configs]


def built_and_ran(key: str, raw: Mapping[str, Any]) -> tuple[BuildResult, RunResult | None]:
    """A server's answer to a build task (``{"build", "run"}``; ``run`` where it built), or a
    kernel whose servers were all lost (``_failure``: built, never timed)."""
    b = from_dict(raw["build"]) if "build" in raw else BuildResult(key, Status.OK)
    if "_failure" not in raw and "run" not in raw:
        return b, None
    ran = raw.get("run", raw)
    failure = ran.get("_failure")
    return b, WorkerRunner._convert(key, TaskFailure(**failure) if failure else ran)


def serve_builds(sess: Any, batch: _Batch, s: _Session, info: Mapping[str, Any],
                 slack_s: float) -> None:
    """One session of a batch of build tasks: as many tasks at the server as it has build
    workers, topped up from the batch's queue as answers come (each a kernel built and timed
    there), until the queue is empty and nothing is held."""
    submit, poll = sess.get_function("bocast.rpc.submit"), sess.get_function("bocast.rpc.poll")
    run = sess.get_function("bocast.rpc.run")
    depth = max(1, int(info.get("build_workers") or 1))
    while not batch.finished.is_set():
        got = batch.take(s, slack_s, depth - len(s.held))
        for i in [i for i in got if batch.calls[i].direct]:  # timed now, beside the builds
            c = batch.calls[i]
            batch.answer(s, i, dict(info), json.loads(run(json.dumps(c.task), c.cubin,
                                                          c.timeout_s)), slack_s)
        got = [i for i in got if not batch.calls[i].direct]
        if got:
            submit(json.dumps([{"id": i, **batch.calls[i].task} for i in got]))
        if not s.held:
            if batch.wait_for_work(FEED_IDLE_S):
                continue
            return
        # a feed's new kernels are taken between polls: a short wait tops up free workers soon
        for i, raw in json.loads(poll(0.25 if batch.open else 1.0)):
            batch.answer(s, i, dict(info), raw, slack_s)
        if s.abandoned:
            return
