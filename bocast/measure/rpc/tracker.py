"""The RPC tracker: GPU servers register under a key, a runner asks it for a free server.

It speaks the wire protocol of TVM's tracker (:mod:`bocast.measure.rpc.protocol`: a 4-byte
magic, then length-prefixed JSON commands PUT, REQUEST, UPDATE_INFO, SUMMARY,
GET_PENDING_MATCHKEYS, PING, STOP), so TVM's own servers (``python -m tvm.exec.rpc_server
--tracker``), its query tool (``python -m tvm.exec.query_rpc_tracker``) and its client
(``tvm.rpc.connect_tracker``) work against it, and bocast's servers and runner work against
TVM's tracker. It exists because TVM's tracker needs tornado, which neither the apache-tvm 0.27
wheel's dependencies nor the GPU machine's bundle carry; this one needs only the standard
library (and does not import TVM, so a tracker host needs no TVM at all).

Scheduling is TVM's: per key, the highest-priority request gets the server that has waited
longest; a server's registration ("offer") is consumed by a match, and the server offers itself
again when its session ends. A server whose connection to the tracker closes (it died) is
withdrawn at once, so a dead server is never handed out.

With a shared token (:mod:`bocast.measure.rpc.auth`) every connection proves it after the magic
(the tracker answers :data:`~bocast.measure.rpc.protocol.AUTH_MAGIC` instead of the magic, then
a nonce exchange), so only token holders register servers, request them or read the summary;
TVM's own tools, which know no token, then cannot use this tracker. Without a token it listens
only on loopback.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import select
import socket
import struct
import threading
from dataclasses import dataclass, field
from typing import Any

from bocast.measure.rpc import auth
from bocast.measure.rpc.protocol import (
    FAIL,
    PENDING,
    PING,
    PUT,
    REQUEST,
    STOP,
    SUCCESS,
    SUMMARY,
    TRACKER_MAGIC,
    UPDATE_INFO,
    TrackerError,
    _challenge,
    recv_exact,
    recv_msg,
    send_msg,
)

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

    #: connections held at once (a thread each): a fleet is a few servers and clients; past
    #: it a new connection is closed at once, so idle peers cannot exhaust the host's threads
    MAX_CONNECTIONS = 128
    #: seconds a peer has for its magic (and the token's proof), then for its first command:
    #: a client or server sends one at once; a peer that does not speak is dropped
    HANDSHAKE_S = 30.0

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
        self._slots = threading.BoundedSemaphore(self.MAX_CONNECTIONS)

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
            if not self._slots.acquire(blocking=False):  # full: this one is not served
                sock.close()
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
            sock.settimeout(self.HANDSHAKE_S)  # a peer that never sends its magic
            if struct.unpack("<i", recv_exact(sock, 4))[0] != TRACKER_MAGIC:
                return
            if self.token is None:
                sock.sendall(struct.pack("<i", TRACKER_MAGIC))
            elif not _challenge(sock, self.token):
                return  # closed before any command: nothing registered, nothing handed out
            sock.settimeout(self.HANDSHAKE_S)  # its first command, now
            first = recv_msg(sock)
            sock.settimeout(None)  # then idle is legitimate: a request waits, a server stays
            with self._lock:
                self._conns.add(conn)
            if not self._command(conn, first):
                return
            while not self._stopped.is_set():
                if not self._command(conn, recv_msg(sock)):
                    return
        except (OSError, ConnectionError, ValueError, struct.error):
            return
        finally:
            self._drop(conn)  # closes the socket
            self._slots.release()

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
