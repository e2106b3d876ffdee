"""The README's quick start runs verbatim: each command of its marked block, in order, from a
folder that sees the repository's experiments/ (so its outputs never land in the checkout)."""

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests import background

ROOT = Path(__file__).resolve().parent.parent


def quickstart() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    m = re.search(r"<!-- readme-example: quickstart -->\n```bash\n(.*?)\n```", text, re.S)
    assert m, "README.md lost its quick start block (or its marker)"
    return [line.split("  #")[0].strip() for line in m.group(1).splitlines() if line.strip()]


def run_quickstart(folder: str) -> None:
    """Each command of the quick start, in order, in ``folder`` (stopping at the first that
    fails); writes ``done.json``: [command, exit code, stdout tail, stderr tail] per command."""
    work = Path(folder)
    (work / "experiments").symlink_to(ROOT / "experiments")
    env = {**os.environ, "BOCAST_RECORDS": str(work / "records"),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = []
    for command in quickstart():
        p = subprocess.run(shlex.split(command), cwd=work, env=env, capture_output=True,
                           text=True, timeout=600)
        done.append([command, p.returncode, p.stdout[-2000:], p.stderr[-2000:]])
        if p.returncode:
            break
    (work / "done.json").write_text(json.dumps(done))


# a background job (tests/background.py): the commands run beside the other tests, from the
# job's own empty folder; the test reads what each returned
QUICKSTART = background.job("readme_quickstart", [
    sys.executable, "-c", "import sys; from tests.test_readme import run_quickstart; "
    "run_quickstart(sys.argv[1])", "{out}"], timeout_s=1800)


@pytest.mark.slow
@pytest.mark.background(QUICKSTART)
def test_readme_quickstart_runs_as_written():
    commands = quickstart()
    assert commands[0] == "bocast ops" and any(c.startswith("bocast tune") for c in commands)
    proc, out = background.result(QUICKSTART)
    assert proc.returncode == 0, proc.stderr[-3000:]
    done = json.loads((Path(out) / "done.json").read_text())
    for (command, code, stdout, stderr) in done:
        assert code == 0, f"{command}\n{stdout}\n{stderr}"
    assert [c for c, *_ in done] == commands
    work = Path(out)
    assert (work / "runs" / "quickstart" / "records.db").exists()
    assert (work / "runs" / "quickstart" / "convergence.svg").exists()  # tune --plot
    assert (work / "runs" / "replay_smoke" / "summary.pdf").exists()
