"""The RPC fleet with a shared token, on 127.0.0.1: an authenticated fleet measures as the open
one does; clients and servers without the token, with another token, or not the one the
tracker granted, are refused (bocast.measure.rpc.auth)."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import struct
import threading
import time

import pytest

from bocast.measure.rpc import auth
from bocast.measure.rpc import protocol as proto
from bocast.measure.rpc import tracker as trk
from bocast.measure.rpc.runner import RpcRunner, RpcUnavailable
from bocast.measure.standin import StandinRunner
from bocast.records.status import Status
from tests.measure.test_rpc import OP, Cluster, builds, servers_of

KEY = "authed"
TOKEN = "t0ken-" + "7" * 32
OTHER = "other-" + "7" * 32
SERVERS = 2


def token_file(folder, token: str, mode: int = 0o600) -> str:
    path = os.path.join(folder, f"token-{mode:o}-{token[:5]}")
    with open(path, "w") as f:
        f.write(token + "\n")
    os.chmod(path, mode)
    return path


@pytest.fixture(scope="module")
def fleet(tmp_path_factory, monkeypatch_module):
    folder = str(tmp_path_factory.mktemp("fleet"))
    f = Cluster(key=KEY, gpus="0,1", sleep_s=0.05, token=TOKEN,
                token_file=token_file(folder, TOKEN), server_wait_s=30.0)
    try:
        f.wait_free()
        yield f
    finally:
        f.close()


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv(auth.TOKEN_ENV, raising=False)  # the tests say which token each peer has
        yield mp


# ------------------------------------------------------------------------- no processes


def test_token_sources_and_what_needs_one(tmp_path, monkeypatch):
    monkeypatch.delenv(auth.TOKEN_ENV, raising=False)
    assert auth.load_token(None) is None
    assert auth.load_token(token_file(str(tmp_path), TOKEN)) == TOKEN
    monkeypatch.setenv(auth.TOKEN_ENV, OTHER)
    assert auth.load_token(None) == OTHER
    with pytest.raises(auth.AuthError, match="chmod 600"):
        auth.load_token(token_file(str(tmp_path), TOKEN, 0o644))
    with pytest.raises(auth.AuthError, match="at least 16"):
        auth.load_token(token_file(str(tmp_path), "short"))
    with pytest.raises(auth.AuthError, match="no-such-file"):
        auth.load_token(str(tmp_path / "no-such-file"))
    assert auth.is_loopback("127.0.0.1") and auth.is_loopback("localhost")
    assert not auth.is_loopback("0.0.0.0") and not auth.is_loopback("nohost.invalid")
    auth.require(None, {"tracker": "127.0.0.1"})
    auth.require(TOKEN, {"tracker": "0.0.0.0"})
    with pytest.raises(auth.AuthError, match="0.0.0.0 is not loopback"):
        auth.require(None, {"tracker": "127.0.0.1", "host": "0.0.0.0"})
    with pytest.raises(auth.AuthError, match="not loopback"):
        trk.Tracker("0.0.0.0", 0, 1)
    monkeypatch.delenv(auth.TOKEN_ENV)
    with pytest.raises(RpcUnavailable, match="not loopback"):
        RpcRunner("192.0.2.1:9190", KEY)


def test_session_proofs_are_bound_to_the_token_the_matchkey_and_the_nonce():
    word, nonce = auth.session_word(TOKEN, "k:abc")
    assert auth.check_session_word(TOKEN, "k:abc", ["client:k:abc", word]) == nonce
    assert auth.check_session_word(OTHER, "k:abc", ["client:k:abc", word]) is None
    assert auth.check_session_word(TOKEN, "k:abd", ["client:k:abc", word]) is None  # replayed
    assert auth.check_session_word(TOKEN, "k:abc", ["client:k:abc"]) is None
    proof = auth.server_proof(TOKEN, "k:abc", nonce)
    assert auth.server_proved(TOKEN, proof, "k:abc", nonce)
    assert not auth.server_proved(TOKEN, proof, "k:abc", auth.nonce())
    assert not auth.server_proved(OTHER, proof, "k:abc", nonce)
    assert not auth.server_proved(TOKEN, None, "k:abc", nonce)
    # a client's proof is never a server's (roles are part of the MAC)
    assert not auth.server_proved(TOKEN, word.split(".")[1], "k:abc", nonce)


# --------------------------------------------------------- a tracker and two servers


def test_authenticated_fleet_measures_what_the_local_runner_does(fleet):
    fleet.wait_free()
    runner = fleet.runner()
    assert len(runner.device()["servers"]) == SERVERS
    bs = builds(16, "authed")
    results = runner.run(OP, bs)
    assert all(r.status is Status.OK for r in results) and not runner.refused
    assert set(servers_of(results)) == {"0", "1"}
    with StandinRunner(timeout_s=5) as local:
        expected = local.run(OP, bs)
    assert [r.latency_ms for r in results] == [r.latency_ms for r in expected]


def test_clients_without_the_token_are_refused(fleet, tmp_path):
    fleet.wait_free()
    addr = fleet.tracker.addr
    with pytest.raises(proto.TrackerAuthError, match="requires the fleet's token"):
        proto.summary(addr)
    with pytest.raises(proto.TrackerAuthError, match="refused this side's token"):
        proto.summary(addr, token=OTHER)
    # a raw peer that skips the proof and asks for a server is cut off before any command
    with socket.create_connection(addr, timeout=10) as s:
        s.sendall(struct.pack("<i", proto.TRACKER_MAGIC))
        assert struct.unpack("<i", proto.recv_exact(s, 4))[0] == proto.AUTH_MAGIC
        proto.recv_msg(s)  # the tracker's nonce
        proto.send_msg(s, [proto.REQUEST, KEY, "", 1])
        with pytest.raises(ConnectionError):
            proto.recv_msg(s)
    # TVM's own client knows no token: refused at the magic
    from tvm import rpc

    with pytest.raises(Exception):  # noqa: B017 - TVM raises RuntimeError or a TVMError
        rpc.connect_tracker(*addr).request(KEY, session_timeout=5)
    t0 = time.monotonic()
    with pytest.raises(RpcUnavailable, match="requires the fleet's token"):
        RpcRunner(addr, KEY, server_wait_s=30, log=lambda m: None).run(OP, builds(2, "anon"))
    with pytest.raises(RpcUnavailable, match="refused this side's token"):
        RpcRunner(addr, KEY, server_wait_s=30, log=lambda m: None,
                  token_file=token_file(str(tmp_path), OTHER)).run(OP, builds(2, "other"))
    assert time.monotonic() - t0 < 10  # refused at once, not after server_wait_s
    assert fleet.wait_free(timeout_s=30)  # nothing was handed out


def test_a_granted_matchkey_alone_opens_no_session(fleet):
    """A client that learnt a matchkey (the tracker's grant, seen on the wire) but has no token
    cannot open the session: the server wants the token's proof for that matchkey."""
    from tvm import rpc

    fleet.wait_free()
    for word in ("", auth.session_word(OTHER, "x")[0]):
        req = proto.Request(fleet.tracker.addr, KEY, token=TOKEN)
        try:
            got = None
            for _ in range(50):
                got = got or req.poll(0.2)
            assert got is not None
        finally:
            req.close()
        host, port, matchkey = got
        with pytest.raises(Exception, match="(?i)mismatch|key"):  # TVM: the server refused
            rpc.connect(host, port, key=f"{matchkey} {word}".strip())
    fleet.wait_free(timeout_s=60)  # the unused matches are offered again


def test_fake_servers_are_refused(fleet, tmp_path):
    """A fake server without the token cannot register; one that holds a registration it
    should not (another process took a real server's port) cannot prove the session, and the
    runner takes none of its (made-up, 0.001 ms) timings."""
    fleet.wait_free()
    addr = fleet.tracker.addr
    for token in (None, OTHER):
        with pytest.raises(proto.TrackerAuthError):
            proto.connect(addr, token=token)
    with socket.create_connection(addr, timeout=10) as s:  # skips the proof, PUTs at once
        s.sendall(struct.pack("<i", proto.TRACKER_MAGIC))
        proto.recv_exact(s, 4)
        proto.recv_msg(s)
        proto.send_msg(s, [proto.PUT, KEY, [1, KEY + ":fake"], "127.0.0.1"])
        with pytest.raises(ConnectionError):
            proto.recv_msg(s)
    assert len(fleet.servers()) == SERVERS
    assert proto.summary(addr, token=TOKEN)["queue_info"][KEY]["free"] == SERVERS

    rogue = _RogueServer()
    link = proto.connect(addr, token=TOKEN)  # the registration the rogue should not have
    try:
        proto.send_msg(link, [proto.PUT, KEY, [rogue.port, KEY + ":rogue"], "127.0.0.1"])
        assert proto.recv_msg(link) == proto.SUCCESS
        runner = fleet.runner(sessions=SERVERS + 1)
        results = runner.run(OP, builds(12, "rogue"))
        assert rogue.sessions >= 1  # it was handed out, and connected to
        assert any("did not prove" in why for why in runner.refused.values())
        assert all(r.status is Status.OK and r.latency_ms != 0.001 for r in results)
        assert set(servers_of(results)) <= {"0", "1"}
    finally:
        link.close()
        rogue.close()


class _RogueServer:
    """Accepts any TVM session and answers ``bocast.rpc.info`` with a made-up proof and
    ``bocast.rpc.run`` with made-up timings, from this process (TVM's session loop)."""

    def __init__(self):
        import tvm_ffi

        self.sessions = 0
        info = {"protocol": 1, "host": "rogue", "port": 0, "gpu_index": "9",
                "device": {"gpu": "stand-in (no GPU; synthetic timings)"},
                "auth": auth.mac(OTHER, "server")}
        tvm_ffi.register_global_func("bocast.rpc.info", lambda: json.dumps(info), override=True)
        tvm_ffi.register_global_func(
            "bocast.rpc.run", lambda task, cubin, t: json.dumps(
                {"key": json.loads(task)["key"], "status": "ok", "latency_ms": 0.001}),
            override=True)
        self.listen = socket.socket()
        self.listen.bind(("127.0.0.1", 0))
        self.listen.listen(4)
        self.listen.settimeout(0.5)
        self.port = self.listen.getsockname()[1]
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        from tvm.rpc import _ffi_api

        while not self.stopped.is_set():
            try:
                conn, _ = self.listen.accept()
            except OSError:
                continue
            conn.settimeout(10)
            proto.recv_exact(conn, 4)
            (n,) = struct.unpack("<i", proto.recv_exact(conn, 4))
            proto.recv_exact(conn, n)  # whatever key and proof: accepted
            reply = b"server:" + KEY.encode()
            conn.sendall(struct.pack("<ii", proto.RPC_CODE_SUCCESS, len(reply)) + reply)
            conn.settimeout(None)
            self.sessions += 1
            with contextlib.suppress(Exception):  # the client closing is the session's end
                _ffi_api.ServerLoop(conn.detach())

    def close(self) -> None:
        self.stopped.set()
        self.listen.close()
        self.thread.join(30)
