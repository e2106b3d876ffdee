"""GPU servers for the RPC runner (:mod:`bocast.measure.rpc`), and the command that starts them.

    python -m bocast.measure.rpc_server serve --key h100 --gpus all           # tracker + servers
    python -m bocast.measure.rpc_server serve --key h100 --gpus all --tracker HOST:9190
    python -m bocast.measure.rpc_server tracker --port 9190                   # a tracker alone

A server is three processes deep, so that no fault below reaches the tuner:

- the supervisor (``serve``) restarts the server whenever it exits, with back-off;
- the server registers with the tracker under a key, accepts one TVM RPC session at a time and
  serves it with TVM's own session loop (``tvm.rpc._ffi_api.ServerLoop``, the C++ RPC
  endpoint), in which a runner calls the remote functions ``bocast.rpc.info`` and
  ``bocast.rpc.run``;
- the server's one measurement worker (:class:`~bocast.measure.pool.TimedPool`, the worker of
  :class:`~bocast.measure.runner.GpuRunner`) owns the CUDA context and times each kernel: a
  kernel that hangs is killed at its limit, a crash or a sticky CUDA error replaces the worker,
  exactly as in the local runner. The worker lives as long as the server, across sessions.

Why not ``tvm.rpc.Server``: it forks a new process for every session (no worker could live
across sessions, and every batch would pay for a new CUDA context), and when a session's process
exits with a non-zero code its listening thread raises and the server stops accepting while its
process stays up. The handshake (magic, ``client:<matchkey>``) and the tracker registration
(``PUT`` of a fresh matchkey after every session) are TVM's protocol, so any tracker speaking it
(TVM's, or :mod:`bocast.measure.rpc_tracker`) can hand these servers out.

Everything listens on loopback unless asked otherwise; any other address needs the fleet's shared
token (:mod:`bocast.measure.rpc_auth`), which every session and tracker connection then proves.
The command's arguments are checked before anything binds: a bad one is one line, exit 2.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from bocast.measure import rpc_auth as auth
from bocast.measure import rpc_tracker as trk
from bocast.measure.pool import TaskFailure, TimedPool

PROTOCOL = 1
WORKERS = {"gpu": "bocast.measure.gpu_worker:run_task",
           "standin": "bocast.measure.standin:run_task"}


def log(msg: str) -> None:
    print(time.strftime("%H:%M:%S ") + msg, file=sys.stderr, flush=True)


# ------------------------------------------------------------------- what a session calls


class Service:
    """The measurement worker of one server and the remote functions that reach it."""

    def __init__(self, worker: str, *, startup_timeout_s: float = 300.0,
                 token: str | None = None):
        self.worker = WORKERS.get(worker, worker)
        self.pool = TimedPool(self.worker, 1, startup_timeout_s=startup_timeout_s)
        self.info: dict[str, Any] = {}
        self.token = token
        self.session: tuple[str, str] | None = None  # (matchkey, client nonce) of the session

    def info_json(self) -> str:
        """``bocast.rpc.info``: what this server is, and (with a token) its proof that it holds
        the token and is the server the tracker granted for this session."""
        info = dict(self.info)
        if self.token is not None and self.session is not None:
            info["auth"] = auth.server_proof(self.token, *self.session)
        return json.dumps(info)

    def call(self, task: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        """The worker's answer to ``task``, or ``{"_failure": ...}`` if it never answered."""
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
        try:
            return json.dumps(self.call(task, float(timeout_s)))
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
        self.taken_since: float | None = None
        self._complained = 0.0

    def ensure(self) -> bool:
        if self.sock is not None:
            return True
        try:
            self.sock = trk.connect(self.addr, token=self.token)
            self.sock.settimeout(30)
            trk.send_msg(self.sock, [trk.UPDATE_INFO, {"key": "server:" + self.key,
                                                       "addr": [self.custom_addr, self.port],
                                                       "bocast": self.info}])
            if trk.recv_msg(self.sock) != trk.SUCCESS:
                raise trk.TrackerError("tracker refused UPDATE_INFO")
            self.offer()
            log(f"registered under key {self.key!r} at {self.addr[0]}:{self.addr[1]}")
            return True
        except (trk.TrackerError, OSError, ConnectionError, ValueError) as e:
            self.drop()
            if time.monotonic() - self._complained > 60:
                log(f"tracker: {e}; retrying")
                self._complained = time.monotonic()
            return False

    def _connected(self) -> socket.socket:
        if self.sock is None:  # dropped: the caller's except drops it, ensure() reconnects
            raise ConnectionError("not connected to the tracker")
        return self.sock

    def offer(self) -> None:
        self.matchkey, self.taken_since = _matchkey(self.key), None
        sock = self._connected()
        trk.send_msg(sock, [trk.PUT, self.key, [self.port, self.matchkey], self.custom_addr])
        if trk.recv_msg(sock) != trk.SUCCESS:
            raise trk.TrackerError("tracker refused PUT")

    def check(self) -> None:
        """While idle: offer a new matchkey if the current one was handed to a client that
        never came (the tracker no longer lists it as pending)."""
        try:
            sock = self._connected()
            trk.send_msg(sock, [trk.PENDING])
            pending = trk.recv_msg(sock)
            if self.matchkey in pending:
                self.taken_since = None
            elif self.taken_since is None:
                self.taken_since = time.monotonic()
            elif time.monotonic() - self.taken_since > self.UNUSED_S:
                self.offer()
        except (OSError, ConnectionError, ValueError, trk.TrackerError):
            self.drop()

    def after_session(self) -> None:
        try:
            self.offer()
        except (OSError, ConnectionError, ValueError, trk.TrackerError):
            self.drop()

    def drop(self) -> None:
        if self.sock is not None:
            self.sock.close()
        self.sock, self.matchkey = None, None


def _bind(host: str, port: int, port_end: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    for p in range(port, max(port_end, port + 1)):
        try:
            sock.bind((host, p))
            sock.listen(8)
            return sock
        except OSError:
            continue
    sock.close()
    raise OSError(f"no free port in [{port}, {port_end}) on {host}")


def _handshake(conn: socket.socket, matchkey: str | None, key: str, idle_s: float,
               token: str | None = None) -> str | None:
    """TVM's RPC handshake: the client sends ``client:<matchkey>``, the server answers with
    its own key; a stale or foreign matchkey is refused, and with ``token`` so is a client that
    does not prove it for this matchkey. Returns the client's nonce ('' without a token), or
    None if refused."""
    conn.settimeout(10)
    try:
        if struct.unpack("<i", trk.recv_exact(conn, 4))[0] != trk.RPC_MAGIC:
            return None
        (n,) = struct.unpack("<i", trk.recv_exact(conn, 4))
        if not 0 < n < 4096:
            return None
        words = trk.recv_exact(conn, n).decode(errors="replace").split()
        if not words or matchkey is None or words[0] != "client:" + matchkey:
            conn.sendall(struct.pack("<i", trk.RPC_CODE_MISMATCH))
            return None
        client_nonce = "" if token is None else auth.check_session_word(token, matchkey, words)
        if client_nonce is None:
            conn.sendall(struct.pack("<i", trk.RPC_CODE_MISMATCH))
            return None
        reply = ("server:" + key).encode()
        conn.sendall(struct.pack("<ii", trk.RPC_CODE_SUCCESS, len(reply)) + reply)
    except (OSError, ConnectionError, struct.error):
        return None
    conn.settimeout(None)
    # a client that stops calling (stopped, or its host gone) frees the server after idle_s:
    # the session loop's receive fails and the session ends
    sec = int(idle_s)
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO,
                    struct.pack("ll", sec, int((idle_s - sec) * 1e6)))
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for opt, value in (("TCP_KEEPIDLE", 60), ("TCP_KEEPINTVL", 10), ("TCP_KEEPCNT", 6)):
        if hasattr(socket, opt):  # a client host that vanished ends the session in ~2 min
            conn.setsockopt(socket.IPPROTO_TCP, getattr(socket, opt), value)
    return client_nonce


def serve_sessions(listen: socket.socket, link: _TrackerLink, idle_s: float,
                   service: Service) -> None:
    """Accept and serve sessions, one at a time, forever."""
    from tvm.rpc import _ffi_api

    while True:
        if not link.ensure():
            time.sleep(2)
            continue
        ready, _, _ = select.select([listen], [], [], 2.0)
        if not ready:
            link.check()
            continue
        conn, peer = listen.accept()
        matchkey = link.matchkey
        client_nonce = _handshake(conn, matchkey, link.key, idle_s, service.token)
        if client_nonce is None or matchkey is None:
            conn.close()
            continue
        t0 = time.monotonic()
        service.session = (matchkey, client_nonce)
        try:
            _ffi_api.ServerLoop(conn.detach())  # returns when the client closes the session
        except Exception as e:  # noqa: BLE001 - a broken session ends that session only
            log(f"session from {peer[0]} ended: {str(e).splitlines()[0] if str(e) else e}")
        finally:
            service.session = None
        log(f"session from {peer[0]} done after {time.monotonic() - t0:.1f} s")
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
    service = Service(args.worker, startup_timeout_s=args.startup_timeout, token=token)
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
    from bocast.provenance import git_sha

    service.info.update({
        "protocol": PROTOCOL, "host": socket.gethostname(), "addr": args.custom_addr,
        "port": port, "gpu_index": args.gpu_label, "device": device, "pid": os.getpid(),
        "worker": service.worker, "restarts": int(os.environ.get("BOCAST_RPC_RESTARTS", "0")),
        "git_sha": git_sha()})
    service.register()
    link = _TrackerLink(trk.parse_addr(args.tracker), args.key, port, args.custom_addr,
                        service.info, token)
    log(f"server gpu {args.gpu_label or '-'} ({device.get('gpu')}) listening on port {port}, "
        f"pid {os.getpid()}")

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


# ------------------------------------------------------------------------ the supervisor


class Supervisor(threading.Thread):
    """Keeps one server process running: restarted whenever it exits, after a back-off that
    grows while it keeps dying young (no GPU, a port taken) and resets once it has lived."""

    def __init__(self, child_args: Sequence[str], env: dict[str, str], label: str):
        super().__init__(name=f"supervisor-{label}", daemon=True)
        self.child_args, self.env, self.label = list(child_args), env, label
        self.stopping = threading.Event()
        self.proc: subprocess.Popen | None = None
        self.restarts = 0

    def run(self) -> None:
        delay = 1.0
        while not self.stopping.is_set():
            started = time.monotonic()
            # its own session: a Ctrl-C meant for `serve` reaches the server only through
            # stop(), so it is never mistaken for a crash and restarted
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "bocast.measure.rpc_server", "_server", *self.child_args],
                env={**self.env, "BOCAST_RPC_RESTARTS": str(self.restarts)},
                start_new_session=True)
            while self.proc.poll() is None and not self.stopping.wait(0.5):
                pass
            if self.stopping.is_set():
                break
            lived = time.monotonic() - started
            delay = 1.0 if lived > 60 else min(30.0, delay * 2)
            log(f"server gpu {self.label or '-'} exited with code {self.proc.returncode} after "
                f"{lived:.0f} s; restarting in {delay:.0f} s")
            self.restarts += 1
            self.stopping.wait(delay)

    def stop(self) -> None:
        self.stopping.set()
        p = self.proc
        if p is not None and p.poll() is None:
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)


def _gpus(spec: str | None) -> list[str | None]:
    """The GPUs of ``--gpus`` (already checked by :func:`_gpu_list`), "all" asked of nvidia-smi."""
    if not spec:
        return [None]  # one server on the environment's devices
    gpus: list[str | None] = []
    if spec != "all":
        gpus += spec.split(",")
        return gpus
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True,
                             timeout=30).stdout
    except (OSError, subprocess.SubprocessError) as e:
        raise ValueError(f"--gpus all: nvidia-smi failed ({e}); list the GPUs: --gpus 0,1") \
            from None
    n = sum(1 for line in out.splitlines() if line.startswith("GPU "))
    if n == 0:
        raise ValueError("--gpus all: nvidia-smi lists no GPU")
    gpus += map(str, range(n))
    return gpus


def serve(args) -> int:
    tracker = None
    if args.tracker:
        tracker_addr = args.tracker
    else:
        tracker = trk.Tracker(args.tracker_host, args.tracker_port, args.tracker_port + 10,
                              token=args.token).start()
        tracker_addr = f"{tracker.addr[0]}:{tracker.port}"
        log(f"tracker listening on {args.tracker_host}:{tracker.port}")
    env = dict(os.environ)
    if args.token is not None:  # to the servers through their environment, not their argv
        env[auth.TOKEN_ENV] = args.token
    sups = []
    for i, gpu in enumerate(args.gpu_list):
        genv = dict(env)
        label = gpu if gpu is not None else genv.get("CUDA_VISIBLE_DEVICES", "")
        if gpu is not None:
            genv["CUDA_VISIBLE_DEVICES"] = gpu
        child = ["--tracker", tracker_addr, "--key", args.key, "--host", args.host,
                 "--port", str(args.port + i if args.port else 0),  # 0: any free port
                 "--port-end", str(args.port_end),
                 "--worker", args.worker, "--gpu-label", label or "",
                 "--startup-timeout", str(args.startup_timeout),
                 "--session-idle", str(args.session_idle)]
        if args.custom_addr:
            child += ["--custom-addr", args.custom_addr]
        sups.append(Supervisor(child, genv, label or ""))
    for s in sups:
        s.start()
    # the log says whether the fleet proves a token (a check run should show which path it timed)
    log(f"{len(sups)} server(s) under key {args.key!r}, tracker {tracker_addr}, shared token "
        f"{'on' if args.token is not None else 'off (loopback only)'}; Ctrl-C stops")
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    while not done.wait(1.0):
        pass
    for s in sups:
        s.stop()
    if tracker is not None:
        tracker.stop()
    return 0


def run_tracker(args) -> int:
    tracker = trk.Tracker(args.host, args.port, args.port_end, token=args.token)
    log(f"tracker listening on {args.host}:{tracker.port}")
    signal.signal(signal.SIGTERM, lambda *_: tracker.stop())
    try:
        tracker.serve_forever()
    except KeyboardInterrupt:
        tracker.stop()
    return 0


# ------------------------------------------------------------- the command's arguments
# Each is checked when parsed (argparse's type=), the rest (the token, which addresses are
# loopback) by the subcommand's check before anything binds: one line, exit 2.


def _arg(check):
    """An argparse type from ``check`` (text -> value, ValueError naming what is wrong)."""
    def parse(text: str):
        try:
            return check(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(f"{text!r}: {e}") from None
    return parse


def _int_in(lo: int, hi: int, what: str):
    def check(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            v = lo - 1
        if not lo <= v <= hi:
            raise ValueError(f"expected {what}")
        return v
    return _arg(check)


_port = _int_in(0, 65535, "a port, 0 to 65535 (0: any free port)")
_port_end = _int_in(1, 65536, "a port, 1 to 65536 (the end of the range, not included)")


@_arg
def _seconds(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = math.nan
    if not (math.isfinite(v) and 0 < v <= 1e6):
        raise ValueError("expected a number of seconds, above 0 and at most 1e6")
    return v


def _resolvable(host: str) -> str:
    try:
        auth.resolve(host)
    except (OSError, UnicodeError):
        raise ValueError(f"host {host!r} does not resolve to an address") from None
    return host


_host = _arg(_resolvable)


@_arg
def _tracker_addr(text: str) -> str:
    host, port = trk.parse_addr(text)
    if not 1 <= port <= 65535:
        raise ValueError("expected HOST:PORT with a port 1 to 65535")
    _resolvable(host)
    return text


@_arg
def _word(text: str) -> str:
    if not text or any(c.isspace() for c in text):
        raise ValueError("expected a non-empty word without spaces")
    return text


@_arg
def _worker(text: str) -> str:
    if text in WORKERS:
        return text
    module, colon, function = text.partition(":")
    try:
        found = bool(colon and module and function) and importlib.util.find_spec(module)
    except (ImportError, ValueError):
        found = False
    if not found:
        raise ValueError(f"expected {', '.join(WORKERS)} or an importable MODULE:FUNCTION")
    return text


@_arg
def _gpu_list(text: str) -> str:
    if text == "all":
        return text
    gpus = text.split(",")
    # what CUDA_VISIBLE_DEVICES takes: indices, GPU and MIG UUIDs
    if not all(g.isdigit() or g.startswith(("GPU-", "MIG-")) for g in gpus):
        raise ValueError("expected all, or GPU indices or UUIDs separated by commas (0,1,2)")
    if len(set(gpus)) < len(gpus):
        raise ValueError("a GPU listed twice")
    return text


def _warn_open(hosts: dict[str, str], token: str | None) -> None:
    auth.require(token, hosts)
    for what, host in hosts.items():
        if not auth.is_loopback(host):
            log(f"warning: {what} {host} is not loopback: other hosts reach it, and any client "
                "holding the token runs code on the GPU servers (docs/rpc.md, 'RPC security')")


def _check_serve(args) -> None:
    args.token = auth.load_token(args.token_file)
    args.gpu_list = _gpus(args.gpus)
    if args.port and args.port + len(args.gpu_list) - 1 > 65535:
        raise ValueError(f"--port {args.port}: {len(args.gpu_list)} servers need ports up to "
                         f"{args.port + len(args.gpu_list) - 1}, past 65535")
    hosts = {"--host": args.host}
    if args.tracker:
        hosts["--tracker"] = trk.parse_addr(args.tracker)[0]
    else:
        hosts["--tracker-host"] = args.tracker_host
    if args.custom_addr:
        hosts["--custom-addr"] = args.custom_addr
    _warn_open(hosts, args.token)


def _check_server(args) -> None:
    # started by serve, which checked everything and passes the token in the environment
    args.token = auth.load_token(None)
    hosts = {"--host": args.host, "--tracker": trk.parse_addr(args.tracker)[0]}
    if args.custom_addr:
        hosts["--custom-addr"] = args.custom_addr
    auth.require(args.token, hosts)


def _check_tracker(args) -> None:
    args.token = auth.load_token(args.token_file)
    _warn_open({"--host": args.host}, args.token)


class _Parser(argparse.ArgumentParser):
    """The one-line error of bocast's other commands (``bocast.cli._Parser``, not imported: a
    server host need not import the tuner's command line); usage is in --help."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


_TOKEN_HELP = (f"file holding the fleet's shared token (mode 600); default: ${auth.TOKEN_ENV}. "
               "Needed when any address is not loopback; never given on the command line")


def _server_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--key", required=True, type=_word,
                   help="the key the runner asks the tracker for (one key per GPU model, "
                        "e.g. h100)")
    p.add_argument("--host", default="127.0.0.1", type=_host,
                   help="address the servers listen on (default loopback; any other needs the "
                        "token)")
    p.add_argument("--port", type=_port, default=9091, help="first server port (0: any free)")
    p.add_argument("--port-end", type=_port_end, default=9199)
    p.add_argument("--custom-addr", type=_word,
                   help="address to report to the tracker (other hosts must reach this server "
                        "there)")
    p.add_argument("--worker", default="gpu", type=_worker,
                   help="gpu (default), standin (synthetic timings, tests on a CPU) or "
                        "MODULE:FUNCTION")
    p.add_argument("--startup-timeout", type=_seconds, default=300.0,
                   help="seconds for the measurement worker to start")
    p.add_argument("--session-idle", type=_seconds, default=600.0,
                   help="seconds a session may wait for the client's next call")


def build_parser(prog: str = "python -m bocast.measure.rpc_server") -> argparse.ArgumentParser:
    """``prog`` names the command in errors: ``bocast serve`` is this parser's ``serve`` and
    ``bocast serve tracker`` its ``tracker``."""
    bocast = prog == "bocast serve"
    parser = _Parser(prog=prog, description="RPC tracker and GPU servers for runner: rpc")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("serve", prog=prog if bocast else None,
                       help="one server per GPU (and a tracker unless --tracker)")
    _server_args(p)
    p.add_argument("--gpus", type=_gpu_list,
                   help="GPUs, one server each: all, or indices (or UUIDs) such as 0,1,2 (each "
                        "server sees only its GPU through CUDA_VISIBLE_DEVICES); default: one "
                        "server on the visible devices")
    p.add_argument("--tracker", type=_tracker_addr,
                   help="HOST:PORT of a running tracker (default: start one here)")
    p.add_argument("--tracker-host", default="127.0.0.1", type=_host,
                   help="address of the tracker started here (default loopback; any other "
                        "needs the token)")
    p.add_argument("--tracker-port", type=_port, default=9190)
    p.add_argument("--token-file", help=_TOKEN_HELP)
    p.set_defaults(func=serve, check=_check_serve, prog=p.prog)
    p = sub.add_parser("tracker", prog=f"{prog} tracker", help="a tracker alone")
    p.add_argument("--host", default="127.0.0.1", type=_host,
                   help="address to listen on (default loopback; any other needs the token)")
    p.add_argument("--port", type=_port, default=9190)
    p.add_argument("--port-end", type=_port_end, default=9199)
    p.add_argument("--token-file", help=_TOKEN_HELP)
    p.set_defaults(func=run_tracker, check=_check_tracker, prog=p.prog)
    p = sub.add_parser("_server", help=argparse.SUPPRESS)  # one server, started by serve
    _server_args(p)
    p.add_argument("--tracker", required=True, type=_tracker_addr)
    p.add_argument("--gpu-label", default="")
    p.set_defaults(func=run_server, check=_check_server, prog=p.prog)
    return parser


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    parser = build_parser(prog) if prog else build_parser()
    args = parser.parse_args(argv)
    try:
        args.check(args)  # before anything binds or starts
    except ValueError as e:  # auth.AuthError included
        parser.exit(2, f"{args.prog}: error: {e}\n")
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
