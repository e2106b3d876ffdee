"""The RPC tracker: GPU servers register under a key, a runner asks it for a free server.

It speaks the wire protocol of TVM's tracker (``tvm.rpc.tracker``: a 4-byte magic, then
length-prefixed JSON commands PUT, REQUEST, UPDATE_INFO, SUMMARY, GET_PENDING_MATCHKEYS, PING,
STOP), so TVM's own servers (``python -m tvm.exec.rpc_server --tracker``), its query tool
(``python -m tvm.exec.query_rpc_tracker``) and its client (``tvm.rpc.connect_tracker``) work
against it, and bocast's servers and runner work against TVM's tracker. It exists because TVM's
tracker needs tornado, which neither the apache-tvm 0.27 wheel's dependencies nor the GPU
machine's bundle carry; this one needs only the standard library (and does not import TVM, so a
tracker host needs no TVM at all).

Scheduling is TVM's: per key, the highest-priority request gets the server that has waited
longest; a server's registration ("offer") is consumed by a match, and the server offers itself
again when its session ends. A server whose connection to the tracker closes (it died) is
withdrawn at once, so a dead server is never handed out.

With a shared token (:mod:`bocast.measure.rpc_auth`) every connection proves it after the magic
(the tracker answers :data:`AUTH_MAGIC` instead of the magic, then a nonce exchange), so only
token holders register servers, request them or read the summary; TVM's own tools, which know
no token, then cannot use this tracker. Without a token it listens only on loopback.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import json
import select
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from bocast.measure import rpc_auth as auth

# TVM's constants (tvm.rpc.base); a test checks they still agree with the installed TVM
TRACKER_MAGIC = 0x2F271
RPC_MAGIC = 0xFF271
RPC_CODE_SUCCESS = RPC_MAGIC
RPC_CODE_MISMATCH = RPC_MAGIC + 2
FAIL, SUCCESS, PING, STOP, PUT, REQUEST, UPDATE_INFO, SUMMARY, PENDING = -1, 0, 1, 2, 3, 4, 5, 6, 7
# this tracker's answer to the magic when it wants the token (not a TVM code: a TVM peer closes)
AUTH_MAGIC = 0x2B0CA5
MAX_MESSAGE = 1 << 20  # commands are small JSON; a larger size header is a foreign peer


class TrackerError(RuntimeError):
    """The tracker cannot be reached, or answered outside the protocol."""


class TrackerAuthError(TrackerError):
    """The tracker and this peer disagree on the token (one has none, or they differ): retrying
    cannot help."""


# ------------------------------------------------------------------------ wire format


def recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("peer closed the connection")
        buf += chunk
    return bytes(buf)


def send_msg(sock: socket.socket, value: Any) -> None:
    data = json.dumps(value).encode()
    sock.sendall(struct.pack("<i", len(data)) + data)


def recv_msg(sock: socket.socket) -> Any:
    (size,) = struct.unpack("<i", recv_exact(sock, 4))
    if not 0 < size <= MAX_MESSAGE:
        raise ConnectionError(f"message size {size} outside the protocol")
    return json.loads(recv_exact(sock, size))


def parse_addr(text: str | tuple[str, int], default_port: int = 9190) -> tuple[str, int]:
    """"host:port" (or a (host, port) pair) -> (host, port)."""
    if isinstance(text, (tuple, list)):
        return str(text[0]), int(text[1])
    host, _, port = str(text).rpartition(":")
    if not host:
        return str(text), default_port
    try:
        return host, int(port)
    except ValueError:
        raise ValueError(f"tracker address {text!r}: expected HOST:PORT") from None


def connect(addr: tuple[str, int], timeout_s: float = 10.0, token: str | None = None
            ) -> socket.socket:
    """A connection to the tracker at ``addr``, past the magic handshake (and, with ``token``,
    past the mutual proof of the token)."""
    where = f"tracker at {addr[0]}:{addr[1]}"
    try:
        sock = socket.create_connection(addr, timeout=timeout_s)
    except OSError as e:
        raise TrackerError(f"no tracker at {addr[0]}:{addr[1]} ({e.strerror or e})") from None
    try:
        sock.sendall(struct.pack("<i", TRACKER_MAGIC))
        magic = struct.unpack("<i", recv_exact(sock, 4))[0]
        if magic not in (TRACKER_MAGIC, AUTH_MAGIC):
            raise TrackerError(f"{addr[0]}:{addr[1]} is not an RPC tracker")
        if magic == AUTH_MAGIC and token is None:
            raise TrackerAuthError(f"{where} requires the fleet's token (${auth.TOKEN_ENV} or a "
                                   "token file)")
        if magic == TRACKER_MAGIC and token is not None:
            # a tracker without the token cannot prove it holds one: it may be anyone's
            raise TrackerAuthError(f"{where} asks for no token but this side has one: refusing "
                                   "a tracker that cannot prove the token")
        if token is not None:
            _prove_to_tracker(sock, token, where)
    except (OSError, ConnectionError, ValueError, struct.error) as e:
        sock.close()
        raise TrackerError(f"{where} closed the handshake ({e})") from None
    except TrackerError:
        sock.close()
        raise
    sock.settimeout(None)
    return sock


def _prove_to_tracker(sock: socket.socket, token: str, where: str) -> None:
    (tracker_nonce,) = recv_msg(sock)
    mine = auth.nonce()
    send_msg(sock, [mine, auth.mac(token, "client", str(tracker_nonce), mine)])
    try:
        (proof,) = recv_msg(sock)
    except ConnectionError:  # the tracker closes on a wrong proof
        raise TrackerAuthError(f"{where} refused this side's token (not the fleet's)") from None
    if not auth.check(token, proof, "tracker", str(tracker_nonce), mine):
        raise TrackerAuthError(f"{where} did not prove the fleet's token (a different token)")


def _challenge(sock: socket.socket, token: str) -> bool:
    """The tracker's side of :func:`_prove_to_tracker`: True if the peer proved the token."""
    mine = auth.nonce()
    sock.sendall(struct.pack("<i", AUTH_MAGIC))
    send_msg(sock, [mine])
    answer = recv_msg(sock)
    if not (isinstance(answer, list) and len(answer) == 2 and isinstance(answer[0], str)
            and auth.check(token, answer[1], "client", mine, answer[0])):
        return False
    send_msg(sock, [auth.mac(token, "tracker", mine, answer[0])])
    return True


def summary(addr: tuple[str, int], timeout_s: float = 10.0, token: str | None = None
            ) -> dict[str, Any]:
    """The tracker's view: ``queue_info`` (free servers and waiting requests per key) and
    ``server_info`` (what each registered server reported about itself)."""
    sock = connect(addr, timeout_s, token)
    try:
        sock.settimeout(timeout_s)
        send_msg(sock, [SUMMARY])
        code, value = recv_msg(sock)
    except (OSError, ConnectionError, ValueError) as e:
        raise TrackerError(f"tracker at {addr[0]}:{addr[1]} did not answer SUMMARY ({e})") \
            from None
    finally:
        sock.close()
    if code != SUCCESS:
        raise TrackerError(f"tracker at {addr[0]}:{addr[1]} refused SUMMARY")
    return value


def servers(addr: tuple[str, int], key: str, token: str | None = None) -> list[dict[str, Any]]:
    """What the servers registered under ``key`` reported (busy ones included)."""
    return [s for s in summary(addr, token=token).get("server_info", [])
            if s.get("key") == "server:" + key]


class Request:
    """A pending request for one server under ``key``; :meth:`poll` returns its
    ``(host, port, matchkey)`` once the tracker hands one out, and :meth:`close` withdraws it
    (a request cannot be cancelled in the protocol: the tracker learns of it when the
    connection closes, and skips it)."""

    def __init__(self, addr: tuple[str, int], key: str, priority: int = 1,
                 token: str | None = None):
        self.sock = connect(addr, token=token)
        send_msg(self.sock, [REQUEST, key, "", priority])

    def poll(self, timeout_s: float) -> tuple[str, int, str] | None:
        ready, _, _ = select.select([self.sock], [], [], timeout_s)
        if not ready:
            return None
        code, value = recv_msg(self.sock)
        if code != SUCCESS:
            raise TrackerError(f"tracker refused the request ({value})")
        host, port, matchkey = value
        return str(host), int(port), str(matchkey)

    def close(self) -> None:
        self.sock.close()


# --------------------------------------------------------------------------- the tracker


@dataclass(eq=False)
class _Conn:
    sock: socket.socket
    peer: str
    send_lock: threading.Lock = field(default_factory=threading.Lock)
    info: dict[str, Any] = field(default_factory=dict)
    pending: set[str] = field(default_factory=set)  # its offered matchkeys not yet handed out
    closed: bool = False

    def reply(self, value: Any) -> bool:
        with self.send_lock:
            try:
                send_msg(self.sock, value)
                return True
            except OSError:
                return False


class Tracker:
    """A tracker listening on ``host``:``port`` (the first free port up to ``port_end``).
    :meth:`start` serves in background threads; :meth:`serve_forever` in this one. Every peer
    must prove ``token``; without one, ``host`` must be loopback (an AuthError otherwise)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 9190, port_end: int = 9199, *,
                 stop_key: str | None = None, token: str | None = None):
        auth.require(token, {"tracker address": host})
        self.host, self.stop_key, self.token = host, stop_key, token
        self._listen = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        self._listen.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        for p in range(port, max(port_end, port + 1)):
            try:
                self._listen.bind((host, p))
                break
            except OSError:
                continue
        else:
            self._listen.close()
            raise TrackerError(f"tracker: no free port in [{port}, {port_end}) on {host}")
        self.port = self._listen.getsockname()[1]
        self._listen.listen(64)
        self._lock = threading.Lock()
        self._offers: dict[str, list[tuple[_Conn, str, int, str]]] = {}
        self._requests: dict[str, list[tuple[int, int, _Conn]]] = {}
        self._seq = itertools.count()
        self._conns: set[_Conn] = set()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def addr(self) -> tuple[str, int]:
        return ("127.0.0.1" if self.host in ("0.0.0.0", "") else self.host), self.port

    def start(self) -> Tracker:
        self._thread = threading.Thread(target=self.serve_forever, name="tracker", daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        while not self._stopped.is_set():
            try:
                ready, _, _ = select.select([self._listen], [], [], 0.5)
            except (OSError, ValueError):
                return
            if not ready:
                continue
            try:
                sock, peer = self._listen.accept()
            except OSError:
                continue
            threading.Thread(target=self._handle, args=(sock, peer[0]), daemon=True).start()

    def stop(self) -> None:
        self._stopped.set()
        with self._lock:
            conns = list(self._conns)
        for c in conns:
            with contextlib.suppress(OSError):
                c.sock.shutdown(socket.SHUT_RDWR)
        self._listen.close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # --- one connection -------------------------------------------------------------------
    def _handle(self, sock: socket.socket, peer: str) -> None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        conn = _Conn(sock, peer)
        try:
            sock.settimeout(30)  # a peer that never sends its magic
            if struct.unpack("<i", recv_exact(sock, 4))[0] != TRACKER_MAGIC:
                return
            if self.token is None:
                sock.sendall(struct.pack("<i", TRACKER_MAGIC))
            elif not _challenge(sock, self.token):
                return  # closed before any command: nothing registered, nothing handed out
            sock.settimeout(None)
            with self._lock:
                self._conns.add(conn)
            while not self._stopped.is_set():
                if not self._command(conn, recv_msg(sock)):
                    return
        except (OSError, ConnectionError, ValueError, struct.error):
            return
        finally:
            self._drop(conn)

    def _command(self, conn: _Conn, args: Any) -> bool:
        if not isinstance(args, list) or not args:
            return False
        code = args[0]
        if code == PUT:
            key, (port, matchkey) = args[1], args[2]
            addr = args[3] if len(args) > 3 and args[3] else conn.peer
            with self._lock:
                conn.pending.add(matchkey)
                self._offers.setdefault(key, []).append((conn, addr, int(port), matchkey))
            conn.reply(SUCCESS)
            self._schedule(key)
        elif code == REQUEST:
            key, priority = args[1], int(args[3]) if len(args) > 3 else 1
            with self._lock:
                heapq.heappush(self._requests.setdefault(key, []),
                               (-priority, next(self._seq), conn))
            self._schedule(key)
        elif code == UPDATE_INFO:
            info = dict(args[1])
            if isinstance(info.get("addr"), list) and info["addr"] and info["addr"][0] is None:
                info["addr"][0] = conn.peer
            with self._lock:
                conn.info.update(info)
            conn.reply(SUCCESS)
        elif code == PENDING:
            with self._lock:
                keys = list(conn.pending)
            conn.reply(keys)
        elif code == SUMMARY:
            conn.reply([SUCCESS, self.summary()])
        elif code == PING:
            conn.reply(SUCCESS)
        elif code == STOP:
            ok = self.stop_key is not None and len(args) > 1 and args[1] == self.stop_key
            conn.reply(SUCCESS if ok else FAIL)
            if ok:
                self.stop()
        else:
            return False
        return True

    def _schedule(self, key: str) -> None:
        with self._lock:
            offers, requests = self._offers.get(key, []), self._requests.get(key, [])
            while offers and requests:
                _, _, client = requests[0]
                if client.closed:
                    heapq.heappop(requests)
                    continue
                server, addr, port, matchkey = offers.pop(0)
                if server.closed:
                    continue
                heapq.heappop(requests)
                if client.reply([SUCCESS, [addr, port, matchkey]]):
                    server.pending.discard(matchkey)
                else:  # the requester left: the server stays first in line
                    offers.insert(0, (server, addr, port, matchkey))

    def _drop(self, conn: _Conn) -> None:
        with self._lock:
            conn.closed = True
            self._conns.discard(conn)
            for offers in self._offers.values():
                offers[:] = [o for o in offers if o[0] is not conn]
        with contextlib.suppress(OSError):
            conn.sock.close()

    def summary(self) -> dict[str, Any]:
        with self._lock:
            queue = {k: {"free": len(self._offers.get(k, [])),
                         "pending": sum(1 for r in self._requests.get(k, []) if not r[2].closed)}
                     for k in set(self._offers) | set(self._requests)}
            info = [dict(c.info) for c in self._conns
                    if str(c.info.get("key", "")).startswith("server")]
        return {"queue_info": queue, "server_info": info}


def wait_for_servers(addr: tuple[str, int], key: str, n: int, timeout_s: float,
                     token: str | None = None) -> list[dict]:
    """Block until ``n`` servers are registered under ``key`` (a TrackerError past the limit)."""
    end = time.monotonic() + timeout_s
    while True:
        try:
            found = servers(addr, key, token)
        except TrackerAuthError:
            raise
        except TrackerError:
            found = []
        if len(found) >= n:
            return found
        if time.monotonic() > end:
            raise TrackerError(f"{len(found)} of {n} servers registered under key {key!r} at "
                               f"{addr[0]}:{addr[1]} after {timeout_s:.0f} s")
        time.sleep(0.2)
