"""Typed options: hand-written frozen, keyword-only dataclasses, each the one definition of a
configuration's mapping (:class:`Budget`, :class:`RunnerOptions`, :class:`Workload`, each
strategy's options such as ``bocast.strategies.BOOptions``). A field's metadata holds its range
and help (:func:`bocast.schema.opt`), and :meth:`bocast.schema.Section.of` derives from the
class the section that checks the YAML mapping; so mypy and an IDE see the fields, and a
configuration file, a typed object and the generated reference (docs/configuration.md) cannot
disagree. An object is checked as it is built, with the message a configuration file gets.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from bocast import schema
from bocast.schema import ConfigError, Section, about, opt


class Options:
    """The base of the typed options classes: the check on construction, and the mapping a
    configuration file would hold, which the API passes on to the same parsing. A subclass is
    a ``@dataclass(frozen=True, kw_only=True)`` whose fields are made by
    :func:`bocast.schema.opt` (or carry :func:`bocast.schema.about` metadata)."""

    #: what the messages put before a field's name (``budget.``, ``strategy.``)
    where: ClassVar[str] = ""
    #: what the messages call a key: "field" (YAML), "option" (a strategy's)
    noun: ClassVar[str] = "field"
    #: the strategy these are the options of (:meth:`mapping`), if any
    strategy: ClassVar[str | None] = None

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        # checked before the dataclass's __init__, whose TypeError for a positional value, an
        # unknown keyword or a missing field would not name the field as a configuration does
        section = Section.of(cls)
        if args:
            raise ConfigError(f"{cls.where.rstrip('.: ') or cls.__name__}: give the fields by "
                              f"name ({', '.join(section.names)}), got {len(args)} positional")
        section.check(kwargs, cls.where, ConfigError)
        return super().__new__(cls)

    def __post_init__(self) -> None:
        for f in Section.of(type(self)).fields:  # an int given for a float field is a float
            object.__setattr__(self, f.name, f.check(getattr(self, f.name), self.where))

    def __reduce__(self) -> tuple[Any, ...]:
        # copy and pickle rebuild through the constructor (its __new__ needs the fields)
        return _rebuild, (type(self), self.to_dict(defaults=True))

    def to_dict(self, *, defaults: bool = False) -> dict[str, Any]:
        """The fields set to other than their defaults (and the required ones), or with
        ``defaults`` every field."""
        return {f.name: copy.deepcopy(getattr(self, f.name))
                for f in Section.of(type(self)).fields
                if defaults or f.required or getattr(self, f.name) != f.default}

    def mapping(self) -> dict[str, Any]:
        """What a configuration holds in this place: :meth:`to_dict`, led by the strategy's
        ``name`` for a strategy's options."""
        return {**({"name": self.strategy} if self.strategy else {}), **self.to_dict()}

    def entry(self, **keys: Any) -> dict[str, Any]:
        """A comparison's strategy entry of these options and ``keys`` (label, trials, seeds,
        batch_size: checked where the comparison is)."""
        return {**self.mapping(), **keys}


def _rebuild(cls: type[Options], fields: dict[str, Any]) -> Options:
    return cls(**fields)


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


@dataclass(frozen=True, kw_only=True)
class Budget(Options):
    """When a run ends: the first of its limits reached."""

    where = "budget."
    trials: int = dataclasses.field(metadata=about(schema.TRIALS))
    seconds: float | None = schema.SECONDS.opt()


@dataclass(frozen=True, kw_only=True)
class RunnerOptions(Options):
    """How kernels are built and timed (live runners)."""

    where = "runner_options."
    repeats: int = schema.REPEATS.opt()
    run_timeout: float = schema.RUN_TIMEOUT.opt()
    build_timeout: float = schema.BUILD_TIMEOUT.opt()
    workers: int | None = schema.WORKERS.opt()
    reject_spills: bool = schema.REJECT_SPILLS.opt()
    l2: Literal["warm", "flushed"] = schema.L2.opt()
    paired: bool = schema.PAIRED.opt()
    retime_top: int = schema.RETIME_TOP.opt()
    retime_rounds: int = schema.RETIME_ROUNDS.opt()


@dataclass(frozen=True, kw_only=True)
class Workload(Options):
    """What is tuned: a workload's keys as a configuration writes them. What each operator accepts
    (its shape's length, its dtypes and layouts) is the operator's check
    (:func:`bocast.space.operators.operator.from_workload`), made here too as the object is
    built."""

    where = "workload: "
    op: str = dataclasses.field(metadata=about(doc="operator name (bocast ops lists them)"))
    shape: list[int] = dataclasses.field(
        metadata=about(doc="the operator's extents, e.g. [M, N, K] for gemm"))
    dtype: str | None = opt(None, doc="input:output types: fp16:fp32 (the default) or "
                                      "fp16:fp16; bf16:fp32 or bf16:bf16 on space v3 (gemm, "
                                      "bmm, the direct convolutions); e4m3:bf16, e4m3:fp32, "
                                      "e5m2xe4m3:bf16 or "
                                      "e5m2xe4m3:fp32 on space v3 (gemm: fp8 with "
                                      "per-tensor scales; e5m2xe4m3: A in e5m2); "
                                      "e4m3b128:bf16 or e4m3b128:fp32 (gemm, v3: fp8 "
                                      "with 1x128 and 128x128 block scales)")
    layout: str | None = opt(None, doc="gemm, bmm: the layout of B: NT (the default) or NN")
    fuse: str | None = opt(None, doc="gemm on space v3: the fused epilogue act(scale (A B^T) + "
                                     "bias): none (the default), bias, relu, gelu, silu, "
                                     "bias+relu, bias+gelu or bias+silu")
    space: str | None = opt(None, doc="schedule-space version: v1, v2, v3, or auto (the shape "
                                      "chooses: v3 where it beat v2 and takes the workload, "
                                      "else v2; docs/operators.md) (null: v2, so a file means "
                                      "what it meant; bocast tune OP --shape defaults to auto)")
    sm_count: int | None = opt(None, doc="gemm, bmm, conv on space v3: the target GPU's SMs (its "
                                         "persistent grid and waves); null: a live local run "
                                         "reads the GPU's, else 132 (H100 SXM, H200)")

    def __post_init__(self) -> None:
        super().__post_init__()
        # lazy: the operators load their space files (bocast.space.operators), which `import bocast`
        # does not need
        from bocast.space.operators.operator import WorkloadError, from_workload

        try:
            from_workload(self.mapping())
        except WorkloadError as e:
            raise ConfigError(f"workload: {e}") from None


BUDGET = Section.of(Budget)
RUNNER_OPTIONS = Section.of(RunnerOptions)
WORKLOAD = Section.of(Workload)


@dataclass(frozen=True)
class QuickOption:
    """A setting of ``bocast tune OP --shape ...`` (its flag: ``--name-with-dashes``) and of
    ``bocast.tune(op=..., shape=..., name=value)`` (:func:`bocast.api.quick_config`): it sets
    the configuration's field ``key`` (``section.field`` inside a section), checked on the
    command line by ``field`` (the configuration's own where it has one). ``default``: what a
    quick run takes when it is left out (None: the configuration's own, as ``doc`` says)."""

    name: str
    key: str
    field: schema.Field
    default: Any = None

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def help(self) -> str:
        f = self.field
        said = [f.expected(cli=True, storage_limits=False)] if f.kind is not str else []
        return f.doc + (f" ({'; '.join(said + [f'default {self.default}'])})"
                         if self.default is not None else f" ({said[0]})" if said else "")


def _text(name: str, doc: str) -> schema.Field:
    return schema.Field(name, str, None, nullable=True, doc=doc)


#: ``bocast tune OP --shape ...``'s settings, in its --help's order, and the keywords that
#: ``bocast.tune(op=..., shape=...)`` takes for them: the one list of both
QUICK_OPTIONS = (
    QuickOption("dtype", "workload.dtype", WORKLOAD["dtype"]),
    QuickOption("layout", "workload.layout", WORKLOAD["layout"]),
    QuickOption("fuse", "workload.fuse", WORKLOAD["fuse"]),
    QuickOption("space", "workload.space", _text(
        "space", "schedule space: auto (where it beat v2 at such shapes and takes the "
                 "workload: v3, else v2), v3 (Hopper: GEMM, bmm, conv2d), v2 or v1"), "auto"),
    QuickOption("strategy", "strategy.name", _text("strategy", "bo, cga, random, ..."), "bo"),
    QuickOption("trials", "budget.trials", BUDGET["trials"], 64),
    QuickOption("seconds", "budget.seconds", BUDGET["seconds"]),
    QuickOption("seed", "seed", schema.SEED, 0),
    QuickOption("batch_size", "batch_size", schema.BATCH_SIZE, 16),
    QuickOption("dataset", "dataset", _text(
        "dataset", "replay: a recorded dataset (default: the shipped one of the workload)")),
    QuickOption("output", "output", _text(
        "output", "folder of records.db and summary.json (default "
                  "runs/OP_SHAPE_SPACE_STRATEGY_sSEED)")),
    QuickOption("store", "store", _text("store", "the record store (default "
                                                 "OUTPUT/records.db)")),
    QuickOption("l2", "runner_options.l2", schema.L2, "warm"),
    QuickOption("retime_top", "runner_options.retime_top", schema.RETIME_TOP, 5),
    QuickOption("warm_start", "strategy.warm_start", _text(
        "warm_start", "auto (default: from the records library), none, or sources, "
                      "comma-separated; a strategy without a warm start (ga, random) takes "
                      "none or auto: it starts cold")),
)
