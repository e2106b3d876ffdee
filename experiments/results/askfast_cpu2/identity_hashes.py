"""Per distinct (space, workload) of the shipped datasets: a SHA-1 over 100k drawn rows' derived
columns and feasibility mask, two SpaceCandidates.sample calls' keys, the rng's next draw, the
encoding and a unique Space.sample. Run with PYTHONPATH at each tree; the outputs must match
(identity_before.json, identity_after.json)."""
# ruff: noqa
import glob, os, hashlib, json, numpy as np
from bocast.records.public import load_dataset
from bocast.space.operators.operator import from_workload
from bocast.space.candidates import SpaceCandidates
seen=set(); out={}
for p in sorted(glob.glob('bocast/data/*.json')):
    name=os.path.basename(p)[:-5]
    try: op=from_workload(load_dataset(name)[1]['workload'])
    except Exception: continue
    sp=op.space; d=sp.describe()+json.dumps(load_dataset(name)[1]['workload'],sort_keys=True)
    if d in seen: continue
    seen.add(d)
    h=hashlib.sha1()
    rng=np.random.default_rng(5)
    cols=sp._with_derived(sp._draw_grouped(100000, rng)[0])
    for k in sorted(cols): h.update(k.encode()); h.update(np.ascontiguousarray(cols[k]).tobytes())
    h.update(sp.feasible_mask(cols).tobytes())
    rng=np.random.default_rng(7)
    c=SpaceCandidates(sp)
    for _ in range(2):
        got=c.sample(300, rng, set())
        h.update("\n".join(sp.key(x) for x in got).encode())
    h.update(str(rng.integers(2**62)).encode())
    h.update(sp.encode(got).tobytes())
    h.update("\n".join(sp.key(x) for x in sp.sample(200, 3, unique=True)).encode())
    out[name]=h.hexdigest()
print(json.dumps(out, sort_keys=True))
