"""One schema for every option: its type, range, default and help, checked in one place.

A :class:`Field` checks a value from a YAML configuration (:meth:`Field.check`) or parses one
from the command line (:meth:`Field.parse`, an argparse ``type``), with the same rule and the
same message; a :class:`Section` is a mapping of fields (a configuration's ``budget``, its
``runner_options``, a strategy's hyperparameters). The CLI, ``bocast tune``, ``bocast compare``
and the strategies share these definitions, so an option has one range wherever it is given.
A typed options class (:mod:`bocast.options`: ``Budget``, ``Workload``,
``bocast.strategies.BOOptions``, ...) is the one definition of its section: a hand-written
dataclass whose fields carry their range and help in their metadata (:func:`opt`,
:func:`about`), from which :meth:`Section.of` derives the section that checks a configuration.

Checking only reads: nothing runs and nothing is written before every field has passed.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
import re
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from bocast.errors import InputError


class ConfigError(InputError):
    """An option or configuration field that cannot be used; the message names the field."""


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED = _Required()


@dataclass(frozen=True)
class Field:
    """One option. ``kind`` is int, float, str, bool, list or dict (``object``: any value, the
    owner checks it); numbers are checked against ``min``/``max`` (inclusive) and ``above``
    (exclusive lower bound), strings against ``choices`` or ``pattern``; ``nullable`` admits
    None (YAML null)."""

    name: str
    kind: type
    default: Any = REQUIRED
    min: float | None = None
    max: float | None = None
    above: float | None = None
    choices: tuple = ()
    pattern: str | None = None
    nullable: bool = False
    doc: str = ""

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    def expected(self, cli: bool = False, *, storage_limits: bool = True) -> str:
        """What a valid value is, in words (the error messages and the CLI help say it; a
        command line has no null: leaving the option out gives the default). Help leaves out
        an upper bound that is only a 64-bit storage limit (``storage_limits=False``)."""
        if self.choices:
            what = f"one of {list(self.choices)}"
        elif self.kind in (int, float):
            what = "an integer" if self.kind is int else "a number"
            lo = (f">= {_num(self.min)}" if self.min is not None else
                  f"> {_num(self.above)}" if self.above is not None else None)
            hi = self.max if storage_limits or self.max is None or self.max < 2**62 else None
            if lo and hi is not None and self.min is not None:
                what += f" between {_num(self.min)} and {_num(hi)}"
            elif lo and hi is not None:
                what += f" {lo} and <= {_num(hi)}"
            elif lo:
                what += f" {lo}"
            elif hi is not None:
                what += f" <= {_num(hi)}"
        elif self.kind is str:
            what = "a string" + (" of letters, digits, '.', '_', '+', '-' and inner spaces"
                                 if self.pattern else "")
        elif self.kind is bool:
            what = "true or false"
        else:
            what = {list: "a list", dict: "a mapping", object: "a value"}.get(
                self.kind, self.kind.__name__)
        return what + (" or null" if self.nullable and not cli else "")

    def check(self, value: Any, where: str = "", error: type[InputError] = ConfigError) -> Any:
        """``value`` as this field's type (an int given for a float field becomes a float);
        ``error`` names ``where`` + the field and what was expected."""
        if value is None and self.nullable:
            return None
        bad = error(f"{where}{self.name}: expected {self.expected()}, got {value!r}")
        if self.kind in (int, float):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise bad
            if self.kind is int and not isinstance(value, int):
                raise bad
            if self.kind is float:
                value = float(value)
                if not math.isfinite(value):
                    raise bad
            if ((self.min is not None and value < self.min)
                    or (self.max is not None and value > self.max)
                    or (self.above is not None and value <= self.above)):
                raise bad
        elif self.kind is bool:
            if not isinstance(value, bool):
                raise bad
        elif self.kind is dict:
            if not isinstance(value, Mapping):
                raise bad
        elif self.kind is not object and not isinstance(value, self.kind):
            raise bad
        if self.choices and value not in self.choices:
            raise bad
        if self.pattern and not re.fullmatch(self.pattern, value):
            raise bad
        return value

    def parse(self, text: str) -> Any:
        """A command-line value (argparse ``type``): converted, then checked like YAML's."""
        import argparse

        value: Any = text
        try:
            if self.kind is int:
                value = int(text)
            elif self.kind is float:
                value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {self.expected(cli=True)}, got {text!r}") \
                from None
        try:
            return self.check(value)
        except ConfigError:
            raise argparse.ArgumentTypeError(f"expected {self.expected(cli=True)}, got {text!r}") \
                from None

    def with_default(self, default: Any) -> Field:
        return dataclasses.replace(self, default=default)

    def opt(self) -> Any:
        """This field as a typed options class's field with its default (:func:`about`)."""
        return _dataclass_field(self.default, about(self))


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


@dataclass(frozen=True)
class Section:
    """A mapping of fields, checked whole: unknown keys, missing required ones and each value."""

    fields: tuple[Field, ...]
    noun: str = "field"  # what the messages call a key: "field" (YAML), "option" (strategies)
    #: the typed options class it was made from (:meth:`of`), if any
    typed: type | None = dataclasses.field(default=None, compare=False)

    def __post_init__(self):
        names = [f.name for f in self.fields]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate fields in {names}")

    @property
    def names(self) -> list[str]:
        return [f.name for f in self.fields]

    def __getitem__(self, name: str) -> Field:
        return next(f for f in self.fields if f.name == name)

    def defaults(self) -> dict[str, Any]:
        return {f.name: f.default for f in self.fields if not f.required}

    def check(self, raw: Any, where: str = "", error: type[InputError] = ConfigError,
              *, ignore: Sequence[str] = ()) -> dict[str, Any]:
        """Every field of ``raw`` checked, defaults filled in; keys in ``ignore`` pass through
        unchecked (another section checks them)."""
        if raw is None:
            raw = {}
        if not isinstance(raw, Mapping):
            raise error(f"{where.rstrip('.') or 'the configuration'}: expected a mapping of "
                        f"fields, got {raw!r}")
        self.check_names(raw, where, error, ignore=ignore)
        out = {k: raw[k] for k in ignore if k in raw}
        for f in self.fields:
            if f.name not in raw:
                if f.required:
                    raise error(f"{where}{f.name}: missing")
                out[f.name] = f.default
            else:
                out[f.name] = f.check(raw[f.name], where, error)
        return out

    def check_names(self, raw: Mapping[str, Any], where: str = "",
                    error: type[InputError] = ConfigError, *, ignore: Sequence[str] = ()) -> None:
        """Raise ``error`` naming the keys of ``raw`` that are not this section's fields."""
        unknown = sorted(str(k) for k in set(raw) - set(self.names) - set(ignore))
        if unknown:
            raise error(f"{where}unknown {self.noun}(s) {unknown}; known: {sorted(self.names)}")

    @classmethod
    def of(cls, typed: type) -> Section:
        """The section of a typed options class (a dataclass, :class:`bocast.options.Options`):
        its fields in order, each the :class:`Field` its metadata holds (:func:`about`) or one
        made from the annotation and the metadata's schema: ``X | None`` is nullable, a
        ``Literal`` gives the choices, ``list[...]``/``dict[...]`` the kind list/dict and a
        union of others ``object``. A shared Field must agree with the annotation and default,
        so the two cannot drift (a TypeError names the field). The messages call a key
        ``typed.noun``."""
        if typed in _SECTIONS:
            return _SECTIONS[typed]
        hints = typing.get_type_hints(typed)
        fields = []
        for f in dataclasses.fields(typed):
            kind, choices, nullable = _annotated(hints[f.name])
            default = (f.default_factory() if f.default_factory is not dataclasses.MISSING
                       else REQUIRED if f.default is dataclasses.MISSING else f.default)
            spec = f.metadata.get(SCHEMA, {})
            if isinstance(spec, Field):
                if (spec.name, spec.kind, spec.choices, spec.nullable, spec.default) != \
                        (f.name, kind, choices, nullable, default):
                    raise TypeError(f"{typed.__qualname__}.{f.name}: the annotation or default "
                                    f"does not match its Field {spec}")
                fields.append(spec)
            else:
                fields.append(Field(f.name, kind, default, choices=choices, nullable=nullable,
                                    **spec))
        section = _SECTIONS[typed] = cls(tuple(fields), getattr(typed, "noun", "field"), typed)
        return section


_SECTIONS: dict[type, Section] = {}
#: the key of a typed options class's field metadata that holds the field's schema
SCHEMA = "bocast.schema"


def _annotated(hint: Any) -> tuple[type, tuple, bool]:
    """(kind, choices, nullable) of a typed options field's annotation."""
    args = typing.get_args(hint)
    union = typing.get_origin(hint) in (typing.Union, types.UnionType)
    nullable = union and type(None) in args
    rest = tuple(a for a in args if a is not type(None))
    if nullable and len(rest) == 1:
        hint, union = rest[0], False
    if union or hint is Any:  # a value of several types: its owner checks it
        return object, (), nullable
    if typing.get_origin(hint) is Literal:
        choices = typing.get_args(hint)
        return type(choices[0]), choices, nullable
    kind = typing.get_origin(hint) or hint
    if kind not in (int, float, str, bool, list, dict):
        raise TypeError(f"a typed option cannot be of type {hint!r}")
    return kind, (), nullable


def about(field: Field | None = None, /, **spec: Any) -> dict[str, Any]:
    """The metadata of a typed options class's field: ``field``, a :class:`Field` shared with
    other definitions (checked against the class's name, kind and default), or the rest of the
    field's schema: ``min``, ``max``, ``above``, ``pattern``, ``doc``; the class gives its
    name, default, kind, choices and nullability (:meth:`Section.of`). A required field is
    ``x: int = dataclasses.field(metadata=about(doc=...))``: no default, as mypy then sees."""
    return {SCHEMA: field if field is not None else spec}


def opt(default: Any, /, *, min: float | None = None, max: float | None = None,
        above: float | None = None, pattern: str | None = None, doc: str = "") -> Any:
    """A typed options class's field with ``default`` (a list or mapping is copied for each
    object) and the rest of its schema (:func:`about`)."""
    spec = {k: v for k, v in dict(min=min, max=max, above=above, pattern=pattern).items()
            if v is not None}
    return _dataclass_field(default, about(doc=doc, **spec))


def _dataclass_field(default: Any, metadata: dict[str, Any]) -> Any:
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=functools.partial(copy.deepcopy, default),
                                 metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


# --------------------------------------------------------------------------- shared fields
#
# The limits are generous: they exist so that a typo fails at once with a message instead of
# an hour later with a traceback (or never, as a run that cannot end).

MAX_TRIALS = 1_000_000
SEED = Field("seed", int, 0, min=0, max=2**31 - 1, doc="random seed")
TRIALS = Field("trials", int, min=1, max=MAX_TRIALS, doc="trials (measured configurations)")
SECONDS = Field("seconds", float, None, above=0, nullable=True, doc="wall-time budget")
BATCH_SIZE = Field("batch_size", int, 32, min=1, max=10_000,
                   doc="configurations per batch (runner rpc with servers that build: left "
                       "out, one per build worker of the fleet)")
WORKERS = Field("workers", int, None, min=1, max=1024, nullable=True,
                doc="processes (default: the machine's cores)")
REPEATS = Field("repeats", int, 10, min=1, max=10_000, doc="timed repeats per kernel")
RUN_TIMEOUT = Field("run_timeout", float, 30.0, above=0, max=86_400,
                    doc="seconds per kernel run")
L2 = Field("l2", str, "warm", choices=("warm", "flushed"),
           doc="L2 cache before each timed launch: warm (the kernel's own inputs, as in a "
               "loop of calls) or flushed (a buffer of twice the L2 written before every "
               "launch and its time subtracted: cold-cache figures); recorded with every figure")
PAIRED = Field("paired", bool, True,
               doc="time each kernel with the reference, their CUDA-graph replays alternating "
                   "in one task (at least 30 pairs), and rank the run's kernels by that ratio "
                   "(the record's vs_reference), free of the GPU clock's drift over the run; "
                   "false: each kernel timed alone, ranked by TFLOPS (runners local, rpc and "
                   "standin; a runner class of one's own times alone unless it declares "
                   "pairs)")
RETIME_TOP = Field("retime_top", int, 5, min=0, max=100,
                   doc="a live run ends by timing its best this many distinct kernels and the "
                       "reference in turn, in rounds, in one process: the run's figure "
                       "(0: none, the in-run figure stands)")
RETIME_ROUNDS = Field("retime_rounds", int, 5, min=1, max=100,
                      doc="rounds of that final re-timing (each times the reference, then every "
                          "kernel in a fresh random order)")
BUILD_TIMEOUT = Field("build_timeout", float, 180.0, above=0, max=86_400,
                      doc="seconds per build (apply, lower, nvcc)")
SAMPLE = Field("sample", int, 0, min=0, max=1_000_000, doc="configurations to sample")
SIZE_DRAWS = Field("size_draws", int, 200_000, min=1, max=100_000_000,
                   doc="uniform draws of the feasible-set size estimate")
PROGRESS_EVERY = Field("progress_every", int, 50, min=1, max=MAX_TRIALS,
                       doc="a progress line every this many configurations (stderr)")
REJECT_SPILLS = Field("reject_spills", bool, False,
                      doc="build-time filter: record kernels whose ptxas report shows register "
                          "spills, a stack frame or serialized wgmma instructions as "
                          "build_rejected, without running them")
MAX_SECONDS = Field("max_seconds", float, None, above=0, nullable=True,
                    doc="start no new batch after this many seconds; the next call resumes "
                        "from the store (a device session's time limit)")
# inner spaces are allowed (experiments/ablation/bo_replay.yaml labels "bo q16"); a label
# names files, so no '/', no leading or trailing space, nothing else
LABEL = Field("label", str, pattern=r"[A-Za-z0-9]([A-Za-z0-9._+ -]*[A-Za-z0-9._+-])?",
              doc="a strategy's name in results and file names")
