"""The README's quick start runs verbatim: each command of its marked block, in order, from a
folder that sees the repository's experiments/ (so its outputs never land in the checkout)."""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def quickstart() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    m = re.search(r"<!-- readme-example: quickstart -->\n```bash\n(.*?)\n```", text, re.S)
    assert m, "README.md lost its quick start block (or its marker)"
    return [line.split("  #")[0].strip() for line in m.group(1).splitlines() if line.strip()]


@pytest.mark.slow
def test_readme_quickstart_runs_as_written(tmp_path):
    (tmp_path / "experiments").symlink_to(ROOT / "experiments")
    env = {**os.environ, "BOCAST_RECORDS": str(tmp_path / "records"),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    commands = quickstart()
    assert commands[0] == "bocast ops" and any(c.startswith("bocast tune") for c in commands)
    for command in commands:
        done = subprocess.run(shlex.split(command), cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=600)
        assert done.returncode == 0, f"{command}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    assert (tmp_path / "runs" / "quickstart" / "records.db").exists()
    assert (tmp_path / "runs" / "quickstart" / "convergence.svg").exists()  # tune --plot
    assert (tmp_path / "runs" / "replay_smoke" / "summary.pdf").exists()
