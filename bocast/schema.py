"""One schema for every option: its type, range, default and help, checked in one place.

A :class:`Field` checks a value from a YAML configuration (:meth:`Field.check`) or parses one
from the command line (:meth:`Field.parse`, an argparse ``type``), with the same rule and the
same message; a :class:`Section` is a mapping of fields (a configuration's ``budget``, its
``runner_options``, a strategy's hyperparameters). The CLI, ``bocast tune``, ``bocast compare``
and the strategies share these definitions, so an option has one range wherever it is given.
:meth:`Section.dataclass` derives a typed configuration class from a section (:class:`Budget`,
:class:`RunnerOptions`, :class:`Workload`, ``bocast.strategies.BOOptions``, ...): its fields,
defaults and checks are the section's, so adding a field to a section adds it there too.

Checking only reads: nothing runs and nothing is written before every field has passed.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

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


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


@dataclass(frozen=True)
class Section:
    """A mapping of fields, checked whole: unknown keys, missing required ones and each value."""

    fields: tuple[Field, ...]
    noun: str = "field"  # what the messages call a key: "field" (YAML), "option" (strategies)

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

    def dataclass(self, name: str, *, where: str = "", module: str = __name__,
                  strategy: str | None = None, doc: str = "",
                  check: Callable[[Any], None] | None = None) -> type[Any]:
        """A frozen, keyword-only dataclass of this section's fields (their defaults; a choice
        field is annotated ``Literal[...]``, a nullable one ``... | None``), checked on
        construction by :meth:`check` with ``where`` before the field, so a bad value raises
        the ConfigError a configuration file gets; a required field left out raises "missing"
        as there. ``strategy``: the strategy these are the options of (see
        :meth:`Options.mapping`); ``check``: what else the object must pass once its fields
        have (the whole workload's, an operator's rules), called with the object. A keyword
        that is no field raises the "unknown field" ConfigError of a configuration file, not
        Python's TypeError. Typed ``Any`` for mypy, which cannot see generated fields."""
        specs: list[tuple[str, Any, Any]] = []
        for f in self.fields:
            kind: Any = Literal[f.choices] if f.choices else Any if f.kind is object else f.kind
            default = (dataclasses.field(default_factory=functools.partial(copy.deepcopy,
                                                                            f.default))
                       if isinstance(f.default, (list, dict)) else f.default)
            specs.append((f.name, kind | None if f.nullable else kind, default))
        cls = dataclasses.make_dataclass(
            name, specs, bases=(Options,), frozen=True, kw_only=True,
            namespace={"section": self, "where": where, "strategy": strategy,
                       "extra_check": staticmethod(check) if check else None,
                       "__module__": module,
                       "__doc__": doc or f"Typed {where.rstrip('.: ') or 'options'}: "
                                         f"{', '.join(self.names)} (bocast.schema)."})
        init: Any = getattr(cls, "__init__")  # noqa: B009 - mypy: no __init__ on an instance

        @functools.wraps(init)
        def checked_init(obj, *args: Any, **kwargs: Any) -> None:
            if args:
                raise ConfigError(f"{where.rstrip('.: ') or name}: give the fields by name "
                                  f"({', '.join(self.names)}), got {len(args)} positional")
            self.check_names(kwargs, where, ConfigError)
            init(obj, **kwargs)

        setattr(cls, "__init__", checked_init)  # noqa: B010 - as above
        return cls


class Options:
    """The base of :meth:`Section.dataclass`'s classes: the check on construction, and the
    mapping a configuration file would hold, which the API passes on to the same parsing."""

    section: ClassVar[Section]
    where: ClassVar[str]
    strategy: ClassVar[str | None]
    extra_check: ClassVar[Callable[[Any], None] | None]  # Section.dataclass's ``check``

    def __post_init__(self) -> None:
        given = {f.name: getattr(self, f.name) for f in self.section.fields}
        checked = self.section.check({k: v for k, v in given.items() if v is not REQUIRED},
                                     self.where, ConfigError)
        for k, v in checked.items():  # an int given for a float field becomes a float
            object.__setattr__(self, k, v)
        extra = type(self).extra_check
        if extra is not None:
            extra(self)

    def to_dict(self, *, defaults: bool = False) -> dict[str, Any]:
        """The fields set to other than their defaults (and the required ones), or with
        ``defaults`` every field."""
        return {f.name: copy.deepcopy(getattr(self, f.name)) for f in self.section.fields
                if defaults or f.required or getattr(self, f.name) != f.default}

    def mapping(self) -> dict[str, Any]:
        """What a configuration holds in this place: :meth:`to_dict`, led by the strategy's
        ``name`` for a strategy's options."""
        return {**({"name": self.strategy} if self.strategy else {}), **self.to_dict()}

    def entry(self, **keys: Any) -> dict[str, Any]:
        """A comparison's strategy entry of these options and ``keys`` (label, trials, seeds,
        batch_size: checked where the comparison is)."""
        return {**self.mapping(), **keys}


def plain(value: Any) -> Any:
    """``value`` with every :class:`Options` in it, at any depth of mappings and lists, as its
    :meth:`Options.mapping`: a typed configuration becomes the one a YAML file gives."""
    if isinstance(value, Options):
        return value.mapping()
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


# --------------------------------------------------------------------------- shared fields
#
# The limits are generous: they exist so that a typo fails at once with a message instead of
# an hour later with a traceback (or never, as a run that cannot end).

MAX_TRIALS = 1_000_000
SEED = Field("seed", int, 0, min=0, max=2**31 - 1, doc="random seed")
TRIALS = Field("trials", int, min=1, max=MAX_TRIALS, doc="trials (measured configurations)")
SECONDS = Field("seconds", float, None, above=0, nullable=True, doc="wall-time budget")
BATCH_SIZE = Field("batch_size", int, 32, min=1, max=10_000, doc="configurations per batch")
WORKERS = Field("workers", int, None, min=1, max=1024, nullable=True,
                doc="processes (default: the machine's cores)")
REPEATS = Field("repeats", int, 10, min=1, max=10_000, doc="timed repeats per kernel")
RUN_TIMEOUT = Field("run_timeout", float, 30.0, above=0, max=86_400,
                    doc="seconds per kernel run")
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

RUNNER_OPTIONS = Section((REPEATS, RUN_TIMEOUT, BUILD_TIMEOUT, WORKERS, REJECT_SPILLS))
BUDGET = Section((TRIALS, SECONDS))
#: a workload's keys as a configuration writes them; what each operator accepts (its shape's
#: length, its dtypes and layouts) is the operator's check (bocast.operator.from_workload)
WORKLOAD = Section((
    Field("op", str, doc="operator name (bocast ops lists them)"),
    Field("shape", list, doc="the operator's extents, e.g. [M, N, K] for gemm"),
    Field("dtype", str, None, nullable=True, doc="input:accumulator types"),
    Field("layout", str, None, nullable=True, doc="gemm, bmm: the layout of B"),
    Field("space", str, None, nullable=True, doc="schedule-space version (default: newest)"),
))

Budget = BUDGET.dataclass("Budget", where="budget.")
RunnerOptions = RUNNER_OPTIONS.dataclass("RunnerOptions", where="runner_options.")


def _check_workload(workload: Options) -> None:
    """A :class:`Workload`, as the operator checks a configuration's (its shape's length, its
    dtypes and layouts): README promises a typed object is checked as it is built."""
    from bocast.operator import WorkloadError, from_workload

    try:
        from_workload(workload.mapping())
    except WorkloadError as e:
        raise ConfigError(f"workload: {e}") from None


Workload = WORKLOAD.dataclass("Workload", where="workload: ", check=_check_workload)
