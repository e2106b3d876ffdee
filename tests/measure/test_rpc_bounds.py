"""The tracker bounds what idle peers can hold (issue 42's audit): a peer that sends the magic
and then nothing is dropped after HANDSHAKE_S, and past MAX_CONNECTIONS a new connection is
closed at once, so the tracker still answers its fleet. Loopback only, a second or two."""

import socket
import struct
import time

from bocast.measure import rpc_protocol as proto
from bocast.measure.rpc_tracker import Tracker


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
