"""GPU servers for the RPC runner (:mod:`bocast.measure.rpc.runner`), and the command that starts
them.

    python -m bocast.measure.rpc.server serve --key h100 --gpus all           # tracker + servers
    python -m bocast.measure.rpc.server serve --key h100 --gpus all --tracker HOST:9190
    python -m bocast.measure.rpc.server tracker --port 9190                   # a tracker alone

A server is three processes deep, so that no fault below reaches the tuner:

- the supervisor (``serve``) restarts the server whenever it exits, with back-off;
- the server (:mod:`bocast.measure.rpc.service`) registers with the tracker under a key,
  accepts one TVM RPC session at a time and serves it with TVM's own session loop
  (``tvm.rpc._ffi_api.ServerLoop``, the C++ RPC endpoint), in which a runner calls the remote
  functions ``bocast.rpc.info`` and ``bocast.rpc.run`` (and ``bocast.rpc.submit``/``poll``:
  the server builds what it times with ``--build-workers`` processes of its own);
- the server's one measurement worker (:class:`~bocast.measure.pool.TimedPool`, the worker of
  :class:`~bocast.measure.runner.GpuRunner`) owns the CUDA context and times each kernel: a
  kernel that hangs is killed at its limit, a crash or a sticky CUDA error replaces the worker,
  exactly as in the local runner. The worker lives as long as the server, across sessions.

Why not ``tvm.rpc.Server``: it forks a new process for every session (no worker could live
across sessions, and every batch would pay for a new CUDA context), and when a session's process
exits with a non-zero code its listening thread raises and the server stops accepting while its
process stays up. The handshake (magic, ``client:<matchkey>``) and the tracker registration
(``PUT`` of a fresh matchkey after every session) are TVM's protocol, so any tracker speaking it
(TVM's, or :mod:`bocast.measure.rpc.tracker`) can hand these servers out.

Everything listens on loopback unless asked otherwise; any other address needs the fleet's shared
token (:mod:`bocast.measure.rpc.auth`), which every session and tracker connection then proves.
The command's arguments are checked before anything binds: a bad one is one line, exit 2.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence

from bocast.measure.rpc import auth
from bocast.measure.rpc import protocol as proto
from bocast.measure.rpc import tracker as trk
from bocast.measure.rpc.serve_args import (
    build_workers,
    gpu_list,
    host,
    port,
    port_end,
    seconds,
    tracker_addr,
    word,
    worker,
)
from bocast.measure.rpc.service import log, run_server

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
                [sys.executable, "-m", "bocast.measure.rpc.server", "_server", *self.child_args],
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


def default_build_workers(servers: int) -> int:
    """This host's cores (those this process may use) shared among its ``servers``."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, cores // max(1, servers))


def _gpus(spec: str | None) -> list[str | None]:
    """The GPUs of ``--gpus`` (already checked by :func:`gpu_list`), "all" asked of nvidia-smi."""
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
        tracker_at = args.tracker
    else:
        tracker = trk.Tracker(args.tracker_host, args.tracker_port, args.tracker_port + 10,
                              token=args.token).start()
        tracker_at = f"{tracker.addr[0]}:{tracker.port}"
        log(f"tracker listening on {args.tracker_host}:{tracker.port}")
    env = dict(os.environ)
    if args.token is not None:  # to the servers through their environment, not their argv
        env[auth.TOKEN_ENV] = args.token
    sups = []
    builders = args.build_workers if args.build_workers is not None else \
        default_build_workers(len(args.gpu_list))
    for i, gpu in enumerate(args.gpu_list):
        genv = dict(env)
        label = gpu if gpu is not None else genv.get("CUDA_VISIBLE_DEVICES", "")
        if gpu is not None:
            genv["CUDA_VISIBLE_DEVICES"] = gpu
        child = ["--tracker", tracker_at, "--key", args.key, "--host", args.host,
                 "--port", str(args.port + i if args.port else 0),  # 0: any free port
                 "--port-end", str(args.port_end),
                 "--worker", args.worker, "--gpu-label", label or "",
                 "--startup-timeout", str(args.startup_timeout),
                 "--session-idle", str(args.session_idle), "--build-workers", str(builders)]
        if args.custom_addr:
            child += ["--custom-addr", args.custom_addr]
        sups.append(Supervisor(child, genv, label or ""))
    for s in sups:
        s.start()
    # the log says whether the fleet proves a token (a check run should show which path it timed)
    log(f"{len(sups)} server(s) under key {args.key!r}, {builders} build worker(s) each, "
        f"tracker {tracker_at}, shared token "
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


def _warn_open(hosts: dict[str, str], token: str | None) -> None:
    auth.require(token, hosts)
    for what, addr in hosts.items():
        if not auth.is_loopback(addr):
            log(f"warning: {what} {addr} is not loopback: other hosts reach it, and any client "
                "holding the token runs code on the GPU servers (docs/rpc.md, 'RPC security')")


def _check_ports(port: int, port_end: int, n: int) -> None:
    """``n`` listeners from ``port`` on, each trying ports below ``port_end`` (0: any free
    port): a range that holds none of them would fail only once bound, or never bind."""
    if port and port + n - 1 > 65535:
        raise ValueError(f"--port {port}: {n} servers need ports up to {port + n - 1}, past "
                         "65535")
    if port and port + n > port_end:
        raise ValueError(f"--port-end {port_end}: the range from --port {port} (the end not "
                         f"included) holds no port for {'the last of ' if n > 1 else ''}"
                         f"{n} listener{'s' if n > 1 else ''}")


def _check_serve(args) -> None:
    args.token = auth.load_token(args.token_file)
    args.gpu_list = _gpus(args.gpus)
    _check_ports(args.port, args.port_end, len(args.gpu_list))
    hosts = {"--host": args.host}
    if args.tracker:
        hosts["--tracker"] = proto.parse_addr(args.tracker)[0]
    else:
        hosts["--tracker-host"] = args.tracker_host
    if args.custom_addr:
        hosts["--custom-addr"] = args.custom_addr
    _warn_open(hosts, args.token)


def _check_server(args) -> None:
    # started by serve, which checked everything and passes the token in the environment
    args.token = auth.load_token(None)
    hosts = {"--host": args.host, "--tracker": proto.parse_addr(args.tracker)[0]}
    if args.custom_addr:
        hosts["--custom-addr"] = args.custom_addr
    auth.require(args.token, hosts)


def _check_tracker(args) -> None:
    args.token = auth.load_token(args.token_file)
    _check_ports(args.port, args.port_end, 1)
    _warn_open({"--host": args.host}, args.token)


class _Parser(argparse.ArgumentParser):
    """The one-line error of bocast's other commands (``bocast.cli.parser._Parser``, not
    imported: a server host need not import the tuner's command line); usage is in --help.
    No abbreviations: ``--token SECRET`` would be ``--token-file SECRET``, and its error
    would print the secret."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **{**kwargs, "allow_abbrev": False})

    def error(self, message: str):
        head, sep, rest = message.partition("unrecognized arguments: ")
        if sep:  # the options alone: a value may be a secret (--tok SECRET)
            flags = [a for a in rest.split() if a.startswith("-")]
            message = (f"{head}unrecognized argument(s) {' '.join(flags) or '(not options)'}; "
                       "their values are not repeated")
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class _NoToken(argparse.Action):
    """``--token VALUE``: refused without repeating the value (the secret), which a command
    line shows every user of the machine (ps)."""

    def __call__(self, parser, namespace, values, option_string=None):
        parser.error("--token: a token is never given on the command line (every user sees it "
                     "in ps); put it in a file of mode 600 and give --token-file FILE")


_TOKEN_HELP = (f"file holding the fleet's shared token (mode 600); default: ${auth.TOKEN_ENV}. "
               "Needed when any address is not loopback; never given on the command line")


def _server_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--key", required=True, type=word,
                   help="the key the runner asks the tracker for (one key per GPU model, "
                        "e.g. h100)")
    p.add_argument("--host", default="127.0.0.1", type=host,
                   help="address the servers listen on (default loopback; any other needs the "
                        "token)")
    p.add_argument("--port", type=port, default=9091, help="first server port (0: any free)")
    p.add_argument("--port-end", type=port_end, default=9199)
    p.add_argument("--custom-addr", type=word,
                   help="address to report to the tracker (other hosts must reach this server "
                        "there)")
    p.add_argument("--worker", default="gpu", type=worker,
                   help="gpu (default), standin (synthetic timings, tests on a CPU) or "
                        "MODULE:FUNCTION")
    p.add_argument("--startup-timeout", type=seconds, default=300.0,
                   help="seconds for the measurement worker to start")
    p.add_argument("--session-idle", type=seconds, default=600.0,
                   help="seconds a session may wait for the client's next call")
    p.add_argument("--build-workers", type=build_workers, default=None,
                   help="processes each server builds kernels with (the runner sends it "
                        "workload and configuration; 0: the runner builds for this server); "
                        "default: this host's cores divided by its servers")


def build_parser(prog: str = "python -m bocast.measure.rpc.server") -> argparse.ArgumentParser:
    """``prog`` names the command in errors: ``bocast serve`` is this parser's ``serve`` and
    ``bocast serve tracker`` its ``tracker``."""
    bocast = prog == "bocast serve"
    parser = _Parser(prog=prog, description="RPC tracker and GPU servers for runner: rpc")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("serve", prog=prog if bocast else None,
                       help="one server per GPU (and a tracker unless --tracker)")
    _server_args(p)
    p.add_argument("--gpus", type=gpu_list,
                   help="GPUs, one server each: all, or indices (or UUIDs) such as 0,1,2 (each "
                        "server sees only its GPU through CUDA_VISIBLE_DEVICES); default: one "
                        "server on the visible devices")
    p.add_argument("--tracker", type=tracker_addr,
                   help="HOST:PORT of a running tracker (default: start one here)")
    p.add_argument("--tracker-host", default="127.0.0.1", type=host,
                   help="address of the tracker started here (default loopback; any other "
                        "needs the token)")
    p.add_argument("--tracker-port", type=port, default=9190)
    p.add_argument("--token-file", help=_TOKEN_HELP)
    p.add_argument("--token", nargs="?", action=_NoToken, help=argparse.SUPPRESS)
    p.set_defaults(func=serve, check=_check_serve, prog=p.prog)
    p = sub.add_parser("tracker", prog=f"{prog} tracker", help="a tracker alone")
    p.add_argument("--host", default="127.0.0.1", type=host,
                   help="address to listen on (default loopback; any other needs the token)")
    p.add_argument("--port", type=port, default=9190)
    p.add_argument("--port-end", type=port_end, default=9199)
    p.add_argument("--token-file", help=_TOKEN_HELP)
    p.add_argument("--token", nargs="?", action=_NoToken, help=argparse.SUPPRESS)
    p.set_defaults(func=run_tracker, check=_check_tracker, prog=p.prog)
    p = sub.add_parser("_server", help=argparse.SUPPRESS)  # one server, started by serve
    _server_args(p)
    p.add_argument("--tracker", required=True, type=tracker_addr)
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
