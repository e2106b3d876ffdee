"""Where one BO ask's time goes, function by function (cProfile, 3 asks, the median): GEMM
4096^3's live space v3, told 144 rows of its dataset (seeded order), one warm-up ask, 16 more
rows, then an ask of 16 with 16 pending. Run with PYTHONPATH at the tree to time; prints JSON."""
# ruff: noqa
import cProfile, pstats, time, copy, io, json, sys
import bocast, torch
from bocast.measure.replay import ReplayDataset
from bocast.records.public import load_dataset
from bocast.space.candidates import SpaceCandidates
from bocast.space.operators.operator import from_workload
from bocast.space.space import Space
from bocast.strategies import make_strategy
ds_name = "gemm_4096_4096_4096_v3"
op = from_workload(load_dataset(ds_name)[1]["workload"])
ds = ReplayDataset(ds_name, op)
records = [ds.record(c) for c in ds.configs]
order = torch.randperm(len(records), generator=torch.Generator().manual_seed(0)).tolist()
records = [records[i] for i in order]
n, q = 160, 16
s = make_strategy("bo", SpaceCandidates(op.space), seed=0)
s.tell(records[:n - q]); s.ask(q); s.tell(records[n - q:n])
pend = copy.deepcopy(s).ask(q)
s.proposed |= {Space.key(c) for c in pend}
agg = {}
walls = []
for rep in range(3):
    b = copy.deepcopy(s)
    pr = cProfile.Profile(); t = time.perf_counter(); pr.enable(); got = b.ask(q, pend); pr.disable(); walls.append(time.perf_counter() - t)
    st = pstats.Stats(pr).stats
    want = {"ask (profiled)": ("base.py", "ask"), "pool": ("strategy.py", "_pool"),
            "structural draws (rng, columns)": ("structural.py", "draw_grouped"),
            "derived columns": ("space.py", "_with_derived"),
            "constraints": ("space.py", "feasible_mask"),
            "rows": ("structural.py", "rows"), "neighbours": ("candidates.py", "neighbours"),
            "encode": ("encoding.py", "encode"), "GP fit": ("surrogate.py", "fit"),
            "Space.key (json)": ("space.py", "key"), "sampling.keys": ("sampling.py", "keys")}
    for label, (f, fn) in want.items():
        tot = sum(v[3] for k, v in st.items() if k[0].endswith(f) and k[2] == fn)
        agg.setdefault(label, []).append(tot)
print(json.dumps({"code": bocast.__file__, "wall_profiled": walls, "keys": [Space.key(c) for c in got],
                  "cumtime": {k: sorted(v)[1] for k, v in agg.items()}}))
