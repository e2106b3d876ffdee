"""Shared fixtures."""

import contextlib
import io
import os

import pytest

from tests import background

# torch's OpenMP threads (libgomp) wait for work by spinning: on a 2-core machine shared with
# other jobs, a torch-heavy test ran 3x slower than on its own (tests/bo/test_pieces.py: 27-30 s
# beside one busy process, 8.4 s alone) as its two threads spun for each other's core.
# Passive waiting changes no result, only how an idle thread waits (9.0-11 s beside one busy
# process; on an idle machine it costs a little: 10.0-11.2 s against 8.4 s). Set before anything
# loads torch; the commands the tests start inherit it. (Importing bocast sets the same default,
# bocast/__init__.py; this is for the test modules that load torch before they import bocast.)
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


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
    """Every test's records library is a folder of its own (bocast.records.library), never the
    user's cache: a live run adds its store there, and ``warm_start: auto`` reads it."""
    folder = tmp_path_factory.mktemp("records")
    monkeypatch.setenv("BOCAST_RECORDS", str(folder))
    return folder


@pytest.fixture(autouse=True)
def build_cache_folder(tmp_path_factory, monkeypatch):
    """Every test's build cache is a folder of its own (bocast.measure.build_cache), never the
    user's: a test that counts or times builds must find none made by another test."""
    folder = tmp_path_factory.mktemp("builds")
    monkeypatch.setenv("BOCAST_BUILD_CACHE", str(folder))
    return folder


def pytest_configure(config):
    config.addinivalue_line("markers", "background(name): the test reads the result of "
                            "tests/background.py's job `name`, started when collection ends")


def pytest_collection_modifyitems(items):
    """The tests that read a background job (tests/background.py) run last, in their order:
    the jobs then run beside every other test of the run, not only the ones collected before
    them (in the slow run the readers came early and waited 2-3 minutes in all). Under
    pytest-xdist they run first instead: a worker starts a job when its test asks for it and
    waits, its core left to the job while the other workers go on, so the longest waits
    should begin first, not last."""
    readers = [i for i in items if any(i.iter_markers("background"))]
    others = [i for i in items if not any(i.iter_markers("background"))]
    items[:] = readers + others if background.IN_WORKER else others + readers


def pytest_collection_finish(session):
    """Start the background jobs (tests/background.py) that the selected tests read."""
    if session.config.option.collectonly or background.IN_WORKER:
        return  # a pytest-xdist worker starts a job when its test asks (background.result)
    wanted: list[str] = []  # in the order the tests will read them
    for item in session.items:
        for m in item.iter_markers("background"):
            if m.args[0] not in wanted:
                wanted.append(m.args[0])
    background.start_in_turn(wanted)


def pytest_sessionfinish(session):
    background.stop_all()
