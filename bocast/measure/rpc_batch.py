"""One batch of the RPC runner (one :meth:`~bocast.measure.rpc.RpcRunner.run` call): the queue
of its kernels, the sessions working on it (one thread per server), a lost server's kernel put
back in the queue (or, after too many, answered as a failure), and the answers, each kernel's
first one kept."""

from __future__ import annotations

import collections
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class _Call:
    task: dict[str, Any]   # the worker task, without its cubin
    cubin: bytes
    timeout_s: float


@dataclass(eq=False)
class _Session:
    """One thread holding (or waiting for) one server during one batch."""

    phase: str = "tracker"      # tracker | connect | run | done
    since: float = field(default_factory=time.monotonic)
    deadline: float | None = None
    current: int | None = None
    server: str = ""
    abandoned: bool = False     # declared hung: whatever it answers later is dropped
    refused: bool = False       # a server of another GPU model, held idle until the batch ends


class _Batch:
    """The queue of one :meth:`~bocast.measure.rpc.RpcRunner.run` and the sessions working on it."""

    def __init__(self, calls: list[_Call]):
        self.calls = calls
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

    def take(self, s: _Session, slack_s: float) -> int | None:
        with self.lock:
            while self.todo:
                i = self.todo.popleft()
                if not self.done[i]:
                    s.current, s.phase, s.since = i, "run", time.monotonic()
                    s.deadline = s.since + self.calls[i].timeout_s + slack_s
                    return i
            s.current, s.deadline = None, None
            return None

    def lost(self, s: _Session, why: str, max_attempts: int) -> None:
        """``s``'s server is gone: its kernel goes back to the queue (or, after too many lost
        servers, is answered as a runtime error)."""
        with self.lock:
            i, s.current = s.current, None
            if i is None or self.done[i]:
                return
            self.attempts[i] += 1
            self.lost_on[i].append(s.server)
            if self.attempts[i] >= max_attempts:
                self.answers.put((i, None, {"_failure": {
                    "kind": "server-lost",
                    "detail": f"{self.attempts[i]} servers lost while running it: {why}",
                    "seconds": 0.0}}))
            else:
                self.todo.appendleft(i)

    def answer(self, s: _Session, i: int, info: dict, raw: dict) -> None:
        with self.lock:
            if s.abandoned:
                return
            s.current, s.deadline = None, None
        self.answers.put((i, info, raw))
