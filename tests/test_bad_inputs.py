"""Every bad input of experiments/bad_inputs.py, in-process: one line on stderr naming the
problem, exit 2, no traceback, nothing on stdout, the files it was given byte-identical and
nothing created. (The script runs the same cases as subprocesses and writes the table.)"""

import importlib.util
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _load():
    spec = importlib.util.spec_from_file_location(
        "bad_inputs", os.path.join(ROOT, "experiments", "bad_inputs.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules["bad_inputs"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


BAD = _load()
CASES = BAD.cases()


def test_there_are_at_least_60_cases_with_distinct_names():
    assert len(CASES) >= 60
    assert len({c.name for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_fails_cleanly(case, monkeypatch):
    monkeypatch.chdir(ROOT)
    r = BAD.run_case(case, in_process=True)
    assert r.clean, (r.problems, r.stderr, r.stdout[-500:])


def test_debug_shows_the_traceback(tmp_path):
    code, out, err = BAD._in_process(["--debug", "space", "gemm", "--shape", "1,1,1"])
    assert code == 2 and "Traceback" in err
    assert err.strip().splitlines()[-1].startswith("bocast: error: gemm: the matmul is M = 1")
