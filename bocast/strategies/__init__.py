"""Search strategies behind one ask/tell interface; each strategy is one file.

Each strategy's options are a typed class beside it, e.g. ``BOOptions(acquisition="logei")``
(:class:`bocast.strategies.base.StrategyOptions`); they are importable from here, their modules
imported on first access (as :func:`strategies` imports them)."""

from typing import TYPE_CHECKING, Any

from bocast.strategies.base import (
                                    Strategy,
                                    StrategyError,
                                    StrategyOptions,
                                    make_strategy,
                                    options_class_name,
                                    strategies,
                                    strategy_class,
                                    typed_options,
)

if TYPE_CHECKING:  # what mypy and an IDE see; at run time, __getattr__ below
    from bocast.strategies.bo import BOOptions
    from bocast.strategies.ga import CGAOptions, GAOptions
    from bocast.strategies.random import RandomOptions

__all__ = ["BOOptions", "CGAOptions", "GAOptions", "RandomOptions", "Strategy", "StrategyError",
           "StrategyOptions", "make_strategy", "strategies", "strategy_class", "typed_options"]


def __getattr__(attr: str) -> Any:
    # only *Options: any other missing name (a submodule being imported) must not import them
    for name in strategies() if attr.endswith("Options") else ():
        if options_class_name(name) == attr:
            return typed_options(name)
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")
