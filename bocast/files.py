"""Writing a result file whole or not at all (:func:`atomic_write`): every command's outputs
(stores aside, which SQLite keeps whole) go through it."""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager

from bocast import interrupt


def _umask() -> int:
    mask = os.umask(0o022)  # reading the umask means setting it: put it straight back
    os.umask(mask)
    return mask


@contextmanager
def atomic_write(path: str, mode: str = "w", **kwargs):
    """Write ``path`` whole or not at all: into a temporary file beside it, renamed over it when
    the block ends without an error (an interrupt included). A reader never sees a half-written
    result, and a stopped command leaves the previous version in place."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    try:
        # mkstemp's 0600 would make every result private: keep the file's mode, or take the
        # one open() would give a new file (0666 less the umask)
        try:
            os.fchmod(fd, os.stat(path).st_mode & 0o777)
        except FileNotFoundError:
            os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, mode, **kwargs) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        with interrupt.held():
            os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
