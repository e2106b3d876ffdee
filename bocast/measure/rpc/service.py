"""One GPU server process of the RPC runner (started and restarted by the supervisor of
:mod:`bocast.measure.rpc.server`): it registers with the tracker under a key, accepts one TVM
RPC session at a time and serves it with TVM's own session loop
(``tvm.rpc._ffi_api.ServerLoop``, the C++ RPC endpoint), in which a runner calls the remote
functions ``bocast.rpc.info`` and ``bocast.rpc.run`` (:class:`Service`), and, on a server with
build workers, ``bocast.rpc.submit`` and ``bocast.rpc.poll`` (its builds:
:mod:`bocast.measure.rpc.builds`). Its one measurement
worker (:class:`~bocast.measure.pool.TimedPool`, the worker of
:class:`~bocast.measure.runner.GpuRunner`) owns the CUDA context and times each kernel, and
lives as long as the server, across sessions. The handshake and the tracker registration are
TVM's protocol; with the fleet's token every session proves it (:mod:`bocast.measure.rpc.auth`).
"""


import json
import os
import queue
import signal
import socket
import threading
import time
from typing import Any

from bocast.measure.nvcc import why_no_compiler
from bocast.measure.pool import TaskFailure, TimedPool
from bocast.measure.rpc import auth
from bocast.measure.rpc import protocol as proto
from bocast.measure.rpc.builds import ServerBuilds, log
from bocast.measure.rpc.handshake import Handshakes
from bocast.records.provenance import git_sha

#: 2: the server builds what it measures (bocast.rpc.submit / bocast.rpc.poll)
PROTOCOL = 2
WORKERS = {"gpu": "bocast.measure.gpu_worker:run_task",
           "standin": "bocast.measure.standin:run_task"}


# ------------------------------------------------------------------- what a session calls


class Service:
    """The measurement worker of one server and the remote functions that reach it."""

    def __init__(self, worker: str, *, startup_timeout_s: float = 300.0,
                 token: str | None = None, build_workers: int = 0):
        self.worker = WORKERS.get(worker, worker)
        self.pool = TimedPool(self.worker, 1, startup_timeout_s=startup_timeout_s)
        self._pool_lock = threading.Lock()  # the session and the build pool's timing thread
        # a server that would build but cannot (no nvcc or no C compiler here) says so instead
        # of answering every kernel as a build_error: runners that want server builds refuse it
        # by name (rpc.builds: local still uses it)
        cannot = why_no_compiler() if build_workers else None
        if cannot:
            log(f"cannot build here ({cannot}): this server only times kernels built elsewhere")
            build_workers = 0
        self.info: dict[str, Any] = {"build_workers": build_workers,
                                     **({"cannot_build": cannot} if cannot else {})}
        self.token = token
        self.session: tuple[str, str] | None = None  # (matchkey, client nonce) of the session
        self.builds = ServerBuilds(build_workers, self.time_kernel) if build_workers else None

    def info_json(self) -> str:
        """``bocast.rpc.info``: what this server is, and (with a token) its proof that it holds
        the token and is the server the tracker granted for this session."""
        info = dict(self.info)
        if self.token is not None and self.session is not None:
            info["auth"] = auth.server_proof(self.token, *self.session)
        return json.dumps(info)

    def call(self, task: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        """The worker's answer to ``task``, or ``{"_failure": ...}`` if it never answered."""
        with self._pool_lock:
            (raw,) = self.pool.map([task], timeout_s)
        if isinstance(raw, TaskFailure):
            return {"_failure": {"kind": raw.kind, "detail": raw.detail, "seconds": raw.seconds}}
        raw = dict(raw)
        raw.pop("_restart", None)  # the pool has acted on it already
        return raw

    def run(self, task_json: str, cubin: bytes, timeout_s: float) -> str:
        task = json.loads(task_json)
        if cubin:
            task["cubin"] = bytes(cubin)
        return json.dumps(self.time_kernel(task, float(timeout_s)))

    def time_kernel(self, task: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        try:
            return self.call(task, timeout_s)
        except RuntimeError as e:
            # the worker cannot be restarted (GPU gone, driver broken): this server must leave
            # the tracker rather than fail every kernel handed to it; the runner re-queues the
            # kernel, the supervisor restarts the server, which registers again only if its
            # worker starts
            log(f"measurement worker cannot be restarted ({e}); exiting")
            os._exit(4)

    def register(self) -> None:
        import tvm_ffi

        tvm_ffi.register_global_func("bocast.rpc.info", self.info_json, override=True)
        tvm_ffi.register_global_func("bocast.rpc.run", self.run, override=True)
        if self.builds is not None:
            tvm_ffi.register_global_func("bocast.rpc.submit", self.builds.submit, override=True)
            tvm_ffi.register_global_func("bocast.rpc.poll", self.builds.poll, override=True)

    def end_session(self) -> str:
        """The session is over (its tasks with it); what the server built so far, or ""."""
        self.session = None
        return self.builds.end_session() if self.builds is not None else ""


# ---------------------------------------------------------------------------- the server


def _matchkey(key: str) -> str:
    # unguessable: with a token it is also the server's nonce of the session handshake
    return key + ":" + auth.nonce()


class _TrackerLink:
    """This server's registration: connected on demand, re-established if the tracker goes
    away, and a fresh matchkey offered after every session."""

    UNUSED_S = 6.0  # a match handed out but never connected to is offered again after this

    def __init__(self, addr: tuple[str, int], key: str, port: int, custom_addr: str | None,
                 info: dict[str, Any], token: str | None = None):
        self.addr, self.key, self.port, self.custom_addr, self.info = addr, key, port, \
            custom_addr, info
        self.token = token
        self.sock: socket.socket | None = None
        self.matchkey: str | None = None
        # the handshake threads (bocast.measure.rpc.handshake) claim the matchkey; the session
        # thread offers a new one after the session: one session per matchkey, the first comer's
        self._claim_lock = threading.Lock()
        self.claimed = False
        self.taken_since: float | None = None
        self._complained = 0.0

    def ensure(self) -> bool:
        if self.sock is not None:
            return True
        try:
            self.sock = proto.connect(self.addr, token=self.token)
            self.sock.settimeout(30)
            proto.send_msg(self.sock, [proto.UPDATE_INFO, {"key": "server:" + self.key,
                                                       "addr": [self.custom_addr, self.port],
                                                       "bocast": self.info}])
            if proto.recv_msg(self.sock) != proto.SUCCESS:
                raise proto.TrackerError("tracker refused UPDATE_INFO")
            self.offer()
            log(f"registered under key {self.key!r} at {self.addr[0]}:{self.addr[1]}")
            return True
        except (proto.TrackerError, OSError, ConnectionError, ValueError) as e:
            self.drop()
            if time.monotonic() - self._complained > 60:
                log(f"tracker: {e}; retrying")
                self._complained = time.monotonic()
            return False

    def _connected(self) -> socket.socket:
        if self.sock is None:  # dropped: the caller's except drops it, ensure() reconnects
            raise ConnectionError("not connected to the tracker")
        return self.sock

    def claim(self, matchkey: str) -> bool:
        """True once for the current matchkey: its session is this connection's."""
        with self._claim_lock:
            if self.claimed or matchkey != self.matchkey:
                return False
            self.claimed = True
            return True

    def offer(self) -> None:
        with self._claim_lock:
            self.matchkey, self.claimed = _matchkey(self.key), False
        self.taken_since = None
        sock = self._connected()
        proto.send_msg(sock, [proto.PUT, self.key, [self.port, self.matchkey], self.custom_addr])
        if proto.recv_msg(sock) != proto.SUCCESS:
            raise proto.TrackerError("tracker refused PUT")

    def check(self) -> None:
        """While idle: offer a new matchkey if the current one was handed to a client that
        never came (the tracker no longer lists it as pending)."""
        if self.claimed:  # its client has connected: its session is about to start
            return
        try:
            sock = self._connected()
            proto.send_msg(sock, [proto.PENDING])
            pending = proto.recv_msg(sock)
            if self.matchkey in pending:
                self.taken_since = None
            elif self.taken_since is None:
                self.taken_since = time.monotonic()
            elif time.monotonic() - self.taken_since > self.UNUSED_S:
                self.offer()
        except (OSError, ConnectionError, ValueError, proto.TrackerError):
            self.drop()

    def after_session(self) -> None:
        try:
            self.offer()
        except (OSError, ConnectionError, ValueError, proto.TrackerError):
            self.drop()

    def drop(self) -> None:
        if self.sock is not None:
            self.sock.close()
        with self._claim_lock:
            self.sock, self.matchkey = None, None


def _bind(host: str, port: int, port_end: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    for p in range(port, max(port_end, port + 1)):
        try:
            sock.bind((host, p))
            sock.listen(64)
            return sock
        except OSError:
            continue
    sock.close()
    raise OSError(f"no free port in [{port}, {port_end}) on {host}")


def _tvm_session(conn: socket.socket) -> None:
    from tvm.rpc import _ffi_api

    _ffi_api.ServerLoop(conn.detach())  # returns when the client closes the session


def serve_sessions(listen: socket.socket, link: _TrackerLink, idle_s: float,
                   service: Service, session=_tvm_session,
                   stop: threading.Event | None = None) -> None:
    """Serve sessions, one at a time, until ``stop`` (forever without one); connections are
    accepted and handshaken meanwhile (:class:`~bocast.measure.rpc.handshake.Handshakes`).
    ``session(conn)`` serves one (TVM's session loop; tests pass another)."""
    stop = stop or threading.Event()
    handshakes = Handshakes(listen, link, idle_s, service.token, stop)
    handshakes.start()
    while not stop.is_set():
        if not link.ensure():
            time.sleep(2)
            continue
        try:
            conn, peer, matchkey, client_nonce = handshakes.ready.get(timeout=2.0)
        except queue.Empty:
            link.check()
            continue
        t0 = time.monotonic()
        service.session = (matchkey, client_nonce)
        try:
            session(conn)
        except Exception as e:  # noqa: BLE001 - a broken session ends that session only
            log(f"session from {peer} ended: {str(e).splitlines()[0] if str(e) else e}")
        finally:
            built = service.end_session()
            conn.close()
        log(f"session from {peer} done after {time.monotonic() - t0:.1f} s"
            + (f"; {built}" if built else ""))
        link.after_session()


def _die_with_parent() -> None:
    """A SIGTERM when the supervisor dies, even by SIGKILL, so that no orphan server stays
    registered with the tracker (Linux; elsewhere orphans linger until killed)."""
    parent = os.getppid()
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # it died before the request took effect
        os._exit(0)


def run_server(args) -> int:
    """The server process (started by the supervisor)."""
    _die_with_parent()
    # the supervisor passes the token in the environment; the measurement worker, which runs
    # the uploaded kernels, need not inherit it
    token = args.token  # read from the environment by _check_server
    os.environ.pop(auth.TOKEN_ENV, None)
    service = Service(args.worker, startup_timeout_s=args.startup_timeout, token=token,
                      build_workers=args.build_workers or 0)
    try:
        device = service.call({"kind": "device"}, args.startup_timeout)
    except RuntimeError as e:  # the worker never started (no GPU, no driver)
        log(f"measurement worker did not start: {e}")
        return 3
    if "_failure" in device:
        log(f"measurement worker failed on its first task: {device['_failure']['detail']}")
        return 3
    listen = _bind(args.host, args.port, args.port_end)
    port = listen.getsockname()[1]

    service.info.update({
        "protocol": PROTOCOL, "host": socket.gethostname(), "addr": args.custom_addr,
        "port": port, "gpu_index": args.gpu_label, "device": device, "pid": os.getpid(),
        "worker": service.worker, "restarts": int(os.environ.get("BOCAST_RPC_RESTARTS", "0")),
        "git_sha": git_sha()})
    service.register()
    link = _TrackerLink(proto.parse_addr(args.tracker), args.key, port, args.custom_addr,
                        service.info, token)
    log(f"server gpu {args.gpu_label or '-'} ({device.get('gpu')}) listening on port {port}, "
        f"pid {os.getpid()}, {args.build_workers} build worker(s)")

    def stop(*_):
        service.pool.close()
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    worker = threading.Thread(target=serve_sessions,
                              args=(listen, link, args.session_idle, service), daemon=True)
    worker.start()
    while worker.is_alive():  # the main thread stays in Python, where signals are handled
        worker.join(1.0)
    log("session loop died; exiting for the supervisor to restart the server")
    service.pool.close()
    return 1
