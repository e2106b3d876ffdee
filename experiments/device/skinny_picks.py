"""Hand-picked GEMM kernels as a ``bocast remeasure`` picks file (one definition for the device
scripts that re-time named kernels): each pick is (name, (bm, bn), changes) over :data:`BASE`,
at its own ``stages`` or else the deepest ring of at most 16 that the space admits; a pick the
space refuses at every depth is printed with the reason and left out.
    python3 experiments/device/skinny_picks.py OUT_DIR SET M,N,K ...   (SET: a key of SETS)
writes OUT_DIR/picks_MxNxK.json per shape (from the repository's root);
    python3 experiments/device/skinny_picks.py --shapes SET
prints the set's shapes (:data:`SHAPES`). picks_remeasure.sh re-times a set beside cuBLAS."""

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
#: the 64 x 96 kernel two tunes at 128x6144x4096 re-timed 0.943-0.966 (results/skinny_v2_v3_h200)
GOOD_96 = {"epilogue": "v2", "raster_major": "n", "persistent": "on", "stages": 8}
#: the deep-ring tune's pick at 8192x4096x4096 (results/deep_ring_h200: 0.989)
GOOD_LARGE = {"consumers": 2, "epilogue": "tma", "persistent": "on", "raster": 4,
              "regs": "24/240", "stages": 4}

#: the default command's pick at 2048x28672x8192 (results/skinny_v2_v3_h200: 0.999)
GOOD_PP = {"arrangement": "pingpong", "consumers": 2, "epilogue": "v2", "persistent": "on",
           "raster": 8, "regs": "40/232", "stages": 4}

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
    # the activations' tile multicast to the CTAs of other N tiles (cuBLAS's skinny kernels run
    # clusters of 2 or 4 CTAs, results/skinny_gap_h200). Hypothesis, written before the call
    # (then skinny_cluster.sh; results/skinny_source64_h200): the swap_ab deep kernels gain >= 3%
    # from 1x2 at M 64 and 128 (each CTA's activation tile half from its peer: L2 traffic of A
    # halves), the 64 x 48 deep kernel at M 64 likewise; refuted if the 1x2 rows sit within the
    # 1x1 rows' rounds or below them
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
    # the 2x1 cluster (cuBLAS's M = 128 kernel: two token tiles sharing one weight tile,
    # multicast) on the base the tunes chose (64 x 96, v2 epilogue, walk along N, persistent, 8
    # stages: 0.943-0.966), one-knob rows for what made narrow_h200's 64 x 96 (scalar, walk
    # along M, not persistent, 10 stages) read 0.662, and at 8192x4096x4096 the deep-ring tune's
    # 128 x 256 pick (0.989) with the clusters of cuBLAS's 256x128 1x2 kernel. Expectation,
    # written before the call (then cluster_base.sh; results/skinny_v2_v3_h200): G 2x1 >= G +
    # 0.03; the scalar epilogue and the walk along M cost >= 0.05 each; at 8192x4096x4096 the
    # clusters within +-0.01
    "cluster_base": {
        128: [("G: 64 x 96, v2, walk n, persistent (the tunes' pick)", (64, 96), GOOD_96),
              ("G, 2x1", (64, 96), {**GOOD_96, "cluster": "2x1"}),
              ("G, 2x1, 10 stages", (64, 96), {**GOOD_96, "cluster": "2x1", "stages": 10}),
              ("G, 2x1, not persistent", (64, 96), {**GOOD_96, "cluster": "2x1",
                                                    "persistent": "off"}),
              ("G, 2x1, regs 40/232", (64, 96), {**GOOD_96, "cluster": "2x1",
                                                 "regs": "40/232"}),
              ("G, walk m", (64, 96), {**GOOD_96, "raster_major": "m"}),
              ("G, scalar", (64, 96), {**GOOD_96, "epilogue": "scalar"}),
              ("G, not persistent", (64, 96), {**GOOD_96, "persistent": "off"}),
              ("G, 10 stages", (64, 96), {**GOOD_96, "stages": 10}),
              ("swap_ab 128 x 64 (the other pick)", (128, 64), {**SWAP, "stages": 8}),
              ("64 x 128, 2x1, v2, walk n, persistent", (64, 128), {**GOOD_96,
                                                                   "cluster": "2x1"})],
        8192: [("L: 128 x 256, tma, 2 consumers (the tune's pick)", (128, 256), GOOD_LARGE),
               ("L, 2x1", (128, 256), {**GOOD_LARGE, "cluster": "2x1"}),
               ("L, 1x2", (128, 256), {**GOOD_LARGE, "cluster": "1x2"}),
               ("256 x 128, 2 consumers", (256, 128), GOOD_LARGE),
               ("256 x 128, 1x2", (256, 128), {**GOOD_LARGE, "cluster": "1x2"}),
               ("256 x 128, 2x1", (256, 128), {**GOOD_LARGE, "cluster": "2x1"})],
    },
    # one kernel at every ring depth it fits (the 64 x 96 base 0.971 at 8 stages, 0.858 at 10;
    # the exhaustive tables peak at 8, lower at 5, 6, 10, 12). Expectation, written before the
    # call (then ring_depth.sh; results/skinny_v2_v3_h200): powers of two lead (16 >= 8 > 10, 12
    # on 64 x 48; 4 > 5, 6 on 64 x 96): the cost follows S being a power of two, not the depth
    "ring_depth": {
        128: [(f"G at {s}", (64, 96), {**GOOD_96, "stages": s}) for s in (4, 5, 6, 8, 10)]
        + [(f"64 x 48 G-like at {s}", (64, 48), {**GOOD_96, "stages": s})
           for s in (6, 8, 10, 12, 16)]
        + [(f"64 x 64 G-like at {s}", (64, 64), {**GOOD_96, "stages": s}) for s in (8, 10, 12)],
        64: [(f"64 x 48 G-like at {s}", (64, 48), {**GOOD_96, "stages": s})
             for s in (6, 8, 10, 12, 16)],
    },
    # wave quantization at a large GEMM (written 2026-11-29, twenty-first session, before the
    # call): a persistent kernel's time should follow its rounds of tiles, ceil(tiles / 132).
    # P at 2048x28672x8192 has 16 x 150 = 2,400 tiles of 128 x 192: 18.2 rounds, so 19, the
    # last with 24 tiles; at N = 28416 it has 2,368: 17.9, so 18. Work ratio 0.991. If the last
    # round costs a whole one, P's TFLOPS at 28416 is 1.04-1.05 of its TFLOPS at 28672 (ratio
    # 19/18 x 0.991), and splitting the last round's tiles along K (a stream-K-like tail) can
    # gain up to 4% at 28672; if the last round is cheap (fewer SMs busy, higher clocks), the
    # two lie within +-0.01 and the tail split is not worth building. The 128 x 256 kernel
    # (1,792 tiles, 13.6 rounds) is the control: its rounds change little between the shapes
    "waves": {
        2048: [("P: 128 x 192 ping-pong (the default command's pick)", (128, 192), GOOD_PP),
               ("P's knobs, 128 x 256 cooperative", (128, 256),
                {**GOOD_PP, "arrangement": "cooperative"})],
    },
    # tail_split (_hopper_tail, built after "waves" confirmed its premise). Expectation, written
    # before the call (twenty-first session): at 2048x28672x8192 P's last round (24 tiles) cut
    # 2, 4 or 8 ways lifts P by 2-4% (tail 4: 96 slices, one round a quarter long; the adds of
    # 24 tiles, 18 MB, cost little), P with the tma epilogue likewise; at 8192x4096x4096 (100
    # last-round tiles of L, 64 k blocks) no split leaves under a round but tail 8 (7 rounds of
    # an eighth), and its 100 MB of reduce-adds eat that: L's twins within +-0.01. Second call
    # (after tail_split_in_one_round, which drops P tail 8 at 28672 and every 8192 twin but L):
    # the 28672 twins again (tail 4 and tma tail 4 >= 1.02 again), and 2048x14336x4096 (Llama-3-8B
    # up at 2048 tokens; in experiments/shapes, measured before in bf16 only): P's 1,200 tiles
    # leave 12 in a 10th round, tail 8 makes it an eighth of one: P tail 8 >= 1.05 x P
    "tail": {
        2048: [("P", (128, 192), GOOD_PP)]
        + [(f"P, tail {t}", (128, 192), {**GOOD_PP, "tail_split": t}) for t in (2, 4, 8)]
        + [("P, tma", (128, 192), {**GOOD_PP, "epilogue": "tma"}),
           ("P, tma, tail 4", (128, 192), {**GOOD_PP, "epilogue": "tma", "tail_split": 4})],
        8192: [("L", (128, 256), GOOD_LARGE),
               ("L, tail 8", (128, 256), {**GOOD_LARGE, "tail_split": 8}),
               ("128 x 128, L's knobs", (128, 128), GOOD_LARGE),
               ("128 x 128, L's knobs, tail 4", (128, 128), {**GOOD_LARGE, "tail_split": 4})],
    },
    # before a warm-start source with tail rows (the next step of results/tail_split_h200):
    # does tail_split carry at the shape of the shipped exhaustive table gemm_2048_8192_1024_v3
    # (K = 1024: 16 k blocks, so a slice of 4 is short against its zeroing and adds)?
    # Expectation, written before the call (twenty-first session): 128 x 192 has 688 tiles, 5
    # rounds and 28; tail 4 makes the 6th a quarter: its twins gain >= 8% over themselves, and
    # the best tail kernel lies within +-3% of L (128 x 256: 512 tiles, 3 rounds and 116, no
    # split fits one round)
    "tail_source": {
        2048: [("P", (128, 192), GOOD_PP),
               ("P, tail 2", (128, 192), {**GOOD_PP, "tail_split": 2}),
               ("P, tail 4", (128, 192), {**GOOD_PP, "tail_split": 4}),
               ("P, tma", (128, 192), {**GOOD_PP, "epilogue": "tma"}),
               ("P, tma, tail 4", (128, 192), {**GOOD_PP, "epilogue": "tma", "tail_split": 4}),
               ("128 x 192, L's knobs", (128, 192), GOOD_LARGE),
               ("128 x 192, L's knobs, tail 4", (128, 192), {**GOOD_LARGE, "tail_split": 4}),
               ("L", (128, 256), GOOD_LARGE),
               ("256 x 128, L's knobs", (256, 128), GOOD_LARGE)],
    },
}
#: each set's shapes (picks_remeasure.sh's default SHAPES)
SHAPES = {"narrow": "128,6144,4096 64,6144,4096",
          "cluster": "128,6144,4096 64,6144,4096 32,6144,4096 16,6144,4096",
          "cluster_base": "128,6144,4096 8192,4096,4096",
          "ring_depth": "128,6144,4096 64,6144,4096",
          "waves": "2048,28672,8192 2048,28416,8192",
          "tail": "2048,28672,8192 8192,4096,4096",
          "tail_source": "2048,8192,1024"}
assert SHAPES.keys() == SETS.keys()


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
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    root, which, shapes = sys.argv[1], sys.argv[2], sys.argv[3:]
    if which not in SETS:
        sys.exit(f"skinny_picks.py: no set {which!r}; the sets: {', '.join(SETS)}")
    if root == "--shapes":
        print(SHAPES[which])
        sys.exit(0)
    for s in shapes:
        shape = tuple(int(v) for v in s.split(","))
        if shape[0] not in SETS[which]:
            sys.exit(f"skinny_picks.py: set {which!r} has no picks for M = {shape[0]} "
                     f"(its M: {', '.join(map(str, SETS[which]))})")
        write_picks(root, SETS[which][shape[0]], shape)
