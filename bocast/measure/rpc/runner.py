"""The RPC runner: kernels timed on GPU servers that a tracker hands out, and built there too
(``rpc.builds: server``, the default: :meth:`RpcRunner.build_and_run`, each server building
what it times with its own cores, :mod:`bocast.measure.rpc.builds`) or built here
(``rpc.builds: local``: :meth:`RpcRunner.run` of the builder's kernels).

It measures what :class:`~bocast.measure.runner.GpuRunner` does: the same task (paired trials
too) for the same worker, isolated in the server's measurement process; a re-timing's kernel
and reference in one task on one server (:meth:`RpcRunner.run_paired`). What the RPC layer adds
is where it runs (docs/rpc.md):

- one TVM RPC session per server per batch: a batch asks the tracker for up to ``sessions``
  servers and each session takes kernels from the batch's queue until it is empty (a feed,
  :meth:`RpcRunner.open_feed`, is a batch that takes kernels while it runs);
- a server lost mid-batch (killed, crashed, unreachable) or hung (no answer within the
  kernel's limit plus ``slack_s``) has its kernels re-queued; the first answer for a kernel is
  its result, so each is reported once; one lost ``max_attempts`` times is a ``runtime_error``;
- several runs (threads) calling :meth:`run` at once share the servers through the tracker;
- each result names where it ran (``extra["measured_on"]``), and the runner uses servers of one
  GPU model only (``gpu_model``: a name, None for the model registered first, ``"any"``);
- no server answering for ``server_wait_s`` raises :class:`RpcUnavailable`: nothing unfinished
  is recorded, so a resumed run measures it later;
- with the fleet's shared token (``token_file``, else ``$BOCAST_RPC_TOKEN``; required when the
  tracker is not loopback) the tracker and every server must prove it, and a server's results
  count only once it has proved it is the one granted (:mod:`bocast.measure.rpc.auth`).
"""

from __future__ import annotations

import collections
import json
import queue
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from bocast.errors import RpcUnavailable
from bocast.measure.builder import BuildResult
from bocast.measure.pool import TaskFailure
from bocast.measure.rpc import auth
from bocast.measure.rpc import protocol as proto
from bocast.measure.rpc.batch import (
    _Batch,
    _Call,
    _Session,
    build_calls,
    built_and_ran,
    measured_on,
    one_line,
    serve_builds,
    server_name,
)
from bocast.measure.rpc.feed import Feed
from bocast.measure.rpc.service import PROTOCOL
from bocast.measure.runner import (
    OnResult,
    Runner,
    RunResult,
    WorkerRunner,
    kernel_task,
    timing_method,
    trial_repeats,
)
from bocast.records.status import Status
from bocast.space.knobs import Config
from bocast.space.operators.operator import Operator

#: ``on_result(i, build, run)`` of :meth:`RpcRunner.build_and_run`
BuiltAndRan = Callable[[int, BuildResult, "RunResult | None"], None]


# ------------------------------------------------------------------------------ the runner


class RpcRunner(Runner):
    """Times kernels on the GPU servers registered under ``key`` at ``tracker``."""

    name, fleet, pairs = "rpc", True, True

    def __init__(self, tracker: str | tuple[str, int], key: str, *, timeout_s: float = 30.0,
                 repeats: int = 10, warmup_ms: float = 20.0, seed: int = 0,
                 sessions: int | None = None, gpu_model: str | None = None,
                 slack_s: float = 120.0, connect_timeout_s: float = 30.0,
                 server_wait_s: float = 600.0, max_attempts: int = 3, priority: int = 1,
                 token_file: str | None = None, log: Callable[[str], None] | None = None,
                 l2: str = "warm", builds: str = "server", ahead: int = 1, paired: bool = True):
        self.tracker, self.key, self.l2, self.builds = proto.parse_addr(tracker), key, l2, builds
        self.paired, self.trial_repeats = paired, trial_repeats(repeats, paired)
        self.ahead = ahead if builds == "server" else 0  # batches proposed ahead (pipeline.py)
        try:
            self.token = auth.load_token(token_file)
            auth.require(self.token, {"rpc tracker": self.tracker[0]})
        except auth.AuthError as e:
            raise RpcUnavailable(str(e)) from None
        self.timeout_s, self.repeats, self.warmup_ms = timeout_s, repeats, warmup_ms
        self.seed, self.sessions, self.gpu_model = seed, sessions, gpu_model
        self.slack_s, self.connect_timeout_s = slack_s, connect_timeout_s
        self.server_wait_s, self.max_attempts, self.priority = server_wait_s, max_attempts, priority
        self.log = log or (lambda m: print(f"rpc: {m}", file=sys.stderr, flush=True))
        self.seen: dict[str, dict[str, Any]] = {}    # server name -> its info
        self.refused: dict[str, str] = {}            # server name -> why
        self.lost: list[str] = []                    # one line per lost or hung server
        self._lock = threading.Lock()

    # --- Runner --------------------------------------------------------------------------
    def run(self, op: Operator, builds: Sequence[BuildResult], *,
            on_result: OnResult | None = None) -> list[RunResult]:
        for b in builds:
            if b.status is not Status.OK:
                raise ValueError(f"cannot run {b.key}: build status {b.status}")
        calls = []
        for b in builds:
            task = kernel_task(op, b, seed=self.seed, repeats=self.trial_repeats,
                               warmup_ms=self.warmup_ms, l2=self.l2, paired=self.paired)
            cubin = task.pop("cubin") or b""
            calls.append(_Call(task, cubin, self.timeout_s))
        out: list[RunResult | None] = [None] * len(builds)

        def collect(i: int, info: dict | None, raw: dict) -> None:
            failure = raw.get("_failure")
            r = WorkerRunner._convert(builds[i].key, TaskFailure(**failure) if failure else raw)
            if info is not None:
                r.extra["measured_on"] = measured_on(info)
            out[i] = r
            if on_result is not None:
                on_result(i, r)

        self._run_batch(calls, collect)
        return out  # type: ignore[return-value]

    @property
    def builds_on_servers(self) -> bool:
        """Whether :meth:`build_and_run` is how this runner measures (``rpc.builds``)."""
        return self.builds == "server"

    def build_and_run(self, op: Operator, configs: Sequence[Config], build: Mapping[str, Any],
                      *, on_result: BuiltAndRan | None = None
                      ) -> list[tuple[BuildResult, RunResult | None]]:
        """Build ``configs`` on the servers that time them, with the builder's options
        ``build``: ``result[i]`` (and ``on_result(i, build, run)`` as it comes) is the build
        of ``configs[i]`` and, where it built, its run; each answered once, as in :meth:`run`."""
        calls = self._build_calls(op, build)(configs)
        out: list[tuple[BuildResult, RunResult | None] | None] = [None] * len(calls)

        def collect(i: int, info: dict | None, raw: dict) -> None:
            b, r = built_and_ran(calls[i].task["key"], raw)
            if r is not None and info is not None:
                r.extra["measured_on"] = measured_on(info)
            out[i] = (b, r)
            if on_result is not None:
                on_result(i, b, r)

        self._run_batch(calls, collect, builds=True)
        return out  # type: ignore[return-value]

    def open_feed(self, op: Operator, build: Mapping[str, Any], on_result: BuiltAndRan) -> Feed:
        """As :meth:`build_and_run`, for configurations given while it runs
        (:meth:`Feed.put`) until :meth:`Feed.close`: one queue, sessions that stay."""
        return Feed(self._build_calls(op, build),
                    lambda batch, deliver: self._run_batch([], deliver, batch=batch), on_result,
                    self._reference_task(op))

    def _build_calls(self, op: Operator, build: Mapping[str, Any]):
        timing = {"seed": self.seed, "repeats": self.trial_repeats, "warmup_ms": self.warmup_ms,
                  "l2": self.l2, "paired": self.paired}
        return lambda configs: build_calls(op, configs, build, timeout_s=self.timeout_s,
                                           timing=timing)

    def _reference_task(self, op: Operator) -> dict[str, Any]:
        return {"kind": "reference", "workload": op.workload, "seed": self.seed,
                "repeats": max(20, self.repeats), "l2": self.l2}

    def reference(self, op: Operator) -> dict[str, Any]:
        info, raw = self._one(_Call(self._reference_task(op), b"", 120.0))
        if "_failure" in raw:
            raise RuntimeError(f"reference on the RPC server failed: {raw['_failure']['detail']}")
        return {**raw, "measured_on": measured_on(info) if info else None}

    def run_paired(self, op: Operator, build: BuildResult) -> tuple[RunResult, dict[str, Any]]:
        """As :meth:`WorkerRunner.run_paired`, in one task on one server: a re-timing's ratio
        never divides by another GPU's reference."""
        task = {**kernel_task(op, build, seed=self.seed, repeats=max(20, self.repeats),
                              warmup_ms=self.warmup_ms, l2=self.l2), "kind": "paired"}
        info, raw = self._one(_Call(task, task.pop("cubin") or b"", self.timeout_s * 2))
        failure = raw.get("_failure")
        res = WorkerRunner._convert(build.key, TaskFailure(**failure) if failure else raw)
        if info is not None:
            res.extra["measured_on"] = measured_on(info)
        return res, {k: raw[k] for k in ("reference", "pair_ratios", "ratio") if "ratio" in raw}

    def _one(self, call: _Call) -> tuple[dict | None, dict]:
        got: list[tuple[dict | None, dict]] = []
        self._run_batch([call], lambda i, info, raw: got.append((info, raw)))
        return got[0]

    def timing(self) -> dict[str, Any]:
        return timing_method(self.trial_repeats, self.warmup_ms, self.l2, paired=self.paired)

    def device(self) -> dict[str, Any]:
        """The servers registered under the key now; pins the runner to their GPU model."""
        try:
            infos = [s.get("bocast") or {}
                     for s in proto.servers(self.tracker, self.key, self.token)]
        except proto.TrackerError as e:
            raise RpcUnavailable(str(e)) from None
        if not infos:
            raise RpcUnavailable(f"no server registered under key {self.key!r} at "
                                 f"{self.tracker[0]}:{self.tracker[1]}")
        models = collections.Counter((i.get("device") or {}).get("gpu") for i in infos)
        if self.gpu_model is None:
            if len(models) > 1:
                raise RpcUnavailable(f"servers under key {self.key!r} have several GPU models "
                                     f"{dict(models)}: set rpc.gpu_model to one (or 'any')")
            self.gpu_model = next(iter(models))
        first = next((i for i in infos if (i.get("device") or {}).get("gpu") == self.gpu_model),
                     infos[0])
        return {**(first.get("device") or {}), "gpu": self.gpu_model, "runner": "rpc",
                "tracker": f"{self.tracker[0]}:{self.tracker[1]}", "key": self.key,
                "servers": [{**measured_on(i), "pid": i.get("pid"), "git_sha": i.get("git_sha"),
                             "driver": (i.get("device") or {}).get("driver")} for i in infos]}

    # --- the scheduler -------------------------------------------------------------------
    def _wanted_sessions(self, n: int) -> int:
        if self.sessions:
            return max(1, min(n, self.sessions))
        try:
            registered = len(proto.servers(self.tracker, self.key, self.token))
        except proto.TrackerAuthError as e:
            raise RpcUnavailable(str(e)) from None
        except proto.TrackerError:
            registered = 1
        return max(1, min(n, registered))

    def _run_batch(self, calls: list[_Call], deliver: Callable[[int, dict | None, dict], None],
                   *, builds: bool = False, batch: _Batch | None = None) -> None:
        """Every call answered once, through ``deliver``; ``batch``: an open one (a feed,
        :mod:`bocast.measure.rpc.feed`), whose calls come while it runs, until it is closed."""
        batch = batch or _Batch(calls, builds)
        want, asked_s, delivered = 0, 0.0, 0
        try:
            while (len(batch.calls) > delivered or batch.open) and not batch.finished.is_set():
                if time.monotonic() - asked_s > 10.0:  # a feed also uses servers that join
                    want = self._wanted_sessions(1 << 20 if batch.open else len(batch.calls))
                    asked_s = time.monotonic() if batch.open else float("inf")
                remaining = len(batch.calls) - delivered
                self._watch(batch)
                with batch.lock:
                    working = [s for s in batch.sessions
                               if not (s.abandoned or s.refused or s.phase == "done")]
                    queued = len(batch.todo)
                for _ in range(min(want - len(working), queued)):
                    self._start_session(batch)
                try:
                    i, info, raw = batch.answers.get(timeout=0.2)
                except queue.Empty:
                    if batch.fatal:
                        raise RpcUnavailable(batch.fatal) from None
                    if batch.starved(self.server_wait_s):
                        raise RpcUnavailable(self._unavailable(batch, remaining)) from None
                    continue
                with batch.lock:
                    if batch.done[i]:
                        continue
                    batch.done[i] = True
                delivered += 1
                deliver(i, info, raw)
        finally:
            batch.finished.set()

    def _unavailable(self, batch: _Batch, remaining: int) -> str:
        refused = "; refused: " + ", ".join(f"{k} ({v})" for k, v in self.refused.items()) \
            if self.refused else ""
        return (f"no server under key {self.key!r} at {self.tracker[0]}:{self.tracker[1]} "
                f"took work for {self.server_wait_s:.0f} s; {remaining} kernel(s) of the batch "
                f"not measured (not recorded: a resumed run measures them){refused}")

    def _watch(self, batch: _Batch) -> None:
        """Declare hung the sessions past their deadline; their kernels go back to the queue."""
        now = time.monotonic()
        for s in list(batch.sessions):
            with batch.lock:
                if s.abandoned or s.deadline is None or now <= s.deadline:
                    continue
                s.abandoned = True
            what = "connecting" if s.phase == "connect" else "running a kernel"
            why = f"server {s.server or '?'} hung ({what}, no answer in {now - s.since:.0f} s)"
            self.lost.append(why)
            self.log(why + "; its kernel goes to another server")
            batch.lost(s, why, self.max_attempts)

    def _start_session(self, batch: _Batch) -> None:
        s = _Session()
        with batch.lock:
            batch.sessions.append(s)
        threading.Thread(target=self._session, args=(batch, s), daemon=True,
                         name="rpc-session").start()

    def _session(self, batch: _Batch, s: _Session) -> None:
        sess = None
        try:
            match = self._request(batch, s)
            if match is None:
                return
            host, port, matchkey = match
            s.server, s.phase, s.since = f"{host}:{port}", "connect", time.monotonic()
            s.deadline = s.since + self.connect_timeout_s
            from tvm import rpc

            word, nonce = auth.session_word(self.token, matchkey) if self.token else ("", "")
            sess = rpc.connect(host, port, key=f"{matchkey} {word}".strip())
            info = json.loads(sess.get_function("bocast.rpc.info")())
            s.server = server_name(info)
            if self.token and not auth.server_proved(self.token, info.get("auth"), matchkey,
                                                     nonce):
                # not the server the tracker granted, or one without the token: none of its
                # answers may become a record, nor its GPU model the runner's
                why: str | None = ("did not prove the fleet's token for the session the "
                                   "tracker granted")
            else:
                with self._lock:
                    self.seen[s.server] = info
                why = self._refuse(info)
                if not why and batch.builds and not info.get("build_workers"):
                    cause = info.get("cannot_build") or "bocast serve --build-workers 0"
                    why = f"builds nothing ({cause}): set rpc.builds: local to build here for it"
            if why:
                with batch.lock:
                    s.refused, s.deadline = True, None
                if s.server not in self.refused:
                    self.refused[s.server] = why
                    self.log(f"not using server {s.server}: {why}")
                batch.finished.wait()  # held idle so the tracker does not hand it out again
                return
            if batch.builds:
                serve_builds(sess, batch, s, info, self.slack_s)
                return
            remote_run = sess.get_function("bocast.rpc.run")
            while not batch.finished.is_set():
                got = batch.take(s, self.slack_s)
                if not got:
                    return
                c = batch.calls[got[0]]
                raw = json.loads(remote_run(json.dumps(c.task), c.cubin, c.timeout_s))
                batch.answer(s, got[0], info, raw)
                if s.abandoned:
                    return
        except Exception as e:  # noqa: BLE001 - a lost server is a re-queue, never a crash
            if not s.abandoned:
                why = f"server {s.server or '?'} lost ({one_line(e)})"
                self.lost.append(why)
                if s.held:
                    self.log(why + f"; its {len(s.held)} kernel(s) go to another server")
                batch.lost(s, why, self.max_attempts)
        finally:
            s.phase, s.deadline = "done", None
            # returning drops the session (and its functions): TVM closes it, and the server
            # offers itself to the tracker again

    def _request(self, batch: _Batch, s: _Session) -> tuple[str, int, str] | None:
        """A server from the tracker, or None once the batch no longer needs one."""
        req = None
        try:
            while not batch.finished.is_set():
                with batch.lock:
                    if not batch.todo:
                        return None
                if req is None:
                    try:
                        req = proto.Request(self.tracker, self.key, self.priority, self.token)
                    except proto.TrackerAuthError as e:
                        batch.fatal = str(e)  # retrying cannot help: the batch fails now
                        return None
                    except proto.TrackerError:
                        time.sleep(1.0)  # the tracker may be restarting; the batch times out
                        continue
                try:
                    got = req.poll(0.5)
                except (OSError, ConnectionError, ValueError, proto.TrackerError):
                    req.close()
                    req = None
                    continue
                if got is not None:
                    return got
            return None
        finally:
            if req is not None:
                req.close()

    def _refuse(self, info: Mapping[str, Any]) -> str | None:
        if info.get("protocol") != PROTOCOL:
            return f"protocol {info.get('protocol')}, this runner speaks {PROTOCOL}"
        model = (info.get("device") or {}).get("gpu")
        with self._lock:
            if self.gpu_model is None:
                self.gpu_model = model
        if self.gpu_model not in ("any", model):
            return f"GPU {model}, the runner measures on {self.gpu_model}"
        return None

