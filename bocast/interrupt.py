"""Clean stops: SIGINT and SIGTERM end a command between records, never inside one.

Every record is one SQLite transaction, so a stop at any moment leaves each row whole or absent;
what this module adds is that a stop neither invents records nor loses the ones that finished:

- The command's process (``install()``, by the CLI) turns the first signal into
  :class:`Interrupted`, raised in the main thread at once (a blocking wait ends), except inside
  :func:`held` (a record or result file being written), where it waits for the block's end.
  Other threads see :func:`stopping` at their next safe point (:func:`check`): the process pools
  between results, the tuner between batches, the replay lookup between records.
- Child processes that run jobs (replay runs of ``bocast compare``) only note the signal
  (``install("flag")``) and stop at their next safe point; the parent tells them through a
  shared event too, for a signal sent to the parent alone.
- Pool workers (builds, kernel runs) ignore both signals (:func:`ignore`): a build or kernel
  killed by Ctrl-C would otherwise come back as a crash and be recorded as a failure of its
  configuration. The parent kills them when it stops.

The CLI reports an :class:`Interrupted` in one line and exits with code 130; rerunning the same
command resumes from the stores.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Any

SIGNALS = (signal.SIGINT, signal.SIGTERM)

_stop = threading.Event()
_state: dict[str, Any] = {"signum": 0, "mode": None, "hold": 0, "pending": False, "shared": None}


class Interrupted(BaseException):
    """A stop asked for by SIGINT or SIGTERM. A BaseException, like KeyboardInterrupt, so that
    code which records any Exception of a build or a run as data cannot record a stop as a
    failure."""

    def __init__(self, signum: int):
        self.signum = int(signum)
        super().__init__(signal.Signals(self.signum).name)

    def __reduce__(self):  # a job process's stop travels back to its parent pickled
        return Interrupted, (self.signum,)


def install(mode: str = "raise", shared=None) -> None:
    """Handle SIGINT and SIGTERM in this process: ``raise`` (the command's process) or ``flag``
    (a job process: note the stop, act on it at a safe point). ``shared``: an event (of
    ``multiprocessing``) that a parent sets to stop this process as well."""
    _stop.clear()
    _state.update(signum=0, mode=mode, hold=0, pending=False, shared=shared)
    for s in SIGNALS:
        signal.signal(s, _handler)


def ignore() -> None:
    """Pool workers: the parent decides when they stop (see the module docstring)."""
    for s in SIGNALS:
        signal.signal(s, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)


@contextlib.contextmanager
def blocked():
    """Hold both signals in the calling thread for the block. Processes started inside inherit
    the mask, so a signal cannot reach them before they have set their own handling
    (:func:`install` with ``flag``, or :func:`ignore`, which unblock)."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def unblock() -> None:
    signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)


def _handler(signum, frame) -> None:  # noqa: ARG001
    _state["signum"] = _state["signum"] or signum
    _stop.set()
    if _state["shared"] is not None and _state["mode"] == "raise":
        _state["shared"].set()
    if _state["mode"] == "raise":
        if _state["hold"]:
            _state["pending"] = True
        else:
            raise Interrupted(signum)


def share(event) -> None:
    """A parent's event to set when it is interrupted (its job processes watch it)."""
    _state["shared"] = event
    if _stop.is_set():
        event.set()


def stopping() -> bool:
    shared = _state["shared"]
    return _stop.is_set() or (shared is not None and _state["mode"] == "flag" and shared.is_set())


def signum() -> int:
    return _state["signum"] or int(signal.SIGINT)


def check() -> None:
    """A safe point: raise :class:`Interrupted` if a stop was asked for."""
    if stopping():
        raise Interrupted(signum())


@contextlib.contextmanager
def held():
    """Let the block finish before an interrupt of the main thread takes effect (a record or
    a result file being written). Other threads are never interrupted asynchronously."""
    if threading.current_thread() is not threading.main_thread() or _state["mode"] != "raise":
        yield
        return
    _state["hold"] += 1
    try:
        yield
    finally:
        _state["hold"] -= 1
    if not _state["hold"] and _state["pending"]:
        _state["pending"] = False
        raise Interrupted(signum())
