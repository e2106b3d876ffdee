"""Shared fixtures."""

import contextlib
import io

import pytest


@pytest.fixture
def bocast_cli():
    """Run ``bocast`` in this process: (exit code, stdout, stderr). Far cheaper than a
    subprocess (no interpreter start, no second import of torch and TVM) for commands that end
    before any work, such as every bad input."""
    from bocast import cli

    def run(*argv: str) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = cli.main(list(argv))
            except SystemExit as e:  # argparse
                code = e.code if isinstance(e.code, int) else 2
        return code, out.getvalue(), err.getvalue()

    return run


@pytest.fixture(autouse=True)
def records_library(tmp_path_factory, monkeypatch):
    """Every test's records library is a folder of its own (bocast.library), never the
    user's cache: a live run adds its store there, and ``warm_start: auto`` reads it."""
    folder = tmp_path_factory.mktemp("records")
    monkeypatch.setenv("BOCAST_RECORDS", str(folder))
    return folder
