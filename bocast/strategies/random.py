"""Random search: uniform samples of the feasible set, without repeats."""

from __future__ import annotations

from bocast.strategies.base import Strategy, register


@register
class RandomSearch(Strategy):
    name = "random"
    def _ask(self, n):
        return self.fresh_samples(n)
