"""What the commands share: the one-line :class:`UsageError`, the summary printer (``--json``),
the operator a command line names, the GPU and compiler checks, and the knob restriction of
``--fix`` or ``--subspace`` (``bocast space`` and ``bocast measure``; ``bocast tune``'s
``--fix``)."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from bocast.api import need_compiler
from bocast.errors import InputError
from bocast.space.operators.operator import from_workload, make_named, parse_shape

T0 = time.perf_counter()


class UsageError(InputError):
    """Bad input: reported in one line, exit code 2."""


def _emit(args, summary: dict[str, Any], lines: Sequence[str]) -> None:
    for line in lines:
        print(line)
    if args.json:
        print(json.dumps(summary, sort_keys=True))


def _operator_from(args):
    """The operator named on the command line, or the one of ``--subspace``'s file."""
    if getattr(args, "subspace", None) is not None:
        from bocast.space.subspace import load

        given = [flag for flag, v in (("operator", args.op), ("--shape", args.shape),
                                      ("--dtype", args.dtype), ("--layout", args.layout),
                                      ("--fuse", args.fuse), ("--space", args.space))
                 if v is not None]
        if given:
            raise UsageError(f"--subspace names its own workload: give no {', '.join(given)} "
                             "with it")
        try:
            args.loaded_subspace = load(args.subspace)
        except InputError as e:
            raise UsageError(f"--subspace: {e}") from None
        return from_workload(args.loaded_subspace.workload)
    if args.op is None:
        raise UsageError("name an operator (or give --subspace FILE)")
    shape = parse_shape(args.shape) if args.shape is not None else None
    options = {k: getattr(args, k) for k in ("dtype", "layout", "fuse", "space")
               if getattr(args, k) is not None}
    return make_named(args.op, shape, **options)


def _need_compiler(what: str) -> None:
    need_compiler(what)


def _restriction(args, op) -> dict | None:
    """The knob restriction of ``--subspace`` or ``--fix`` (None: the whole space)."""
    from bocast.space.subspace import parse_fix_args

    sub = getattr(args, "loaded_subspace", None)
    if sub is not None:
        if args.fix:
            raise UsageError("--fix and --subspace: put the fixed knobs in the file")
        return sub.allowed
    return parse_fix_args(op.space, args.fix) if args.fix else None


def _fix_field(workload: dict[str, Any], items: Sequence[str]) -> dict[str, list]:
    """``bocast tune OP``'s ``--fix KNOB=VALUE`` items as the configuration's field ``fix``,
    read with the workload's space as measure's ``--fix`` is (a split's factors as a list)."""
    from bocast.space.subspace import parse_fix_args

    return _jsonable_allowed(parse_fix_args(from_workload(workload).space, items))


def _table_of(args, allowed) -> dict[str, Any]:
    """What identifies an exhaustive table in its store (its ``feasible`` count aside)."""
    if args.subspace is not None:
        return args.loaded_subspace.describe()
    return {"name": "", "allowed": _jsonable_allowed(allowed or {})}



def _check_size(args, n: int) -> None:
    """A sub-space file's ``feasible`` against the count of its configurations."""
    sub = getattr(args, "loaded_subspace", None)
    if sub is not None and sub.expected is not None and n != sub.expected:
        raise UsageError(f"--subspace: {args.subspace}: the sub-space has {n} feasible "
                         f"configurations, the file says {sub.expected} (the space changed?)")


def _jsonable_allowed(allowed: dict) -> dict:
    return {k: [list(v) if isinstance(v, tuple) else v for v in vals]
            for k, vals in allowed.items()}


def _fixed_text(allowed: dict) -> str:
    return ", ".join(f"{k}={'|'.join(map(str, v))}" for k, v in allowed.items()) or "no knob fixed"
