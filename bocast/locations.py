"""Where a command writes, checked before any work: every output can be written
(:func:`check_writable`), and none is an input or another output (:func:`check_outputs`), so a
run does not fail once its work is done and never writes over what it reads."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping, Sequence

from bocast.schema import ConfigError


def check_writable(path: str, what: str, *, directory: bool = False) -> None:
    """Raise ConfigError unless ``path`` (a file, or with ``directory`` a folder) can be
    written: it is of the right kind if it exists, and its nearest existing folder takes a new
    file. Checked before any work, so that a run does not fail when its work is done; the
    probe file is anonymous and gone when this returns, so nothing is created."""
    if not path:
        raise ConfigError(f"{what}: empty path")
    full = os.path.abspath(path)
    if os.path.exists(full):
        if directory and not os.path.isdir(full):
            raise ConfigError(f"{what}: {path} exists and is not a folder")
        if not directory and os.path.isdir(full):
            raise ConfigError(f"{what}: {path} is a folder, not a file")
    probe = full if directory and os.path.isdir(full) else os.path.dirname(full)
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        raise ConfigError(f"{what}: cannot create {path}: {probe} is a file, not a folder")
    try:  # os.access says yes to root on a read-only file system; a real probe does not
        with tempfile.TemporaryFile(dir=probe):
            pass
    except OSError as e:
        raise ConfigError(f"{what}: cannot write under {probe} ({e.strerror or e})") from None
    if os.path.isfile(full) and not os.access(full, os.W_OK):
        raise ConfigError(f"{what}: {path} is not writable")


def check_outputs(outputs: Mapping[str, str | Sequence[str]],
                  inputs: Mapping[str, str | Sequence[str]] | None = None, *,
                  existing: str | None = "--force") -> None:
    """Raise ConfigError unless every output file is distinct from every input and from every
    other output (compared as resolved paths: a link or ``a/../b`` is the same file), so that a
    command never writes over what it reads or writes one output over another. ``outputs`` and
    ``inputs`` map what the messages call a path (``--out``, ``dataset``) to a path or a list
    of them. An output that exists already is refused unless ``existing`` is None (a command
    that rewrites its own outputs by design); otherwise ``existing`` names the option that
    allows it."""
    def resolved(group):
        return [(what, p, os.path.realpath(p)) for what, paths in (group or {}).items()
                for p in ([paths] if isinstance(paths, str) else paths)]

    ins, outs = resolved(inputs), resolved(outputs)
    seen: dict[str, str] = {}
    for what, path, real in outs:
        clash = next((w for w, _, r in ins if r == real), None)
        if clash is not None:
            raise ConfigError(f"{what}: {path} is also the {clash}, which it would overwrite")
        if real in seen and seen[real] != what:
            raise ConfigError(f"{what}: {path} is also the {seen[real]}; give each output its "
                              "own path")
        seen[real] = what
    if existing is not None:
        for what, path, _ in outs:
            if os.path.exists(path):
                raise ConfigError(f"{what}: {path} exists; give {existing} to replace it")
