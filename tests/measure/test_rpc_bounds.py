"""The tracker bounds what idle peers can hold (issue 42's audit): a peer that sends the magic
and then nothing is dropped after HANDSHAKE_S, and past MAX_CONNECTIONS a new connection is
closed at once, so the tracker still answers its fleet. Loopback only, a second or two."""

import socket
import struct
import time

from bocast.measure.rpc import protocol as proto
from bocast.measure.rpc.tracker import Tracker


def _idle_peer(addr) -> socket.socket:
    """A connection that sends the magic, reads the tracker's, and then says nothing."""
    s = socket.create_connection(addr, timeout=5)
    s.sendall(struct.pack("<i", proto.TRACKER_MAGIC))
    assert struct.unpack("<i", proto.recv_exact(s, 4))[0] == proto.TRACKER_MAGIC
    return s


def _closed(s: socket.socket, within_s: float) -> bool:
    s.settimeout(within_s)
    try:
        return s.recv(1) == b""
    except TimeoutError:
        return False
    except ConnectionError:
        return True


def test_idle_peers_are_bounded_and_dropped(monkeypatch):
    monkeypatch.setattr(Tracker, "MAX_CONNECTIONS", 3)
    monkeypatch.setattr(Tracker, "HANDSHAKE_S", 1.0)
    with Tracker("127.0.0.1", 0, 1) as tracker:
        idle = [_idle_peer(tracker.addr) for _ in range(3)]
        extra = socket.create_connection(tracker.addr, timeout=5)  # past the bound
        assert _closed(extra, 2.0)
        t0 = time.monotonic()
        assert all(_closed(s, 3.0) for s in idle)  # silent past HANDSHAKE_S: dropped
        assert time.monotonic() - t0 < 3.0
        # the slots are free again: the tracker answers a client that speaks
        assert proto.summary(tracker.addr, timeout_s=5) == {"queue_info": {}, "server_info": []}
        for s in [*idle, extra]:
            s.close()


def test_a_peer_that_speaks_at_once_then_idles_is_kept(monkeypatch):
    """A request waits as long as it takes (idle after its first command is legitimate)."""
    monkeypatch.setattr(Tracker, "HANDSHAKE_S", 0.5)
    with Tracker("127.0.0.1", 0, 1) as tracker:
        req = proto.Request(tracker.addr, "nobody")
        assert req.poll(1.5) is None  # still waiting, not dropped
        assert tracker.summary()["queue_info"]["nobody"]["pending"] == 1
        req.close()


# ------------------------------------------------------------------ a GPU server's port
# serve_sessions as a server runs it, with a stand-in for TVM's session loop (no TVM, no worker)


class _Server:
    """A GPU server's session loop on 127.0.0.1, registered with ``tracker`` under "k"; each
    session answers b"ok" and ends."""

    def __init__(self, tracker: Tracker):
        import threading
        import types

        from bocast.measure.rpc import service as svc

        self.listen = svc._bind("127.0.0.1", 0, 1)
        self.port = self.listen.getsockname()[1]
        self.link = svc._TrackerLink(tracker.addr, "k", self.port, None, {})
        self.sessions = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(
            target=svc.serve_sessions, daemon=True,
            args=(self.listen, self.link, 5.0, types.SimpleNamespace(
                token=None, session=None, end_session=lambda: "")),
            kwargs={"session": self._session, "stop": self.stop})
        self.thread.start()

    def _session(self, conn: socket.socket) -> None:
        self.sessions += 1
        conn.sendall(b"ok")

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)
        self.listen.close()
        self.link.drop()


def _session_through_tracker(tracker: Tracker, within_s: float) -> bytes:
    """What a client granted the server by the tracker gets: TVM's handshake, then the
    session's answer, all within ``within_s``."""
    req = proto.Request(tracker.addr, "k")
    try:
        got = req.poll(within_s)
    finally:
        req.close()
    assert got is not None, "the tracker handed out no server"
    host, port, matchkey = got
    s = socket.create_connection((host, port), timeout=within_s)
    try:
        word = f"client:{matchkey}".encode()
        s.sendall(struct.pack("<ii", proto.RPC_MAGIC, len(word)) + word)
        code, n = struct.unpack("<ii", proto.recv_exact(s, 8))
        assert code == proto.RPC_CODE_SUCCESS
        assert proto.recv_exact(s, n) == b"server:k"
        return proto.recv_exact(s, 2)
    finally:
        s.close()


def _silent(port: int, magic: bool) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    if magic:
        s.sendall(struct.pack("<i", proto.RPC_MAGIC))
    return s


def test_idle_peers_on_a_servers_port_do_not_keep_a_client_out(monkeypatch):
    """Issue 42: 8 idle connections, handshaken one at a time (10 s each), kept a granted
    client out for minutes. Now each is handshaken on its own: the client's session starts at
    once, and the idle peers are dropped after HANDSHAKE_S."""
    from bocast.measure.rpc import handshake as hs

    monkeypatch.setattr(hs, "HANDSHAKE_S", 1.5)
    with Tracker("127.0.0.1", 0, 1) as tracker:
        server = _Server(tracker)
        try:
            proto.wait_for_servers(tracker.addr, "k", 1, 10)
            idle = [_silent(server.port, magic=i % 2 == 0) for i in range(8)]
            t0 = time.monotonic()
            assert _session_through_tracker(tracker, 5.0) == b"ok"
            assert time.monotonic() - t0 < 1.0  # not behind the idle peers
            assert all(_closed(s, 3.0) for s in idle)  # silent past HANDSHAKE_S: dropped
            # and the server offers itself again after the session
            assert _session_through_tracker(tracker, 5.0) == b"ok"
            assert server.sessions == 2
            for s in idle:
                s.close()
        finally:
            server.close()


def test_a_flood_of_idle_peers_drops_the_oldest_not_the_client(monkeypatch):
    """Past MAX_HANDSHAKES connections in their handshake, a new one drops the oldest: no
    more threads than the bound, and a client arriving after the flood still gets in."""
    from bocast.measure.rpc import handshake as hs

    monkeypatch.setattr(hs, "MAX_HANDSHAKES", 4)
    monkeypatch.setattr(hs, "HANDSHAKE_S", 30.0)  # only the bound drops them here
    with Tracker("127.0.0.1", 0, 1) as tracker:
        server = _Server(tracker)
        try:
            proto.wait_for_servers(tracker.addr, "k", 1, 10)
            idle = [_silent(server.port, magic=True) for _ in range(10)]
            assert all(_closed(s, 3.0) for s in idle[:6])  # the oldest six, dropped
            assert not any(_closed(s, 0.2) for s in idle[6:])  # the newest four, held
            assert _session_through_tracker(tracker, 5.0) == b"ok"
            for s in idle:
                s.close()
        finally:
            server.close()
