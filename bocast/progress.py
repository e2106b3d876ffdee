"""Progress of a long command, on stderr (stdout is the command's result, ``--json`` included).

On a terminal, one line redrawn in place: done/total, best so far, rate and ETA. Elsewhere (a
log file, a pipe, CI), a plain line every ``every_s`` seconds, plus the first and the last, so
a log shows a run is alive without one line per trial.
"""

from __future__ import annotations

import shutil
import sys
import time
from typing import TextIO


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class Progress:
    """``update(done, best=..., note=...)`` after each unit of work; ``say(text)`` for a line
    of its own; ``close()`` at the end (a context manager does it)."""

    def __init__(self, what: str, total: int | None, *, unit: str = "trials",
                 stream: TextIO | None = None, every_s: float = 10.0, every_n: int | None = None,
                 tty: bool | None = None):
        self.what, self.total, self.unit = what, total, unit
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.every_s, self.every_n = every_s, every_n
        self.t0 = time.perf_counter()
        self.done, self.note = 0, ""
        self.best: float | None = None
        self._last_line = -1e9
        self._last_n = 0
        self._drawn = False
        self._first: tuple[float, int] | None = None  # (time, count) of the first update

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close(final=exc[0] is None)

    def text(self) -> str:
        elapsed = time.perf_counter() - self.t0
        parts = [f"{self.what}: {self.done}" + (f"/{self.total}" if self.total else "")
                 + f" {self.unit}"]
        if self.best is not None:
            parts.append(f"best {self.best:.1f} TFLOPS")
        if self.note:
            parts.append(self.note)
        parts.append(_clock(elapsed))
        if self.total and self._first is not None and self._first[1] < self.done < self.total:
            # the rate since the first completed step: the first step carries one-time costs
            # (imports, the reference's timing, compiler start-up) that made early ETAs far off
            t1, n1 = self._first
            rate = (time.perf_counter() - t1) / (self.done - n1)
            parts.append(f"ETA {_clock(rate * (self.total - self.done))}")
        return ", ".join(parts)

    def _bar(self) -> str:
        if not self.total:
            return ""
        filled = int(20 * min(self.done, self.total) / self.total)
        return "[" + "#" * filled + "." * (20 - filled) + "] "

    def update(self, done: int | None = None, *, best: float | None = None,
               note: str | None = None, step: int = 0) -> None:
        self.done = done if done is not None else self.done + step
        if self._first is None and self.done > 0:
            self._first = (time.perf_counter(), self.done)
        if best is not None:
            self.best = best
        if note is not None:
            self.note = note
        now = time.perf_counter()
        if self.tty:  # one line, never wider than the terminal (a wrapped line is not redrawn)
            width = max(20, shutil.get_terminal_size().columns - 1)
            self.stream.write("\r" + (self._bar() + self.text())[:width].ljust(width))
            self.stream.flush()
            self._drawn = True
            return
        due = now - self._last_line >= self.every_s
        if self.every_n:
            due = due or self.done - self._last_n >= self.every_n
        if due:  # the first update is always due
            self._line(now)

    def _line(self, now: float) -> None:
        print(self.text(), file=self.stream, flush=True)
        self._last_line, self._last_n = now, self.done

    def say(self, text: str) -> None:
        if self._drawn:
            self.stream.write("\r" + " " * max(20, shutil.get_terminal_size().columns - 1) + "\r")
            self._drawn = False
        print(text, file=self.stream, flush=True)
        if self.tty and self.done:
            self.update(self.done)

    def close(self, final: bool = True) -> None:
        if self.tty and self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False
        elif not self.tty and final and self._last_n != self.done:
            self._line(time.perf_counter())


def say(text: str) -> None:
    """A status line of a command (which runner, resuming, ...): stderr, like progress."""
    print(text, file=sys.stderr, flush=True)


def reference_label(reference: dict | None, *, recorded: bool = False) -> str:
    """A short name for a run's reference (``reference["what"]``, e.g. "torch.mm(...) (cuBLAS,
    fp32 out)"): the vendor library it ran, "cuBLAS (recorded)" where replay reads the value
    from a dataset instead of timing it."""
    what = (reference or {}).get("what") or ""
    name = next((v for v in ("cuBLAS", "cuDNN") if v in what),
                "stand-in" if "stand-in" in what else "torch reference" if what else "reference")
    return f"{name} (recorded)" if recorded else name
