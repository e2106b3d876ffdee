"""Sub-spaces: a space with some knobs fixed or restricted to a few values, whose every feasible
configuration is measured into an exhaustive benchmark table (``bocast measure --subspace``).

A uniform table of 1000 rows holds a vanishing share of a space whose feasible set has ~1e8
members: no row has a one-knob neighbour in it, and replay ranks models on leftovers rather than
searches. An exhaustive table fixes the knobs that matter little at good values and measures the
whole remaining sub-space (a few thousand configurations), so that every neighbour a search may
step to is in the table and the table's best is the sub-space's true optimum.

A sub-space file (``experiments/exhaustive/*.yaml``)::

    name: gemm_4096_4096_4096_v2
    workload: {op: gemm, shape: [4096, 4096, 4096], dtype: "fp16:fp32", layout: NT, space: v2}
    fix: {async_copy: "on", vec: 8, unroll: 0}    # knob: one value, or a list of values
    feasible: 4562                                 # optional: the expected size, checked

Split values are lists of ints (``tile_k: [128, 2]``); a list of such lists allows several. A
restriction of a knob that is inactive under a configuration's categorical choices is ignored there
(as in :meth:`bocast.space.space.Space.sample_restricted`). YAML reads a bare ``on``/``off`` as a
boolean: quote them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bocast.config_files import read_yaml
from bocast.schema import ConfigError
from bocast.space.knobs import Config, SpaceError, Split, Value
from bocast.space.operators.operator import WorkloadError, from_workload
from bocast.space.space import Space

_TOP = {"name", "description", "workload", "fix", "feasible"}


class SubspaceError(SpaceError):
    """A sub-space definition that names an unknown knob or a value the knob cannot take."""


@dataclass(frozen=True)
class Subspace:
    allowed: dict[str, list[Value]]
    name: str = ""
    workload: dict[str, Any] | None = None
    expected: int | None = None  # the ``feasible`` field: the size the file promises
    raw: dict[str, Any] = field(default_factory=dict)

    def configs(self, space: Space) -> list[Config]:
        return space.enumerate_feasible(self.allowed)

    def count(self, space: Space) -> int:
        return space.count_feasible(self.allowed)

    def describe(self) -> dict[str, Any]:
        """JSON form for store and dataset metadata."""
        return {"name": self.name, "allowed": {k: [list(v) if isinstance(v, tuple) else v
                                                   for v in vals]
                                               for k, vals in self.allowed.items()}}


def _knob(space: Space, name: str, where: str):
    try:
        return space.knob(name)
    except KeyError:
        raise SubspaceError(f"{where}: unknown knob {name!r}; knobs: "
                            f"{', '.join(k.name for k in space.knobs)}") from None


def allowed_values(space: Space, fix: Mapping[str, Any]) -> dict[str, list[Value]]:
    """``fix`` (knob -> a value or a list of values, as YAML or JSON gives them) as the
    ``allowed`` mapping of :meth:`Space.enumerate_feasible`, each value checked against the
    knob's domain."""
    out: dict[str, list[Value]] = {}
    for name, given in fix.items():
        knob = _knob(space, name, "fix")
        if isinstance(knob, Split):
            many = isinstance(given, (list, tuple)) and given and all(
                isinstance(v, (list, tuple)) for v in given)
            values = [tuple(v) for v in given] if many else [given]
            values = [_split_value(name, v) for v in values]
            domain = {tuple(d) for cond, _, _ in space._variants for d in knob.domain(cond)}
        else:
            values = list(given) if isinstance(given, (list, tuple)) else [given]
            domain = set(knob.choices)
        if not values:
            raise SubspaceError(f"fix: {name}: no value given")
        for v in values:
            if isinstance(v, bool) or v not in domain:
                hint = (" (YAML reads a bare on/off as a boolean: quote it)"
                        if isinstance(v, bool) else "")
                raise SubspaceError(f"fix: {name}: {v!r} is not a value of this knob{hint}; "
                                    f"values: {_show(knob, domain)}")
        out[name] = list(dict.fromkeys(values))
    return out


def parse_fix_args(space: Space, items: Sequence[str]) -> dict[str, list[Value]]:
    """``--fix KNOB=VALUE`` arguments (repeat a knob to allow several values): a split's value
    is its factors, comma-separated (``tile_k=128,2``); any other value is compared with the
    knob's choices as text (``stages=3``, ``async_copy=on``)."""
    fix: dict[str, list] = {}
    for item in items:
        name, sep, text = item.partition("=")
        if not sep or not name or not text:
            raise SubspaceError(f"--fix {item!r}: expected KNOB=VALUE")
        knob = _knob(space, name, "--fix")
        if isinstance(knob, Split):
            try:
                value: Value = tuple(int(p) for p in text.strip("[]() ").split(","))
            except ValueError:
                raise SubspaceError(f"--fix {item!r}: a split's value is its factors, "
                                    f"comma-separated") from None
        else:
            match = [c for c in knob.choices if str(c) == text]
            if not match:
                raise SubspaceError(f"--fix {item!r}: not a value of {name}; values: "
                                    f"{', '.join(map(str, knob.choices))}")
            value = match[0]
        fix.setdefault(name, []).append(value)
    return allowed_values(space, {k: v if len(v) > 1 else v[0] for k, v in fix.items()})


def load(path: str) -> Subspace:
    """A sub-space file; its workload's operator is built to check every knob and value."""
    raw = read_yaml(path)
    where = os.path.basename(path)
    if not isinstance(raw, Mapping):
        raise SubspaceError(f"{where}: expected a mapping of fields")
    unknown = sorted(set(raw) - _TOP)
    if unknown:
        raise SubspaceError(f"{where}: unknown field(s) {unknown}; known: {sorted(_TOP)}")
    for key in ("name", "workload", "fix"):
        if key not in raw:
            raise SubspaceError(f"{where}: {key}: missing")
    if not isinstance(raw["fix"], Mapping):
        raise SubspaceError(f"{where}: fix: expected a mapping of knob: value(s)")
    expected = raw.get("feasible")
    if expected is not None and (isinstance(expected, bool) or not isinstance(expected, int)):
        raise SubspaceError(f"{where}: feasible: expected an integer, got {expected!r}")
    try:
        op = from_workload(raw["workload"])
    except (WorkloadError, ConfigError, TypeError, KeyError) as e:
        raise SubspaceError(f"{where}: workload: {e}") from None
    try:
        allowed = allowed_values(op.space, raw["fix"])
    except SubspaceError as e:
        raise SubspaceError(f"{where}: {e}") from None
    return Subspace(allowed, name=str(raw["name"]), workload=dict(op.workload),
                    expected=expected, raw=dict(raw))


def _split_value(name: str, v) -> tuple[int, ...]:
    if not isinstance(v, (list, tuple)) or not v or not all(
            isinstance(p, int) and not isinstance(p, bool) for p in v):
        raise SubspaceError(f"fix: {name}: a split's value is a list of integers, got {v!r}")
    return tuple(v)


def _show(knob, domain) -> str:
    if isinstance(knob, Split):
        return f"{len(domain)} factorisations, e.g. {sorted(domain)[0]}"
    return ", ".join(map(str, knob.choices))
