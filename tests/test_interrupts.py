"""SIGINT to the process group (as Ctrl-C sends it) of a replay comparison, a replay tune and a
stand-in measure (a sample, and an exhaustive table: --all), then the same command again: one
line, exit 130, nothing finished lost or measured twice, no failure recorded for an interrupted
build or run, the results written only by the call that finishes. tests/interrupt_harness.py
does this at 20 random moments each."""

import contextlib
import json
import os
import random
import sys

import pytest
import yaml

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


def test_replay_compare_stops_cleanly_and_resumes(tmp_path):
    folder = str(tmp_path)
    stopped = []
    # two stops inside the runs, at a random number of rows (BO's rounds take a second or more
    # each, so the signal lands inside a run); BOCAST_FAULT_SEED varies them
    rng = random.Random(int(os.environ.get("BOCAST_FAULT_SEED", "0")))
    total = 0
    for _ in range(2):
        total += rng.randint(5, 200)
        before = INT.stores(folder)
        r = INT.run(INT.compare_command(folder), delay=None, env=ENV,
                    when=lambda: sum(map(len, INT.stores(folder).values())) >= total)  # noqa: B023 - polled within this iteration
        stopped.append(r["signal_sent"])
        after = INT.stores(folder)
        counts = INT.check(before, after)
        assert (counts["lost"], counts["stores_rewritten"], counts["measured_twice"],
                counts["failure_rows"]) == (0, 0, 0, 0)
        assert not r["traceback"] and not r["processes_left"], r
        if r["signal_sent"]:
            assert r["exit"] == 130 and r["stdout_lines"] == 0, r
            assert r["last_stderr_line"].startswith("bocast: interrupted (SIGINT)")
            if os.path.exists(tmp_path / "res"):  # only once every run had finished
                assert counts["rows"] == 9 * 96
    assert any(stopped), "the comparison finished before the first signal"
    final = INT.run(INT.compare_command(folder), delay=None, env=ENV)
    assert final["exit"] == 0, final
    rows = INT.stores(folder)
    assert len(rows) == 9 and all(len(r) == 96 and len({x[1] for x in r}) == 96
                                  for r in rows.values())
    assert sorted(os.listdir(tmp_path / "res")) == [f"interrupts.{e}" for e in
                                                     ("csv", "json", "md", "pdf", "png", "svg")]


def test_standin_measure_stops_cleanly_and_resumes(tmp_path):
    """The builder and runner processes ignore the signal; the command kills them, so no build
    or run cut short comes back as a crash (which would be recorded as a failure)."""
    folder = str(tmp_path)
    env = {**ENV, "BOCAST_STANDIN_SLEEP": "0.3"}
    import signal
    import subprocess

    argv = [sys.executable, "-m", "bocast.cli", *INT.measure_command(folder, 16)]
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    _wait_for_rows(folder, 3, proc)
    with contextlib.suppress(ProcessLookupError):  # exited already: asserted below
        os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1].startswith("bocast: interrupted (SIGINT)")
    assert "Traceback" not in err and not out
    before = INT.stores(folder)
    (rows,) = before.values()
    assert 3 <= len(rows) < 16 and all(r[2] == "ok" for r in rows)
    final = INT.run(INT.measure_command(folder, 16), delay=None, env=ENV)  # no sleep: not stopped
    assert final["exit"] == 0, final
    after = INT.stores(folder)
    assert INT.check(before, after) == {"lost": 0, "stores_rewritten": 0, "measured_twice": 0,
                                        "failure_rows": 0, "rows": 16}


def test_sigterm_stops_a_replay_tune_and_it_resumes(tmp_path):
    import signal
    import subprocess
    import time

    cfg = {"workload": INT.COMPARE["workload"], "dataset": INT.COMPARE["dataset"],
           "strategy": {"name": "bo", "n_init": 16, "pool_size": 256, "fit_maxiter": 20,
                        "warm_start": "none"},
           "batch_size": 16, "budget": {"trials": 256}, "seed": 0, "runner": "replay",
           "output": str(tmp_path / "out")}
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(cfg))
    argv = [sys.executable, "-m", "bocast.cli", "tune", str(tmp_path / "t.yaml"), "--json"]
    proc = subprocess.Popen(argv, cwd=ROOT, env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    _wait_for_rows(str(tmp_path), 33, proc)
    time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)  # to the command alone, as a scheduler would
    out, err = proc.communicate(timeout=120)
    # the whole run can take ~1 s on an idle machine: the signal may then come after the last
    # trial, while the process exits (its handler already restored: -SIGTERM, nothing lost)
    if proc.returncode in (0, -signal.SIGTERM) and \
            len(INT.stores(str(tmp_path))["out/records.db"]) == 256:
        pytest.skip("the run finished before the signal (a very fast machine)")
    assert proc.returncode == 130 and not out, err
    assert err.strip().splitlines()[-1].startswith("bocast: interrupted (SIGTERM)")
    assert not os.path.exists(tmp_path / "out" / "summary.json")
    before = INT.stores(str(tmp_path))
    again = subprocess.run(argv, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    assert f"resuming: {len(before['out/records.db'])} trials" in again.stderr
    after = INT.stores(str(tmp_path))
    assert INT.check(before, after)["lost"] == 0 and len(after["out/records.db"]) == 256


def test_measure_all_stops_cleanly_and_resumes(tmp_path):
    """`measure --all` (an exhaustive table) stopped by SIGINT resumes like a sampled measure:
    the same seeded order, only the missing configurations, the table whole at the end."""
    import signal
    import subprocess

    fixes = ["async_copy=on", "vec=8", "unroll=0", "raster=1", "writeback=direct",
             "frag_pipeline=off", "smem_layout=pad8", "instr=mma", "stages=2", "tile_k=2,2"]
    argv = ["measure", "gemm", "--shape", "64,64,64", "--space", "v2", "--all",
            *[a for f in fixes for a in ("--fix", f)], "--store", str(tmp_path / "t.db"),
            "--runner", "standin", "--batch", "4", "--workers", "2", "--json"]
    env = {**ENV, "BOCAST_STANDIN_SLEEP": "0.3"}
    proc = subprocess.Popen([sys.executable, "-m", "bocast.cli", *argv], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    _wait_for_rows(str(tmp_path), 3, proc)
    with contextlib.suppress(ProcessLookupError):  # exited already: asserted below
        os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1].startswith("bocast: interrupted (SIGINT)")
    assert "Traceback" not in err and not out
    before = INT.stores(str(tmp_path))
    (rows,) = before.values()
    assert 3 <= len(rows) < 36 and all(r[2] == "ok" for r in rows)
    final = subprocess.run([sys.executable, "-m", "bocast.cli", *argv], cwd=ROOT, env=ENV,
                           capture_output=True, text=True, timeout=300)  # no sleep: not stopped
    assert final.returncode == 0, final.stderr
    summary = json.loads(final.stdout.strip().splitlines()[-1])
    assert summary["measured_now"] == 36 - len(rows) and summary["left"] == 0
    assert summary["subspace"]["feasible"] == 36
    after = INT.stores(str(tmp_path))
    assert INT.check(before, after) == {"lost": 0, "stores_rewritten": 0, "measured_twice": 0,
                                        "failure_rows": 0, "rows": 36}
