"""A 160-trial BO replay of gemm_4096_4096_4096_v3 (batch 16, seed 0, the batch loop): the
loop's seconds, the asks' seconds and median, and a SHA-1 of the records' keys in order. Run with
PYTHONPATH at the tree to time; prints JSON."""
# ruff: noqa
import hashlib, json, sys, time, statistics
import bocast
from bocast.measure.parts import make_measurer, make_runner
from bocast.measure.replay import ReplayDataset
from bocast.records.public import load_dataset
from bocast.run.tuner import Tuner
from bocast.space.operators.operator import from_workload
from bocast.strategies import make_strategy
name = "gemm_4096_4096_4096_v3"
op = from_workload(load_dataset(name)[1]["workload"])
ds = ReplayDataset(name, op)
bo = make_strategy("bo", ds.candidates(), seed=0)
times = []
ask = bo.ask
def timed(*a, **k):
    t = time.perf_counter(); r = ask(*a, **k); times.append(time.perf_counter() - t); return r
bo.ask = timed
t = time.perf_counter()
res = Tuner(bo, make_measurer(op, None, make_runner("replay", dataset=ds)), trials=160, batch_size=16).run()
loop = time.perf_counter() - t
sha = hashlib.sha1("\n".join(r.key for r in res.records).encode()).hexdigest()
print(json.dumps({"code": bocast.__file__, "loop_s": round(loop, 2), "asks_s": round(sum(times), 2), "median_ask_s": round(statistics.median(times), 3), "trials": len(res.records), "sha1": sha}))
