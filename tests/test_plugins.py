"""Strategies, operators and runners from outside the package (docs/extending.md): an installed
package's entry points (groups ``bocast.strategies``, ``bocast.operators``, ``bocast.runners``)
are imported when bocast lists its strategies or operators or is asked for a runner kind it does
not ship; a runner is also named by class (``package.module:ClassName``). Tested in
subprocesses, since a plugin registers itself for the whole process: a distribution's metadata
written into a folder on PYTHONPATH is what pip would install (its entry_points.txt), with the
repository's example modules beside it."""

import json
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "extending")


def _site(tmp_path, entry_points: str):
    """A folder that holds an 'installed' distribution with these entry points (and the
    example plugin's module)."""
    site = tmp_path / "site"
    info = site / "bocast_example_plugin-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: bocast-example-plugin\n"
                                   "Version: 0.1.0\n")
    (info / "entry_points.txt").write_text(entry_points)
    for module in ("bocast_example_plugin.py", "wave_model_runner.py"):
        shutil.copy(os.path.join(EXAMPLE, module), site)
    return site


def _bocast(site, tmp_path, *argv):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), ROOT]),
           "BOCAST_RECORDS": str(tmp_path / "records")}
    return subprocess.run([sys.executable, "-m", "bocast.cli", *argv], capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=600)


def test_an_installed_strategy_and_operator_are_used_like_the_shipped_ones(tmp_path):
    site = _site(tmp_path, "[bocast.strategies]\ngreedy = bocast_example_plugin\n\n"
                           "[bocast.operators]\nlinear = bocast_example_plugin\n")
    ops = _bocast(site, tmp_path, "ops")
    assert ops.returncode == 0 and "linear" in ops.stdout, ops.stderr
    run = _bocast(site, tmp_path, "tune", "linear", "--shape", "64,256,256", "--runner",
                  "standin", "--strategy", "greedy", "--trials", "8", "--warm-start", "none",
                  "--output", str(tmp_path / "run"), "--json")
    assert run.returncode == 0, run.stderr[-2000:]
    assert '"strategy": "greedy"' in run.stdout and '"trials": 8' in run.stdout
    wrong = _bocast(site, tmp_path, "tune", "linear", "--shape", "64,256,256", "--runner",
                    "standin", "--strategy", "greedy", "--set", "strategy.pool=0")
    assert wrong.returncode == 2 and "pool" in wrong.stderr  # its options checked like ours


def test_a_plugin_that_fails_to_import_is_one_line_naming_it(tmp_path):
    site = _site(tmp_path, "[bocast.operators]\nbroken = no_such_module_here\n")
    r = _bocast(site, tmp_path, "ops")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "plugin 'broken' (no_such_module_here, entry point group bocast.operators) failed " \
           "to import: ModuleNotFoundError" in r.stderr


#: a tune of the wave-model runner (docs/extending.md), which needs no GPU and no nvcc
WAVE = ["tune", "gemm", "--shape", "256,256,256", "--trials", "4", "--batch-size", "4",
        "--warm-start", "none", "--json"]


def test_a_runner_by_entry_point_and_by_class_runs_as_its_class_declares(tmp_path):
    site = _site(tmp_path, "[bocast.runners]\nwave-model = wave_model_runner:WaveModelRunner\n")
    for kind in ("wave-model", "wave_model_runner:WaveModelRunner"):
        out = tmp_path / kind.replace(":", "_")
        run = _bocast(site, tmp_path, *WAVE, "--runner", kind, "--output", str(out))
        assert run.returncode == 0, run.stderr[-2000:]
        summary = json.loads(run.stdout.strip().splitlines()[-1])
        assert summary["runner"] == kind and summary["trials"] == 4
        assert summary["best_tflops"] > 0
        # synthetic (modelled) timings: kept out of the records library
        assert summary["library_copy"] is None and not (tmp_path / "records").exists()
        assert f"a synthetic runner's store ({kind}) is not added" in run.stderr
    # added to a library on purpose, its store is still known for synthetic: its session says
    # so (Runner.described), whatever GPU name the runner's device gives
    from bocast.records import library

    named = tmp_path / "named"
    run = _bocast(site, tmp_path, *WAVE, "--runner", "wave-model", "--records", str(named),
                  "--output", str(tmp_path / "into_named"))
    assert run.returncode == 0, run.stderr[-2000:]
    (entry,) = [e for e in library.scan(str(named))[0] if not e.shipped]
    assert entry.synthetic and entry.declared_synthetic


def test_a_runner_kind_that_is_none_is_one_line(tmp_path):
    site = _site(tmp_path, "[bocast.runners]\nbroken = no_such_module_here:Runner\n")
    for kind, message in (
            ("broken", "plugin 'broken' (no_such_module_here:Runner, entry point group "
                       "bocast.runners) failed to import: ModuleNotFoundError"),
            ("os:getcwd", "runner os:getcwd: <built-in function getcwd> is not a "
                          "bocast.measure.runner.Runner subclass"),
            ("no_such_module_here:X", "runner no_such_module_here:X: cannot be imported "
                                      "(ModuleNotFoundError")):
        r = _bocast(site, tmp_path, *WAVE, "--runner", kind, "--output", str(tmp_path / "x"))
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
        assert message in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (tmp_path / "x").exists()
