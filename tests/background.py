"""Independent subprocess work started when collection ends, beside the tests that run first.

A few tests only read what one fresh process did: a MetaSchedule search, an import-order check
of TVM's intrinsic set (about 30 s of CPU each, most of it importing that set). The test run
itself keeps about one of a 2-core machine's cores busy, so such a process costs its wall time
when the test waits for it inline, and little when it runs on the other core meanwhile.

A module registers a job at import (:func:`job`) and marks the tests that read it
``@pytest.mark.background("name")``; ``tests/conftest.py`` runs those tests last (after every
other test of the run, so the jobs have the whole run beside them) and, once collection ends,
starts the jobs of the selected tests one after another, in the order the tests read them (none
when no test reading it is selected), and stops any left when the session ends. While a test
waits for a job, its process leaves a core idle: one more job runs then. :func:`result` waits for a
job and returns what the process returned, as ``subprocess.run`` would have; the test asserts
on it as before.

Under pytest-xdist (``-n 2``, the README's command) every worker collects every test, so none
starts jobs ahead: a test starts its job when it asks for it and waits, its core left to the
job while the other worker goes on, and the tests that read jobs run first (tests/conftest.py).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
from dataclasses import dataclass, field

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: a pytest-xdist worker: every worker collects every test, so none starts jobs ahead
IN_WORKER = "PYTEST_XDIST_WORKER" in os.environ


@dataclass
class Job:
    argv: list[str]  # "{out}" in an argument is replaced by the job's own empty folder
    timeout_s: float
    cwd: str = ROOT
    out: str = ""
    proc: subprocess.Popen | None = None
    done: subprocess.CompletedProcess | None = None
    files: list = field(default_factory=list)


JOBS: dict[str, Job] = {}
_lock = threading.Condition()
_stopped = False
_waiting = 0  # tests blocked in result(): each leaves its core to one more job


def job(name: str, argv: list[str], *, timeout_s: float, cwd: str = ROOT) -> str:
    """Register ``argv`` (run in ``cwd``) as background job ``name``; returns the name."""
    if name in JOBS and JOBS[name].argv != argv:
        raise ValueError(f"background job {name!r} registered twice with different commands")
    JOBS.setdefault(name, Job(argv, timeout_s, cwd))
    return name


def start_in_turn(names: list[str]) -> None:
    """Start the jobs one after another, each when the one before has ended (in a thread of
    this process), so that one job at a time takes the core the tests leave idle; several at
    once would only share it, and the first test to wait for one would wait longer. While
    tests wait in :func:`result` (their process idle), one more job runs for each."""
    def go():
        for name in names:
            with _lock:
                while not _stopped and _running() >= 1 + _waiting:
                    _lock.wait(timeout=0.2)  # a job's end is not notified: polled
                if _stopped:  # the session ended
                    return
                _start(name)

    threading.Thread(target=go, name="background-jobs", daemon=True).start()


def _running() -> int:
    return sum(j.proc is not None and j.proc.poll() is None for j in JOBS.values())


def start(name: str) -> None:
    with _lock:
        _start(name)


def _start(name: str) -> None:
    j = JOBS[name]
    if j.proc is not None or _stopped:
        return
    j.out = tempfile.mkdtemp(prefix=f"bocast-bg-{name}-")
    records = os.path.join(j.out, "records")  # never the user's records library
    os.mkdir(records)
    env = {**os.environ, "BOCAST_RECORDS": records}
    stdout = open(os.path.join(j.out, "stdout"), "w")  # noqa: SIM115 - closed in result/stop_all
    stderr = open(os.path.join(j.out, "stderr"), "w")  # noqa: SIM115
    j.files = [stdout, stderr]
    j.proc = subprocess.Popen([a.replace("{out}", j.out) for a in j.argv], cwd=j.cwd, env=env,
                              stdout=stdout, stderr=stderr, text=True, start_new_session=True)


def result(name: str) -> tuple[subprocess.CompletedProcess, str]:
    """Wait for job ``name`` (starting it now if not started yet); returns the completed
    process (``stdout``, ``stderr`` as text) and its output folder. Past its timeout the
    process is killed and ``subprocess.TimeoutExpired`` raised, as ``subprocess.run`` does."""
    global _waiting
    j = JOBS[name]
    if j.done is None:
        start(name)
        assert j.proc is not None
        with _lock:
            _waiting += 1
            _lock.notify_all()
        try:
            j.proc.wait(timeout=j.timeout_s)
        except subprocess.TimeoutExpired:
            _kill(j)
            raise
        finally:
            with _lock:
                _waiting -= 1
        for f in j.files:
            f.close()
        with open(os.path.join(j.out, "stdout")) as o, open(os.path.join(j.out, "stderr")) as e:
            j.done = subprocess.CompletedProcess(j.proc.args, j.proc.returncode, o.read(),
                                                 e.read())
    return j.done, j.out


def _kill(j: Job) -> None:
    if j.proc is not None and j.proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(j.proc.pid, signal.SIGKILL)
        j.proc.wait()


def stop_all() -> None:
    """End the jobs still running (their tests deselected or failed before reading them) and
    remove every job's folder."""
    global _stopped
    with _lock:
        _stopped = True
    for j in JOBS.values():
        _kill(j)
        for f in j.files:
            f.close()
        if j.out:
            shutil.rmtree(j.out, ignore_errors=True)
