"""SIGINT to the process group (as Ctrl-C sends it) of a replay comparison, a replay tune and a
stand-in measure (a sample, and an exhaustive table: --all), then the same command again: one
line, exit 130, nothing finished lost or measured twice, no failure recorded for an interrupted
build or run, the results written only by the call that finishes. tests/interrupt_harness.py
does this at 20 random moments each.

Each scenario (stop, look, run again) is a background job (tests/background.py): a fresh
process runs it in a folder of its own beside the other tests and returns what it saw (exit
codes, output, the stores' rows before and after); the test asserts on that. The commands were
subprocesses before too: only the process driving them moved."""

import contextlib
import json
import os
import random
import sys

import pytest
import yaml

from tests import background
from tests import interrupt_harness as INT

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = {**os.environ, "PYTHONPATH": ROOT}


def _wait_for_rows(folder, at_least, proc, proc_timeout=240):
    """Until the stores under ``folder`` hold ``at_least`` rows, or ``proc`` has exited (a
    command refused at once then fails its test in seconds, not after the timeout)."""
    import time

    deadline = time.time() + proc_timeout
    while time.time() < deadline and proc.poll() is None:
        if sum(len(r) for r in INT.stores(folder).values()) >= at_least:
            return
        time.sleep(0.2)


def scenario_replay_compare(folder):
    """Two stops inside a replay comparison's runs, at a random number of rows (BO's rounds
    take a second or more each, so the signal lands inside a run; BOCAST_FAULT_SEED varies
    them), then the uninterrupted call."""
    steps = []
    rng = random.Random(int(os.environ.get("BOCAST_FAULT_SEED", "0")))
    total = 0
    for _ in range(2):
        total += rng.randint(5, 200)
        before = INT.stores(folder)
        r = INT.run(INT.compare_command(folder), delay=None, env=ENV,
                    when=lambda: sum(map(len, INT.stores(folder).values())) >= total)  # noqa: B023 - polled within this iteration
        steps.append({"run": r, "counts": INT.check(before, INT.stores(folder)),
                      "results": os.path.exists(os.path.join(folder, "res"))})
    final = INT.run(INT.compare_command(folder), delay=None, env=ENV)
    return {"steps": steps, "final": final, "stores": INT.stores(folder),
            "results": sorted(os.listdir(os.path.join(folder, "res")))
            if os.path.isdir(os.path.join(folder, "res")) else None}


def _stop_measure(argv, folder, at_least):
    """``bocast ARGV`` with the stand-in slowed (0.3 s a run), SIGINT to its process group
    once the stores under ``folder`` hold ``at_least`` rows."""
    import signal
    import subprocess

    env = {**ENV, "BOCAST_STANDIN_SLEEP": "0.3"}
    proc = subprocess.Popen([sys.executable, "-m", "bocast.cli", *argv], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    _wait_for_rows(folder, at_least, proc)
    with contextlib.suppress(ProcessLookupError):  # exited already: asserted by the test
        os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    return {"exit": proc.returncode, "stdout": out, "stderr": err}


def scenario_standin_measure(folder):
    stopped = _stop_measure(INT.measure_command(folder, 16), folder, 3)
    before = INT.stores(folder)
    final = INT.run(INT.measure_command(folder, 16), delay=None, env=ENV)  # no sleep: not stopped
    return {"stopped": stopped, "before": before, "final": final,
            "check": INT.check(before, INT.stores(folder))}


TUNE_ROWS = 256


def scenario_sigterm_tune(folder):
    import signal
    import subprocess
    import time

    cfg = {"workload": INT.COMPARE["workload"], "dataset": INT.COMPARE["dataset"],
           "strategy": {"name": "bo", "n_init": 16, "pool_size": 256, "fit_maxiter": 20,
                        "warm_start": "none"},
           "batch_size": 16, "budget": {"trials": TUNE_ROWS}, "seed": 0, "runner": "replay",
           "output": os.path.join(folder, "out")}
    with open(os.path.join(folder, "t.yaml"), "w") as f:
        yaml.safe_dump(cfg, f)
    argv = [sys.executable, "-m", "bocast.cli", "tune", os.path.join(folder, "t.yaml"), "--json"]
    proc = subprocess.Popen(argv, cwd=ROOT, env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    _wait_for_rows(folder, 33, proc)
    time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)  # to the command alone, as a scheduler would
    out, err = proc.communicate(timeout=120)
    stopped = {"exit": proc.returncode, "stdout": out, "stderr": err,
               "summary": os.path.exists(os.path.join(folder, "out", "summary.json"))}
    before = INT.stores(folder)
    # the whole run can take ~1 s on an idle machine: the signal may then come after the last
    # trial, while the process exits (its handler already restored: -SIGTERM, nothing lost)
    if proc.returncode in (0, -signal.SIGTERM) and len(before["out/records.db"]) == TUNE_ROWS:
        return {"stopped": stopped, "finished_first": True}
    again = subprocess.run(argv, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=600)
    return {"stopped": stopped, "finished_first": False, "before": before,
            "again": {"exit": again.returncode, "stderr": again.stderr},
            "after": INT.stores(folder)}


MEASURE_ALL = ["measure", "gemm", "--shape", "64,64,64", "--space", "v2", "--all",
               *[a for f in ["async_copy=on", "vec=8", "unroll=0", "raster=1",
                             "writeback=direct", "frag_pipeline=off", "smem_layout=pad8",
                             "instr=mma", "stages=2", "tile_k=2,2"] for a in ("--fix", f)],
               "--runner", "standin", "--batch", "4", "--workers", "2", "--json"]


def scenario_measure_all(folder):
    import subprocess

    argv = [*MEASURE_ALL, "--store", os.path.join(folder, "t.db")]
    stopped = _stop_measure(argv, folder, 3)
    before = INT.stores(folder)
    final = subprocess.run([sys.executable, "-m", "bocast.cli", *argv], cwd=ROOT, env=ENV,
                           capture_output=True, text=True, timeout=300)  # no sleep: not stopped
    return {"stopped": stopped, "before": before,
            "final": {"exit": final.returncode, "stdout": final.stdout, "stderr": final.stderr},
            "check": INT.check(before, INT.stores(folder))}


SCENARIOS = {"replay_compare": scenario_replay_compare, "standin_measure": scenario_standin_measure,
             "sigterm_tune": scenario_sigterm_tune, "measure_all": scenario_measure_all}
_JOB = ("import json, os, sys\n"
        "from tests.test_interrupts import SCENARIOS\n"
        "folder = os.path.join(sys.argv[2], 'work')\n"  # not the job's records library
        "os.mkdir(folder)\n"
        "seen = SCENARIOS[sys.argv[1]](folder)\n"
        "with open(os.path.join(sys.argv[2], 'seen.json'), 'w') as f:\n"
        "    json.dump(seen, f)\n")
JOBS = {name: background.job(f"interrupts_{name}", [sys.executable, "-c", _JOB, name, "{out}"],
                             timeout_s=900) for name in SCENARIOS}


def _seen(name):
    """What scenario ``name`` saw; a store's rows are tuples again (JSON made them lists)."""
    proc, out = background.result(JOBS[name])
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(os.path.join(out, "seen.json")) as f:
        seen = json.load(f)
    for k in ("stores", "before", "after"):
        if k in seen:
            seen[k] = {p: [tuple(r) for r in rows] for p, rows in seen[k].items()}
    return seen


@pytest.mark.background(JOBS["replay_compare"])
def test_replay_compare_stops_cleanly_and_resumes():
    seen = _seen("replay_compare")
    for step in seen["steps"]:
        r, counts = step["run"], step["counts"]
        assert (counts["lost"], counts["stores_rewritten"], counts["measured_twice"],
                counts["failure_rows"]) == (0, 0, 0, 0)
        assert not r["traceback"] and not r["processes_left"], r
        if r["signal_sent"]:
            assert r["exit"] == 130 and r["stdout_lines"] == 0, r
            assert r["last_stderr_line"].startswith("bocast: interrupted (SIGINT)")
            if step["results"]:  # only once every run had finished
                assert counts["rows"] == 9 * 96
    assert any(s["run"]["signal_sent"] for s in seen["steps"]), \
        "the comparison finished before the first signal"
    final = seen["final"]
    assert final["exit"] == 0, final
    rows = seen["stores"]
    assert len(rows) == 9 and all(len(r) == 96 and len({x[1] for x in r}) == 96
                                  for r in rows.values())
    assert seen["results"] == [f"interrupts.{e}" for e in
                               ("csv", "json", "md", "pdf", "png", "svg")]


def _stopped_by_sigint(stopped):
    assert stopped["exit"] == 130, stopped["stderr"]
    err = stopped["stderr"]
    assert err.strip().splitlines()[-1].startswith("bocast: interrupted (SIGINT)")
    assert "Traceback" not in err and not stopped["stdout"]


@pytest.mark.background(JOBS["standin_measure"])
def test_standin_measure_stops_cleanly_and_resumes():
    """The builder and runner processes ignore the signal; the command kills them, so no build
    or run cut short comes back as a crash (which would be recorded as a failure)."""
    seen = _seen("standin_measure")
    _stopped_by_sigint(seen["stopped"])
    (rows,) = seen["before"].values()
    assert 3 <= len(rows) < 16 and all(r[2] == "ok" for r in rows)
    assert seen["final"]["exit"] == 0, seen["final"]
    assert seen["check"] == {"lost": 0, "stores_rewritten": 0, "measured_twice": 0,
                             "failure_rows": 0, "rows": 16}


@pytest.mark.background(JOBS["sigterm_tune"])
def test_sigterm_stops_a_replay_tune_and_it_resumes():
    seen = _seen("sigterm_tune")
    stopped = seen["stopped"]
    if seen["finished_first"]:
        pytest.skip("the run finished before the signal (a very fast machine)")
    assert stopped["exit"] == 130 and not stopped["stdout"], stopped["stderr"]
    assert stopped["stderr"].strip().splitlines()[-1].startswith("bocast: interrupted (SIGTERM)")
    assert not stopped["summary"]
    before, after = seen["before"], seen["after"]
    assert seen["again"]["exit"] == 0, seen["again"]["stderr"]
    assert f"resuming: {len(before['out/records.db'])} trials" in seen["again"]["stderr"]
    assert INT.check(before, after)["lost"] == 0 and len(after["out/records.db"]) == TUNE_ROWS


@pytest.mark.background(JOBS["measure_all"])
def test_measure_all_stops_cleanly_and_resumes():
    """`measure --all` (an exhaustive table) stopped by SIGINT resumes like a sampled measure:
    the same seeded order, only the missing configurations, the table whole at the end."""
    seen = _seen("measure_all")
    _stopped_by_sigint(seen["stopped"])
    (rows,) = seen["before"].values()
    assert 3 <= len(rows) < 36 and all(r[2] == "ok" for r in rows)
    final = seen["final"]
    assert final["exit"] == 0, final["stderr"]
    summary = json.loads(final["stdout"].strip().splitlines()[-1])
    assert summary["measured_now"] == 36 - len(rows) and summary["left"] == 0
    assert summary["subspace"]["feasible"] == 36
    assert seen["check"] == {"lost": 0, "stores_rewritten": 0, "measured_twice": 0,
                             "failure_rows": 0, "rows": 36}


def test_a_sigterm_after_the_command_has_ended_does_not_kill_it(tmp_path):
    """Issue 42: a SIGTERM landing after the last row, while the interpreter shut down, ended
    the process by the signal (exit -15, no line; 6 of 52 stops). From the command's end on the
    signal is ignored, and the process exits with the command's own code. An atexit hook (run
    after bocast's command has returned, during shutdown) sends the signal at that moment."""
    import subprocess

    code = ("import atexit, os, runpy, signal, sys; "
            "atexit.register(lambda: os.kill(os.getpid(), signal.SIGTERM)); "
            "sys.argv = ['bocast', 'ops']; runpy.run_module('bocast.cli', run_name='__main__')")
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=ENV, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, (r.returncode, r.stderr)
    assert r.stdout and not r.stderr
