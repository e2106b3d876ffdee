"""The handshakes of a GPU server (:mod:`bocast.measure.rpc.service`): every connection to its
port is handshaken in a thread of its own, within :data:`HANDSHAKE_S`, at most
:data:`MAX_HANDSHAKES` at once, so that no peer, silent or slow, keeps the next one waiting
(issue 42: 8 idle connections, handshaken one at a time with 10 s each, kept a granted client
out of the server for a whole batch). A connection that proves the server's current matchkey
(and, with a token, the token) claims it (``link.claim``, once per matchkey) and is handed to
the session thread.
"""

from __future__ import annotations

import contextlib
import queue
import socket
import struct
import threading
import time
from typing import Any

from bocast.measure.rpc import auth
from bocast.measure.rpc import protocol as proto

#: seconds a peer has for its whole handshake: TVM's client sends it at once on connecting, so
#: a peer still silent after this is not a client (issue 42: idle connections held the server)
HANDSHAKE_S = 5.0
#: connections in their handshake at once (a thread each); a new one past them drops the
#: oldest, so idle peers can neither exhaust the host's threads nor keep a client out
MAX_HANDSHAKES = 64


def _recv_by(conn: socket.socket, n: int, deadline: float) -> bytes:
    """``n`` bytes, all of them before ``deadline`` (a peer sending a byte now and then
    is still dropped): TimeoutError past it, ConnectionError if the peer closes."""
    buf = bytearray()
    while len(buf) < n:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("handshake too slow")
        conn.settimeout(left)
        chunk = conn.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("peer closed the connection")
        buf += chunk
    return bytes(buf)


def _hello(conn: socket.socket, deadline: float) -> list[str] | None:
    """The words of TVM's RPC handshake (magic, then ``client:<matchkey>`` and, with a token,
    the client's proof), or None if the peer speaks another protocol."""
    if struct.unpack("<i", _recv_by(conn, 4, deadline))[0] != proto.RPC_MAGIC:
        return None
    (n,) = struct.unpack("<i", _recv_by(conn, 4, deadline))
    if not 0 < n < 4096:
        return None
    return _recv_by(conn, n, deadline).decode(errors="replace").split()


def _handshake(conn: socket.socket, words: list[str], link: Any, idle_s: float,
               token: str | None = None) -> tuple[str, str] | None:
    """TVM's RPC handshake, answered: the client sent ``client:<matchkey>``, the server answers
    with its own key; a stale, foreign or already used matchkey is refused, and with ``token``
    so is a client that does not prove it for this matchkey. Returns (the matchkey, the
    client's nonce ('' without a token)), or None if refused."""
    matchkey = link.matchkey
    try:
        if not words or matchkey is None or words[0] != "client:" + matchkey:
            conn.sendall(struct.pack("<i", proto.RPC_CODE_MISMATCH))
            return None
        client_nonce = "" if token is None else auth.check_session_word(token, matchkey, words)
        # claimed only once proved: a peer without the token cannot use up the matchkey
        if client_nonce is None or not link.claim(matchkey):
            conn.sendall(struct.pack("<i", proto.RPC_CODE_MISMATCH))
            return None
    except (OSError, ConnectionError, struct.error):
        return None
    # claimed: from here the session is this connection's, even if it broke meanwhile (its
    # session then ends at once and the server offers a new matchkey after it)
    with contextlib.suppress(OSError):
        reply = ("server:" + link.key).encode()
        conn.sendall(struct.pack("<ii", proto.RPC_CODE_SUCCESS, len(reply)) + reply)
        conn.settimeout(None)
        # a client that stops calling (stopped, or its host gone) frees the server after
        # idle_s: the session loop's receive fails and the session ends
        sec = int(idle_s)
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO,
                        struct.pack("ll", sec, int((idle_s - sec) * 1e6)))
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        for opt, value in (("TCP_KEEPIDLE", 60), ("TCP_KEEPINTVL", 10), ("TCP_KEEPCNT", 6)):
            if hasattr(socket, opt):  # a client host that vanished ends the session in ~2 min
                conn.setsockopt(socket.IPPROTO_TCP, getattr(socket, opt), value)
    return matchkey, client_nonce


class Handshakes:
    """Accepts connections and handshakes each in its own thread, so that no peer, silent or
    slow, delays the next (issue 42: 8 idle connections, handshaken one at a time, kept a
    granted client out for minutes). At most :data:`MAX_HANDSHAKES` at once, each within
    :data:`HANDSHAKE_S`; a connection that proves its matchkey is put on :attr:`ready` for the
    session thread."""

    def __init__(self, listen: socket.socket, link: Any, idle_s: float,
                 token: str | None, stop: threading.Event):
        self.listen, self.link, self.idle_s, self.token, self.stop = \
            listen, link, idle_s, token, stop
        self.ready: queue.Queue[tuple[socket.socket, str, str, str]] = queue.Queue()
        self._lock = threading.Lock()
        self._pending: dict[socket.socket, None] = {}  # oldest first

    def start(self) -> None:
        threading.Thread(target=self._accept, name="rpc-accept", daemon=True).start()

    def _accept(self) -> None:
        self.listen.settimeout(0.5)  # to see stop; accepted connections are still blocking
        while not self.stop.is_set():
            try:
                conn, peer = self.listen.accept()
            except TimeoutError:
                continue
            except OSError:  # closed (stopping), or out of file descriptors for a moment
                if self.stop.wait(0.1):
                    return
                continue
            with self._lock:
                if len(self._pending) >= MAX_HANDSHAKES:  # the oldest has had the most time
                    oldest = next(iter(self._pending))
                    del self._pending[oldest]
                    with contextlib.suppress(OSError):
                        oldest.shutdown(socket.SHUT_RDWR)  # its thread's receive ends
                self._pending[conn] = None
            threading.Thread(target=self._one, args=(conn, peer[0]), daemon=True).start()

    def _one(self, conn: socket.socket, peer: str) -> None:
        try:
            words = _hello(conn, time.monotonic() + HANDSHAKE_S)
        except (OSError, ConnectionError, struct.error):
            words = None
        with self._lock:  # past here it cannot be dropped as the oldest
            current = conn in self._pending  # not dropped as the oldest meanwhile
            self._pending.pop(conn, None)
        got = None
        if words is not None and current:
            got = _handshake(conn, words, self.link, self.idle_s, self.token)
        if got is None:
            conn.close()
            return
        self.ready.put((conn, peer, *got))
