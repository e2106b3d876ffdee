"""Random search: uniform samples of the feasible set, without repeats."""

from __future__ import annotations

from dataclasses import dataclass

from bocast.schema import Section
from bocast.strategies.base import Strategy, StrategyOptions, register


@dataclass(frozen=True, kw_only=True)
class RandomOptions(StrategyOptions):
    """Options of strategy ``random`` (:class:`RandomSearch`): none."""

    strategy = "random"


@register
class RandomSearch(Strategy):
    name = "random"
    options = Section.of(RandomOptions)

    def _ask(self, n):
        return self.fresh_samples(n)
