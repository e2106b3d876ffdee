"""The build cache: a kernel is built once, and every later run, resume, re-timing, remeasure
or export that needs the same binary takes it from disk.

An entry's key is a SHA-256 of everything that decides the binary:

- the workload (operator, shape, dtype, layout, space) and the configuration (or, for another
  tuner's candidate, its scheduled IRModule's text), with the build's own options (compile or
  lower only, extra TVM pass options);
- the generator: a hash of bocast's own Python sources (:func:`generator_identity`). Not the git
  SHA: an installed wheel has none, and a working tree with uncommitted edits would share its
  commit's entries. Not the version: it does not change between two edits of a space. Any
  edit of the package starts a fresh set of entries (a few unrelated edits rebuild too; a stale
  binary never comes back);
- TVM's and tvm-ffi's versions, nvcc's release line and its flags, and the target arch.

Where (:func:`from_setting`): ``$BOCAST_BUILD_CACHE`` (a folder, or ``off``), else
``$XDG_CACHE_HOME/bocast/builds`` (``~/.cache/bocast/builds``). Entries are never evicted:
delete the folder to reclaim the space (a 4096^3 GEMM's cubin is about 50-100 kB).

Safety: each entry is one file, written to a temporary file in the same folder and renamed over
the entry (atomic), so two processes building the same kernel at once leave one whole entry.
An entry carries a digest of its content; one that cannot be read, does not parse, names
another key or fails its digest is deleted and rebuilt, never trusted.

What is cached: successful builds and the failures that are a property of the configuration
(``schedule_error``, ``build_error`` of the lowering or of nvcc rejecting the source), so a
known-bad configuration is not rebuilt either. Never cached: a build over its time limit, a
worker that crashed, an nvcc killed by a signal (:attr:`BuildResult.transient
<bocast.measure.builder.BuildResult.transient>`): those depend on the machine's load, and a
later build may succeed.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import json
import os
from collections.abc import Mapping
from typing import Any

from bocast.files import atomic_write
from bocast.measure.nvcc import DEFAULT_ARCH, NVCC_FLAGS, nvcc_version

ENV = "BOCAST_BUILD_CACHE"
OFF = ("off", "none", "0", "")
FORMAT = 1


def default_dir() -> str:
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "bocast", "builds")


@functools.cache
def generator_identity() -> str:
    """SHA-256 of the bocast package's ``.py`` files (names and contents, in name order)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    h = hashlib.sha256()
    for folder, dirs, files in sorted(os.walk(root)):
        dirs.sort()
        for name in sorted(f for f in files if f.endswith(".py")):
            path = os.path.join(folder, name)
            h.update(os.path.relpath(path, root).encode() + b"\0")
            with open(path, "rb") as f:
                h.update(hashlib.sha256(f.read()).digest())
    return h.hexdigest()


@functools.cache
def toolchain() -> dict[str, str | None]:
    """The versions that decide a binary besides bocast's sources."""
    return {"tvm": _version("apache-tvm", "tvm"), "tvm_ffi": _version("apache-tvm-ffi", "tvm_ffi"),
            "nvcc": nvcc_version(), "nvcc_flags": " ".join(NVCC_FLAGS),
            "default_arch": DEFAULT_ARCH, "generator": generator_identity()}


def _version(dist: str, module: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:  # a bundle on PYTHONPATH (the GPU machine's TVM)
        try:
            return str(getattr(__import__(module), "__version__", "unknown"))
        except ImportError:
            return "absent"


def cacheable(result: Mapping[str, Any]) -> bool:
    """Whether a build's result (``BuildResult.to_dict``) is a property of its configuration."""
    if result.get("transient"):
        return False
    return result.get("status") in ("ok", "schedule_error", "build_error") \
        and result.get("stage") in (None, "apply", "lower", "compile")


class BuildCache:
    """Build results on disk under ``folder`` (see the module docstring). Counts its
    ``hits``, ``misses``, ``stored`` and ``corrupt`` entries (rebuilt)."""

    def __init__(self, folder: str):
        self.folder = os.path.abspath(folder)
        self.hits = self.misses = self.stored = self.corrupt = 0

    def key(self, task: Mapping[str, Any], arch: str | None = None) -> str:
        """The key of a build task (``{"workload", "config" | "key" + "module", "compile",
        "pass_config"}``); ``arch``: the target the operator asks for, where known."""
        what = {k: task.get(k) for k in ("workload", "config", "pass_config")}
        what["compile"] = bool(task.get("compile", True))
        if "module" in task:
            what["module"] = hashlib.sha256(str(task["module"]).encode()).hexdigest()
        what["arch"] = arch
        what["toolchain"] = toolchain()
        text = json.dumps(what, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()

    def _path(self, key: str) -> str:
        return os.path.join(self.folder, f"v{FORMAT}", key[:2], key + ".json")

    def get(self, key: str) -> dict[str, Any] | None:
        """The stored result (``BuildResult.to_dict(with_cubin=True)``), or None: none stored,
        or a corrupt entry (deleted; the caller rebuilds and stores it again)."""
        path = self._path(key)
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            self.misses += 1
            return None
        except OSError:
            self.misses += 1
            return None
        try:
            entry = json.loads(raw)
            result = entry["result"]
            if entry.get("format") != FORMAT or entry.get("key") != key \
                    or entry.get("digest") != _digest(result):
                raise ValueError("entry does not match its key or digest")
            cubin = result.get("cubin")
            result["cubin"] = base64.b64decode(cubin) if cubin is not None else None
        except (ValueError, KeyError, TypeError, AttributeError):
            self.corrupt += 1
            self.misses += 1
            with contextlib.suppress(OSError):
                os.remove(path)
            return None
        self.hits += 1
        return result

    def put(self, key: str, result: Mapping[str, Any]) -> bool:
        """Store ``result`` (with its cubin) if :func:`cacheable`; True if stored. A folder that
        cannot be written costs the cache, never the build."""
        if not cacheable(result):
            return False
        body = dict(result)
        cubin = body.get("cubin")
        body["cubin"] = base64.b64encode(cubin).decode() if cubin is not None else None
        entry = {"format": FORMAT, "key": key, "result": body, "digest": _digest(body)}
        path = self._path(key)
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with atomic_write(path) as f:  # a reader sees the old entry or the new one
                json.dump(entry, f, default=str)
        except OSError:
            return False
        self.stored += 1
        return True

    def counts(self) -> dict[str, int]:
        return {"hits": self.hits, "misses": self.misses, "stored": self.stored,
                "corrupt": self.corrupt}


def _digest(body: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()


def from_setting(setting: str | bool | None = None) -> BuildCache | None:
    """The cache a builder uses: ``setting`` a folder, False (or ``off``) for none, None or True
    for ``$BOCAST_BUILD_CACHE``, else :func:`default_dir`."""
    if setting is False:
        return None
    if isinstance(setting, str):
        return None if setting.strip().lower() in OFF else BuildCache(setting)
    env = os.environ.get(ENV)
    if env is not None:
        return None if env.strip().lower() in OFF else BuildCache(env)
    return BuildCache(default_dir())
