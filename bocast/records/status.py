"""The failure taxonomy: every measurement ends in exactly one status, recorded as data."""

from __future__ import annotations

from enum import Enum


class Status(str, Enum):
    OK = "ok"
    INVALID = "invalid"                # violates a known constraint; never built
    SCHEDULE_ERROR = "schedule_error"  # a TensorIR schedule primitive refused
    BUILD_ERROR = "build_error"        # lowering/codegen failed, or the CUDA compiler rejected it
    BUILD_TIMEOUT = "build_timeout"
    BUILD_REJECTED = "build_rejected"  # built, refused by a build-time filter, never run
    LAUNCH_ERROR = "launch_error"      # the driver refused to load or launch the kernel
    RUNTIME_ERROR = "runtime_error"    # the kernel faulted (illegal address, ...)
    RUN_TIMEOUT = "run_timeout"
    WRONG_RESULT = "wrong_result"

    def __str__(self) -> str:
        return self.value

    @property
    def is_build_failure(self) -> bool:
        return self in (Status.SCHEDULE_ERROR, Status.BUILD_ERROR, Status.BUILD_TIMEOUT,
                        Status.BUILD_REJECTED)


#: Statuses a feasibility classifier learns from (the unknown constraints): everything that was
#: attempted and did not succeed. ``invalid`` is known before any attempt and is excluded.
UNKNOWN_CONSTRAINT_FAILURES = tuple(s for s in Status if s not in (Status.OK, Status.INVALID))


def tail(text: str, lines: int = 12, chars: int = 1500) -> str:
    """Last lines of a message, without TVM's IR dumps (which can run to megabytes)."""
    if "Error message:" in text:  # TVM ScheduleError: the IR dump precedes this line
        text = text[text.rindex("Error message:"):]
    kept = [ln for ln in text.strip().splitlines() if ln.strip()][-lines:]
    return "\n".join(kept)[-chars:]
