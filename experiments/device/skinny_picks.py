"""Hand-picked GEMM kernels as a ``bocast remeasure`` picks file (one definition for the device
scripts that re-time named kernels): each pick is (name, (bm, bn), changes) over :data:`BASE`,
at its own ``stages`` or else the deepest ring of at most 16 that the space admits; a pick the
space refuses at every depth is printed with the reason and left out.
    python3 experiments/device/skinny_picks.py OUT_DIR SET M,N,K ...   (SET: a key of SETS)
writes OUT_DIR/picks_MxNxK.json per shape (from the repository's root)."""

import json
import os
import sys

sys.path.insert(0, os.getcwd())

from bocast.space.operators._hopper_layout import STAGES  # noqa: E402
from bocast.space.operators.operator import from_workload  # noqa: E402

BASE = {"bk": 64, "consumers": 1, "arrangement": "cooperative", "regs": "off", "inflight": 1,
        "persistent": "off", "raster": 1, "raster_major": "m", "epilogue": "scalar",
        "cluster": "1x1", "split_k": 1, "split_reduce": "atomic", "swap_ab": "off"}
SWAP = {"swap_ab": "on", "raster_major": "n"}

#: named sets of picks per M (N, K from the shape)
SETS = {
    # narrow_check.sh (results/narrow_h200): the narrow N tiles against the swap_ab deep kernels
    "narrow": {
        128: [("swap_ab 128 x 64 (deep_ring_h200: 0.974)", (128, 64), SWAP),
              ("64 x 96, 2x1", (64, 96), {"cluster": "2x1"}),
              ("64 x 96, 2x1, inflight 0", (64, 96), {"cluster": "2x1", "inflight": 0}),
              ("64 x 96, 2x1, v2 epilogue", (64, 96), {"cluster": "2x1", "epilogue": "v2"}),
              ("64 x 96, 2x1, 6 stages (control)", (64, 96), {"cluster": "2x1", "stages": 6}),
              ("64 x 96", (64, 96), {}),
              ("128 x 48", (128, 48), {}),
              ("128 x 48, 1x2", (128, 48), {"cluster": "1x2"}),
              ("128 x 96 (64 CTAs)", (128, 96), {})],
        64: [("swap_ab 64 x 64 (deep_ring_h200: 0.940)", (64, 64), SWAP),
             ("64 x 48", (64, 48), {}),
             ("64 x 48, v2 epilogue", (64, 48), {"epilogue": "v2"}),
             ("64 x 48, 12 stages", (64, 48), {"stages": 12}),
             ("64 x 48, 6 stages (control)", (64, 48), {"stages": 6}),
             ("64 x 96 (64 CTAs)", (64, 96), {})],
    },
    # skinny_cluster.sh: the activations' tile multicast to the CTAs of other N tiles (cuBLAS's
    # skinny kernels run clusters of 2 or 4 CTAs, results/skinny_gap_h200)
    "cluster": {
        128: [("swap_ab 128 x 64", (128, 64), SWAP),
              ("swap_ab 128 x 64, 1x2", (128, 64), {**SWAP, "cluster": "1x2"}),
              ("swap_ab 128 x 64, 1x4", (128, 64), {**SWAP, "cluster": "1x4"}),
              ("64 x 96, 1x2", (64, 96), {"cluster": "1x2"}),
              ("64 x 96, 1x2, v2 epilogue", (64, 96), {"cluster": "1x2", "epilogue": "v2"}),
              ("64 x 128, 1x2, v2 epilogue", (64, 128), {"cluster": "1x2", "epilogue": "v2"})],
        64: [("swap_ab 64 x 64", (64, 64), SWAP),
             ("swap_ab 64 x 64, 1x2", (64, 64), {**SWAP, "cluster": "1x2"}),
             ("swap_ab 64 x 64, 1x4", (64, 64), {**SWAP, "cluster": "1x4"}),
             ("64 x 48", (64, 48), {}),
             ("64 x 48, 1x2", (64, 48), {"cluster": "1x2"}),
             ("64 x 48, 1x2, v2 epilogue", (64, 48), {"cluster": "1x2", "epilogue": "v2"}),
             ("64 x 48, 1x4, v2 epilogue", (64, 48), {"cluster": "1x4", "epilogue": "v2"}),
             ("64 x 128, v2 epilogue, 8 stages (the tunes' pick)", (64, 128),
              {"epilogue": "v2", "stages": 8})],
        32: [("swap_ab 32 x 64", (32, 64), SWAP),
             ("swap_ab 32 x 64, 1x2", (32, 64), {**SWAP, "cluster": "1x2"}),
             ("swap_ab 32 x 64, 1x4", (32, 64), {**SWAP, "cluster": "1x4"}),
             ("64 x 48, v2 epilogue", (64, 48), {"epilogue": "v2"}),
             ("64 x 48, 1x2, v2 epilogue", (64, 48), {"cluster": "1x2", "epilogue": "v2"})],
        16: [("swap_ab 16 x 64", (16, 64), SWAP),
             ("swap_ab 16 x 64, 1x2", (16, 64), {**SWAP, "cluster": "1x2"})],
    },
}


def write_picks(root: str, picks: list, shape: tuple[int, int, int]) -> str:
    """The picks file of ``picks`` at GEMM ``shape`` (fp16 -> fp32, NT, space v3) under
    ``root``; its path."""
    m, n, k = shape
    op = from_workload({"op": "gemm", "shape": [m, n, k], "dtype": "fp16:fp32",
                        "layout": "NT", "space": "v3"})
    rows, seen = [], set()
    for name, (bm, bn), change in picks:
        c = {**BASE, "bm": bm, "bn": bn, **change}
        depths = [c["stages"]] if "stages" in change else sorted(STAGES, reverse=True)
        found, why = None, []
        for s in depths:
            cand = op.space.complete({**c, "stages": s})
            why = op.space.validate(cand)
            if not why:
                found = cand
                break
        if found is None:  # the reason at the shallowest depth tried
            print(f"{m}x{n}x{k}: {name} skipped: {why}")
            continue
        key = op.space.key(found)
        if key in seen:
            continue
        seen.add(key)
        # recorded_tflops: remeasure's file format wants one (1.0 keeps the order); the
        # figures are the re-timing's own
        rows.append({"key": key, "config": dict(found), "recorded_tflops": 1.0,
                     "store": f"{name}, {found['stages']} stages", "workload": op.workload})
    path = os.path.join(root, f"picks_{m}x{n}x{k}.json")
    with open(path, "w") as f:
        json.dump({"workload": op.workload, "kernels": rows}, f, indent=0)
    print(f"{m}x{n}x{k}: {len(rows)} kernels -> {path}")
    return path


if __name__ == "__main__":
    root, which = sys.argv[1], sys.argv[2]
    for s in sys.argv[3:]:
        shape = tuple(int(v) for v in s.split(","))
        write_picks(root, SETS[which][shape[0]], shape)
