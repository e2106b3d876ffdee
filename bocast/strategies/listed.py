"""Given configurations in a given order: ``bocast measure --sample N / --all`` as a strategy of
the one loop (:class:`bocast.run.tuner.Tuner`). Not a search strategy (it is not registered, and no
configuration names it): the command draws the sample or enumerates the sub-space, this walks
it."""

from __future__ import annotations

from collections.abc import Sequence

from bocast.space.candidates import Candidates
from bocast.space.space import Config, Space
from bocast.strategies.base import Strategy


class Listed(Strategy):
    name = "listed"
    #: its next batch does not depend on the last one's results, so the loop may ask it ahead
    #: and build batch i + 1 while batch i runs (:func:`bocast.run.tuner.run_interleaved`)
    adaptive = False

    def __init__(self, candidates: Candidates, configs: Sequence[Config], *, seed: int = 0):
        super().__init__(candidates, seed=seed)
        self.configs = list(configs)
        self._next = 0

    def _ask(self, n: int) -> list[Config]:
        out: list[Config] = []
        while len(out) < n and self._next < len(self.configs):
            c = self.configs[self._next]
            self._next += 1
            if Space.key(c) not in self.proposed:
                out.append(c)
        return out
