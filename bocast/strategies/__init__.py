"""Search strategies behind one ask/tell interface; each strategy is one file.

Each strategy's options as a typed class, e.g. ``BOOptions(acquisition="logei")``, are made from
its ``options`` on first access (:func:`bocast.strategies.base.typed_options`)."""

from typing import Any

from bocast.strategies.base import (
                                    Strategy,
                                    StrategyError,
                                    make_strategy,
                                    options_class_name,
                                    strategies,
                                    strategy_class,
                                    typed_options,
)

__all__ = ["Strategy", "StrategyError", "make_strategy", "strategies", "strategy_class",
           "typed_options"]


def __getattr__(attr: str) -> Any:
    # only *Options: any other missing name (a submodule being imported) must not import them
    for name in strategies() if attr.endswith("Options") else ():
        if options_class_name(name) == attr:
            return typed_options(name)
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")
