"""BO's asks are the same, configuration for configuration and in order, as those recorded in
tests/bo/asks_expected.json before the pure-Python parts of an ask (sampling the pool, keys,
encoding) were made faster (issue 41): the same seed and tells must give the same proposals.

Two runs on GEMM 1024^3 (space v3, its shipped dataset): replay on the dataset's table, and the
live space told the dataset's rows; each asks batches with the previous batch pending (the
pipelined loop's asks) and one without. Re-record (only for a change meant to change the
proposals) with ``python -m tests.bo.test_ask_identity``."""

from __future__ import annotations

import json
import pathlib

EXPECTED = pathlib.Path(__file__).with_name("asks_expected.json")
DATASET = "gemm_1024_1024_1024_v3"
BO = {"n_init": 8, "pool_size": 1024, "incumbents": 4, "fit_maxiter": 15}


def _asks(live: bool) -> list[list[str]]:
    """Keys of each ask: 8 uniform, then 3 rounds of an ask of 8 with the batch before
    pending, its pending batch told after it, then one ask without pending points."""
    import torch

    from bocast.measure.replay import ReplayDataset
    from bocast.records.public import load_dataset
    from bocast.space.candidates import SpaceCandidates
    from bocast.space.operators.operator import from_workload
    from bocast.space.space import Space
    from bocast.strategies import make_strategy

    op = from_workload(load_dataset(DATASET)[1]["workload"])
    ds = ReplayDataset(DATASET, op)
    order = torch.randperm(len(ds.configs), generator=torch.Generator().manual_seed(0)).tolist()
    rows = [ds.record(ds.configs[i]) for i in order]
    s = make_strategy("bo", SpaceCandidates(op.space) if live else ds.candidates(), seed=3,
                      **BO)
    out = []

    def record(configs):
        out.append([Space.key(c) for c in configs])
        return configs

    def measured(configs, at):  # live: the dataset's rows stand for the asked configurations
        return rows[at:at + len(configs)] if live else [ds.record(c) for c in configs]

    told = 0
    pending = record(s.ask(8))
    for _ in range(3):
        nxt = record(s.ask(8, pending))
        s.tell(measured(pending, told))
        told += len(pending)
        pending = nxt
    s.tell(measured(pending, told))
    record(s.ask(8))
    return out


def test_replay_asks_are_the_recorded_ones():
    assert _asks(live=False) == json.loads(EXPECTED.read_text())["replay"]


def test_live_asks_are_the_recorded_ones():
    assert _asks(live=True) == json.loads(EXPECTED.read_text())["live"]


if __name__ == "__main__":
    EXPECTED.write_text(json.dumps({"replay": _asks(live=False), "live": _asks(live=True)},
                                   indent=0) + "\n")
