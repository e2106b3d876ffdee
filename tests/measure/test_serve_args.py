"""`bocast serve` refuses bad arguments in one line, exit 2, before it binds or starts anything."""

from __future__ import annotations

import os
import socket
import subprocess
import time

import pytest

from bocast import cli
from bocast.measure.rpc import auth
from bocast.measure.rpc import server as rpc_server

K = ["--key", "k"]
CASES = [  # (arguments of `bocast serve`, what the error line names)
    (K + ["--port", "-1"], "--port: '-1': expected a port"),
    (K + ["--port", "70000"], "--port: '70000'"),
    (K + ["--port", "65535", "--gpus", "0,1"], "past 65535"),
    (K + ["--port-end", "0"], "--port-end"),
    (K + ["--tracker-port", "65536"], "--tracker-port"),
    (K + ["--worker", "bogus"], "--worker: 'bogus': expected gpu, standin"),
    (K + ["--worker", "no_such_module_xyz:run"], "--worker"),
    (K + ["--gpus", "x,y"], "--gpus: 'x,y'"),
    (K + ["--gpus", "0,0"], "listed twice"),
    (K + ["--gpus", ""], "--gpus"),
    (K + ["--tracker", "nohost.invalid"], "'nohost.invalid' does not resolve"),
    (K + ["--tracker", "127.0.0.1:0"], "--tracker"),
    (K + ["--tracker", "127.0.0.1:x"], "HOST:PORT"),
    (K + ["--session-idle", "-5"], "--session-idle: '-5'"),
    (K + ["--session-idle", "nan"], "--session-idle"),
    (K + ["--startup-timeout", "0"], "--startup-timeout"),
    (K + ["--build-workers", "-1"], "--build-workers: '-1': expected a number of build"),
    (K + ["--build-workers", "many"], "--build-workers: 'many'"),
    (K + ["--host", "nohost.invalid"], "--host: 'nohost.invalid'"),
    (K + ["--tracker-host", "nohost.invalid"], "--tracker-host"),
    (["--key", ""], "--key"),
    (["--key", "a b"], "--key"),
    ([], "--key"),
    (K + ["--no-such-option"], "unrecognized"),
    # no token: anything but loopback is refused
    (K + ["--host", "0.0.0.0"], "--host 0.0.0.0 is not loopback"),
    (K + ["--tracker-host", "0.0.0.0"], "--tracker-host 0.0.0.0 is not loopback"),
    (K + ["--custom-addr", "192.0.2.7"], "--custom-addr 192.0.2.7 is not loopback"),
    (K + ["--tracker", "192.0.2.7:9190"], "--tracker 192.0.2.7 is not loopback"),
    (K + ["--token-file", "/no/such/token"], "token file /no/such/token"),
    (["tracker", "--port", "70000"], "tracker: error: argument --port"),
    (["tracker", "--port-end", "70000"], "--port-end"),
    (["tracker", "--host", "0.0.0.0"], "not loopback"),
    (["tracker", "--host", "nohost.invalid"], "--host"),
]


@pytest.fixture
def nothing_starts(monkeypatch):
    """Binding a socket or starting a process fails the test; so does reaching the command."""
    def refuse(*a, **k):
        raise AssertionError("bound or started before the arguments were checked")

    monkeypatch.setattr(socket.socket, "bind", refuse)
    monkeypatch.setattr(subprocess, "Popen", refuse)
    monkeypatch.setattr(rpc_server, "serve", refuse)
    monkeypatch.setattr(rpc_server, "run_tracker", refuse)
    monkeypatch.delenv(auth.TOKEN_ENV, raising=False)


@pytest.mark.parametrize("argv,named", CASES, ids=[" ".join(c[0]) or "none" for c in CASES])
def test_bad_serve_arguments_are_one_line_exit_2(argv, named, nothing_starts, capsys):
    t0 = time.monotonic()
    with pytest.raises(SystemExit) as e:
        cli.main(["serve", *argv])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("bocast serve"), err
    assert ": error: " in err and named in err, err
    assert time.monotonic() - t0 < 1.0


def test_other_addresses_are_served_with_a_token_and_a_warning(tmp_path, monkeypatch, capsys):
    seen = []
    monkeypatch.setattr(rpc_server, "serve", lambda args: seen.append(args) or 0)
    monkeypatch.setattr(rpc_server, "run_tracker", lambda args: seen.append(args) or 0)
    monkeypatch.delenv(auth.TOKEN_ENV, raising=False)
    token = tmp_path / "token"
    token.write_text("s3cret-" + "x" * 20)
    os.chmod(token, 0o600)
    assert cli.main(["serve", "--key", "k", "--host", "0.0.0.0", "--tracker-host", "0.0.0.0",
                     "--gpus", "0,1", "--token-file", str(token)]) == 0
    assert seen[-1].token == "s3cret-" + "x" * 20 and seen[-1].gpu_list == ["0", "1"]
    err = capsys.readouterr().err
    assert "warning: --host 0.0.0.0 is not loopback" in err and "--tracker-host" in err
    monkeypatch.setenv(auth.TOKEN_ENV, "from-the-env-" + "y" * 10)
    assert cli.main(["serve", "tracker", "--host", "0.0.0.0"]) == 0
    assert seen[-1].token == "from-the-env-" + "y" * 10
    assert "warning: --host 0.0.0.0 is not loopback" in capsys.readouterr().err
    # loopback needs no token, and the defaults are loopback
    monkeypatch.delenv(auth.TOKEN_ENV)
    assert cli.main(["serve", "--key", "k"]) == 0
    assert seen[-1].token is None and seen[-1].host == "127.0.0.1"
    assert seen[-1].tracker_host == "127.0.0.1" and "warning" not in capsys.readouterr().err
