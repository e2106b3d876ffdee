"""Search strategies behind one ask/tell interface; each strategy is one file.

Each strategy's options are a typed class beside it, e.g. ``BOOptions(acquisition="logei")``
(:class:`bocast.strategies.base.StrategyOptions`); they are importable from here, their modules
imported on first access (as :func:`strategies` imports them). The strategy modules import
only :mod:`bocast.strategies.base` (the interface and the registry); this package's face is
what knows them all, so no arrow runs from the interface back to a strategy."""

from typing import TYPE_CHECKING, Any

from bocast.registry import load_plugins, lookup
from bocast.space.candidates import Candidates
from bocast.strategies.base import (
    Strategy,
    StrategyError,
    StrategyOptions,
    options_class_name,
    registered,
)

if TYPE_CHECKING:  # what mypy and an IDE see; at run time, __getattr__ below
    from bocast.strategies.bo.strategy import BOOptions
    from bocast.strategies.ga import CGAOptions, GAOptions
    from bocast.strategies.random import RandomOptions

__all__ = ["BOOptions", "CGAOptions", "GAOptions", "RandomOptions", "Strategy", "StrategyError",
           "StrategyOptions", "make_strategy", "strategies", "strategy_class", "typed_options"]


def strategies() -> dict[str, type[Strategy]]:
    """Every strategy by name: importing a strategy's module registers it. Imported here, on
    first use, not with the package: bo's module and what it imports cost about 0.3 s. Then the
    plugins of entry-point group ``bocast.strategies`` (docs/extending.md)."""
    from bocast.strategies import ga, random  # noqa: F401
    from bocast.strategies.bo import strategy as bo  # noqa: F401

    load_plugins("bocast.strategies", StrategyError)  # installed packages' own (extending.md)
    return registered()


def strategy_class(name: str) -> type[Strategy]:
    return lookup(strategies(), name, "strategy", StrategyError)


def make_strategy(name: str, candidates: Candidates, *, seed: int, **hyper: Any) -> Strategy:
    return strategy_class(name)(candidates, seed=seed, **hyper)


def typed_options(name: str) -> type[StrategyOptions]:
    """The typed options of strategy ``name`` (``bo``: ``BOOptions``, ``random``:
    ``RandomOptions``)."""
    typed = strategy_class(name).options.typed
    assert typed is not None and issubclass(typed, StrategyOptions)  # register() checked
    return typed


def __getattr__(attr: str) -> Any:
    # only *Options: any other missing name (a submodule being imported) must not import them
    for name in strategies() if attr.endswith("Options") else ():
        if options_class_name(name) == attr:
            return typed_options(name)
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")
