"""Search strategies behind one ask/tell interface; each strategy is one file."""

from bocast.strategies.base import (
                                    Strategy,
                                    StrategyError,
                                    make_strategy,
                                    strategies,
                                    strategy_class,
)

__all__ = ["Strategy", "StrategyError", "make_strategy", "strategies", "strategy_class"]
