"""Model inputs: the space's knob encoding, optionally followed by quantities the space derives
from the knobs (issue 11: "the GP sees raw knobs only").

The knob encoding holds log2 of every split level, so a block tile's edge (log2 bm = log2
tile_i[1] + log2 tile_i[2] + log2 of the instruction's m) is a sum of columns, and shared memory
or registers are products of several knobs: an ARD kernel or a tree, which split along single
columns, see them only through many observations. The derived columns give them directly:

==================  =========================================================================
``log2 bm``, ``bn``  thread-block tile in elements along M and N
``log2 bk``          k extent of one shared-memory tile (v2 ``bk``; v1 ``kc``)
``log2 threads``     threads per block
``log2 smem``        shared memory per block, bytes (all stages, staging tile included)
``log2 registers``   registers per thread: the space's estimate (v2) or accumulator +
                     fragment registers (v1)
``log2 blocks``      thread blocks of the grid (tile_i[0] x tile_j[0]): waves over the SMs
==================  =========================================================================

Every column is a log2 (these quantities act multiplicatively); models scale it with fixed
bounds (:meth:`Features.bounds`) like the knob columns.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, get_args

import numpy as np

from bocast.schema import Field
from bocast.space.knobs import Config
from bocast.space.space import Space

FeatureKind = Literal["knobs", "derived"]
KINDS: tuple[str, ...] = get_args(FeatureKind)
#: the ``features`` option of the strategies that fit a model (bo, cga): what the model sees
FEATURES_OPTION = Field("features", str, "knobs", choices=KINDS,
                       doc="model inputs: knobs, or knobs + derived quantities "
                           "(bocast.space.features)")
DERIVED = ("log2 bm", "log2 bn", "log2 bk", "log2 threads", "log2 smem", "log2 registers",
           "log2 blocks")
#: the knobs each derived column is computed from (v2 and v1 names; those a space lacks are
#: skipped), so that a model's use of a derived column can be credited to knobs
SOURCES = {
    "log2 bm": ("tile_i", "instr", "wmma"),
    "log2 bn": ("tile_j", "instr", "wmma"),
    "log2 bk": ("tile_k", "smem_at"),
    "log2 threads": ("tile_i", "tile_j"),
    "log2 smem": ("tile_i", "tile_j", "tile_k", "stages", "pipeline", "smem_layout", "a_pad",
                  "b_pad", "writeback", "instr", "wmma"),
    "log2 registers": ("tile_i", "tile_j", "frag_pipeline", "frag_at", "instr", "wmma"),
    "log2 blocks": ("tile_i", "tile_j"),
}


class FeatureError(ValueError):
    """A feature set a space cannot provide."""


def derived(space: Space, configs: Sequence[Config]) -> np.ndarray:
    """(n, len(DERIVED)) derived columns of ``configs``."""
    if not configs:
        return np.zeros((0, len(DERIVED)))
    c = space.columns(configs)
    missing = [k for k in ("bm", "bn", "threads", "smem_bytes", "tile_i", "tile_j") if k not in c]
    if missing or not ("bk" in c or "kc" in c) or not (
            "reg_estimate" in c or {"acc_regs", "frag_regs"} <= set(c)):
        raise FeatureError(f"the space derives no {missing or 'k tile or register'} column(s): "
                           "features 'derived' need a matmul space (v1 or v2)")
    bk = c["bk"] if "bk" in c else c["kc"]
    regs = c["reg_estimate"] if "reg_estimate" in c else c["acc_regs"] + c["frag_regs"]
    blocks = c["tile_i"][:, 0] * c["tile_j"][:, 0]
    values = np.stack([c["bm"], c["bn"], bk, c["threads"], c["smem_bytes"], regs, blocks], 1)
    return np.log2(np.maximum(values.astype(float), 1.0))


class Features:
    """What a model sees of a configuration: ``kind`` is ``knobs`` (the space's encoding) or
    ``derived`` (that, then :data:`DERIVED`). Bounds of the derived columns come from the
    candidates' own configurations (a replay table), or from a fixed-seed sample of the space
    (live), so they stay the same from one round to the next."""

    def __init__(self, candidates, kind: str):
        if kind not in KINDS:
            raise FeatureError(f"unknown features {kind!r}; known: {', '.join(KINDS)}")
        self.candidates, self.kind = candidates, kind
        self._bounds = candidates.bounds()
        if kind == "derived":
            d = derived(candidates.space, candidates.reference_configs())
            self._bounds = np.hstack([self._bounds, np.stack([d.min(0), d.max(0)])])

    def __call__(self, configs: Sequence[Config]) -> np.ndarray:
        x = self.candidates.encode(configs)
        if self.kind == "derived":
            x = np.hstack([x, derived(self.candidates.space, configs)])
        return x

    def bounds(self) -> np.ndarray:
        return self._bounds

    def knob_importance(self, importance: np.ndarray) -> dict[str, float]:
        """Per knob, the importance a model gives its encoded columns plus an equal share of
        that of each derived column computed from it (:data:`SOURCES`)."""
        space = self.candidates.space
        out, col = {}, 0
        for k in space.knobs:
            out[k.name] = float(importance[col:col + k.width].sum())
            col += k.width
        if self.kind == "derived":
            for name, imp in zip(DERIVED, importance[col:]):
                src = [k for k in SOURCES[name] if k in out]
                for k in src:
                    out[k] += float(imp) / len(src)
        return out
