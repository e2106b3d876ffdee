"""Where a measurement came from: the commit of the code that ran, the package versions, the
host and the date (a store's sessions and every result file carry them)."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import subprocess
from collections.abc import Mapping
from typing import Any


def git_sha(path: str | None = None) -> str:
    """Commit of the code that ran: ``$BOCAST_GIT_SHA`` when set (the GPU machine receives a copy
    of the tree without .git), else ``git rev-parse HEAD`` (+ "-dirty"), else "unknown"."""
    if os.environ.get("BOCAST_GIT_SHA"):
        return os.environ["BOCAST_GIT_SHA"]
    here = path or os.path.dirname(os.path.abspath(__file__))
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True,
                              text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    if head.returncode != 0 or not head.stdout.strip():
        return "unknown"
    return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def package_versions() -> dict[str, str]:
    from importlib import metadata

    out = {"python": platform.python_version()}
    for name in ("bocast", "apache-tvm", "apache-tvm-ffi", "torch", "botorch", "gpytorch",
                 "numpy", "scikit-learn"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            try:  # the GPU machine carries TVM as a bundle on PYTHONPATH, not as a distribution
                mod = __import__({"apache-tvm": "tvm", "apache-tvm-ffi": "tvm_ffi"}.get(name, name))
                out[name] = getattr(mod, "__version__", "present")
            except Exception:  # noqa: BLE001
                out[name] = "absent"
    return out


def provenance(extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Git SHA, package versions, host and date; runners add GPU, driver and clocks."""
    return {
        "git_sha": git_sha(),
        "versions": package_versions(),
        "host": platform.node(),
        "platform": platform.platform(),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        **(dict(extra) if extra else {}),
    }
