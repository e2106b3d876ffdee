"""Runner kinds: the one table from the name a configuration (``runner:``) or a command
(``--runner``) gives to the :class:`~bocast.measure.runner.Runner` class it makes, so that a
command asks the class what it needs (its declarations: ``live``, ``needs_gpu``, ``compiles``,
``answers_records``, ``synthetic``) instead of comparing names.

A kind is one of:

- a shipped kind: ``local`` (this machine's GPU), ``rpc`` (GPU servers behind a tracker),
  ``replay`` (a recorded dataset) or ``standin`` (synthetic timings on the CPU); the old names
  ``tvm`` and ``gpu`` are ``local`` (:func:`runner_kind` says so once);
- the name of an installed package's runner, under entry-point group ``bocast.runners`` (its
  value a Runner subclass, ``package.module:ClassName``);
- ``package.module:ClassName`` itself, a Runner subclass importable from here.

A kind that is not shipped is made by :func:`bocast.measure.parts.make_runner` as
``cls(timeout_s=..., repeats=..., seed=..., l2=...)`` (docs/extending.md). A runner object passed
to the API is of the kind :func:`kind_of` names (its class registered here under it).
"""

from __future__ import annotations

import importlib
from typing import Any

from bocast.errors import InputError
from bocast.measure.runner import Runner
from bocast.progress import say
from bocast.registry import load_plugins

#: the shipped kinds, each the class that runs it (imported on first use: rpc's is not small)
SHIPPED = {"local": "bocast.measure.runner:GpuRunner",
           "rpc": "bocast.measure.rpc.runner:RpcRunner",
           "replay": "bocast.measure.replay:ReplayRunner",
           "standin": "bocast.measure.standin:StandinRunner"}
RUNNER_KINDS = tuple(SHIPPED)
#: the entry-point group of installed packages' runners
GROUP = "bocast.runners"
#: the names the local runner had before 2026-11-26
OLD_NAMES = {"tvm": "local", "gpu": "local"}
#: every kind resolved in this process (shipped, plugins, specs, API objects' classes)
_CLASSES: dict[str, type[Runner]] = {}
_told: set[str] = set()


def runner_kind(name: Any) -> Any:
    """``name`` with an old spelling replaced (one line on stderr the first time); anything
    else as given, for the caller's check to refuse by name."""
    if isinstance(name, str) and name in OLD_NAMES:
        if name not in _told:
            _told.add(name)
            say(f"note: runner {name!r} is now called {OLD_NAMES[name]!r} (the old name still "
                "works)")
        return OLD_NAMES[name]
    return name


def expected() -> str:
    """What a runner kind may be, in words (the messages that refuse one say it)."""
    return (f"one of {list(RUNNER_KINDS)}, an installed runner's name (entry point group "
            f"{GROUP}) or package.module:ClassName")


def runner_class(kind: str) -> type[Runner]:
    """The Runner subclass of ``kind`` (module docstring); an InputError naming the kind where
    it is none of those (a plugin that fails to import: one line naming it)."""
    kind = runner_kind(kind)
    if not isinstance(kind, str) or not kind:
        raise InputError(f"runner: expected {expected()}, got {kind!r}")
    if kind in _CLASSES:
        return _CLASSES[kind]
    spec = SHIPPED.get(kind) or (kind if ":" in kind else None)
    if spec is None:
        plugins = load_plugins(GROUP, InputError)
        if kind not in plugins:
            raise InputError(f"runner: expected {expected()}, got {kind!r}")
        cls: Any = plugins[kind]
    else:
        cls = _import(spec)
    if not (isinstance(cls, type) and issubclass(cls, Runner)):
        raise InputError(f"runner {kind}: {cls!r} is not a bocast.measure.runner.Runner subclass")
    if kind not in SHIPPED:  # a shipped one is looked up each time (a test may replace it)
        _CLASSES[kind] = cls
    return cls


def _import(spec: str) -> Any:
    module, _, name = spec.partition(":")
    try:
        obj: Any = importlib.import_module(module)
        for part in name.split("."):
            obj = getattr(obj, part)
    except Exception as e:  # the module's own failure, whatever it is: name the runner
        raise InputError(f"runner {spec}: cannot be imported ({type(e).__name__}: {e})") from e
    return obj


def kind_of(runner: Runner) -> str:
    """The kind of a runner object: the shipped kind or installed runner whose class it is, else
    ``module:QualName`` of its class, registered here so that :func:`runner_class` answers it
    (a class of a script's ``__main__`` or defined in a function included)."""
    cls = type(runner)
    for kind, known in list(_CLASSES.items()) + [(k, None) for k in SHIPPED]:
        if known is cls or (known is None and SHIPPED[kind] == _spec(cls)):
            return kind
    spec = _spec(cls)
    _CLASSES[spec] = cls
    return spec


def _spec(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"
