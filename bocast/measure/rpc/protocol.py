"""The wire protocol of TVM's RPC tracker (``tvm.rpc.tracker``: a 4-byte magic, then
length-prefixed JSON commands PUT, REQUEST, UPDATE_INFO, SUMMARY, GET_PENDING_MATCHKEYS, PING,
STOP) and its client calls: connect, the tracker's summary, the servers under a key, a pending
request for a server. The tracker (:mod:`bocast.measure.rpc.tracker`), the GPU servers and the
runner all speak it through here.

With a shared token (:mod:`bocast.measure.rpc.auth`) every connection proves it after the magic
(the tracker answers :data:`AUTH_MAGIC` instead of the magic, then a nonce exchange:
:func:`_prove_to_tracker` on the peer's side, :func:`_challenge` on the tracker's).
"""

from __future__ import annotations

import json
import select
import socket
import struct
import time
from typing import Any

from bocast.measure.rpc import auth

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
