"""Search strategies behind one ask/tell interface; each strategy is one file."""

from bocast.strategies.base import Strategy, StrategyError, make_strategy, strategies

__all__ = ["Strategy", "StrategyError", "make_strategy", "strategies"]
