"""bocast's extension example (docs/extending.md): a strategy and an operator defined outside
the package. Installed, its entry points (pyproject.toml: groups ``bocast.strategies`` and
``bocast.operators``) name this module; bocast imports it when it lists its strategies or
operators, and the two ``register`` decorators below do the rest: ``bocast tune linear --shape
64,4096,4096 --strategy greedy`` then works as for a shipped operator and strategy."""

from __future__ import annotations

from dataclasses import dataclass

from bocast.schema import Section, opt
from bocast.space.operators.gemm import Gemm
from bocast.space.operators.operator import register as register_operator
from bocast.strategies.base import Strategy, StrategyOptions
from bocast.strategies.base import register as register_strategy


@dataclass(frozen=True, kw_only=True)
class GreedyOptions(StrategyOptions):
    """Options of strategy ``greedy`` (checked like any strategy's: ``--set strategy.pool=8``)."""

    strategy = "greedy"
    pool: int = opt(4, min=1, max=64, doc="fresh samples drawn per configuration proposed")


@register_strategy
class Greedy(Strategy):
    """A batch of uniform samples, then, each batch, of ``pool`` fresh samples per pick the ones
    that differ from the best kernel so far in the fewest knobs: local search by sampling."""

    name = "greedy"
    options = Section.of(GreedyOptions)

    def _ask(self, n):
        fresh = self.fresh_samples(self.hyper["pool"] * n)
        ok = self.measured_ok()
        if not ok:
            return fresh[:n]
        best = self.config_of(max(ok, key=lambda r: r.tflops))
        return sorted(fresh, key=lambda c: sum(c[k] != best[k] for k in best))[:n]


@register_operator
class Linear(Gemm):
    """``torch.nn.functional.linear(X, W)`` without a bias: Y[T, OUT] = X[T, IN] W[OUT, IN]^T,
    the GEMM of T tokens by a weight stored [OUT, IN] (layout NT): GEMM's knobs, spaces and
    vendor reference under the name a model's layer has."""

    name = "linear"
    shape_help = "T,OUT,IN (Y[T,OUT] = X[T,IN] @ W[OUT,IN]^T: nn.Linear without a bias)"
    default_shape = (64, 4096, 4096)
