"""The GEMM space: constraints, sampling coverage, encoding, workload errors, static builds."""

import collections
import json
import subprocess
import sys

import numpy as np
import pytest

from bocast.measure.nvcc import why_no_compiler
from bocast.space.knobs import Split
from bocast.space.operators.operator import WorkloadError, get_operator
from bocast.space.space import Space

Gemm = get_operator("gemm")
needs_nvcc = pytest.mark.skipif(why_no_compiler() is not None, reason=str(why_no_compiler()))


def check_shared_memory_model(res, op, config):
    """The known constraints' shared memory against a build of a small shape: static bytes (ptxas)
    exactly; dynamic bytes (launch) exactly in v1, and in v2 never below the model (on short k loops
    TVM may keep buffers alive longer than its best case, the model:
    ``bocast/space/operators/_pipelined_matmul.merged_dynamic_bytes``;
    tests/spaces/test_pipelined.py checks exactness on real shapes)."""
    model = op.space.columns([config])
    assert res["features"].get("smem_bytes", 0) == model["static_smem_bytes"][0]
    dynamic, planned = res["features"]["dynamic_smem_bytes"], model["dynamic_smem_bytes"][0]
    if op.workload["space"] == "v1":
        assert dynamic == planned
    else:
        assert planned <= dynamic, (dynamic, planned)


class Violators:
    """Structural configurations of ``space`` that violate one known constraint and no other,
    from uniform draws (chunks of 20,000 from ``seed``, at most ``draws``): each chunk is drawn
    and checked once and kept, so asking for every constraint costs one pass, not one per
    constraint."""

    CHUNK = 20_000

    def __init__(self, space: Space, seed: int = 0, draws: int = 400_000):
        self.space, self.chunks = space, draws // self.CHUNK
        self._rng = np.random.default_rng(seed)
        self._seen: list[tuple[dict, dict[str, int]]] = []  # per chunk: cols, name -> first row

    def _chunk(self, i: int) -> tuple[dict, dict[str, int]]:
        while len(self._seen) <= i:
            cols = self.space._with_derived(self.space._draw_columns(self.CHUNK, self._rng))
            first: dict[str, int] = {}
            for row, v in enumerate(self.space.violations(cols)):
                if len(v) == 1:
                    first.setdefault(v[0], row)
            self._seen.append((cols, first))
        return self._seen[i]

    def find(self, name: str):
        """The first such configuration violating ``name`` alone, or None."""
        for i in range(self.chunks):
            cols, first = self._chunk(i)
            if name in first:
                return self.space._rows(cols, [first[name]])[0]
        return None


SPACES = ["v2", "v1"]


@pytest.mark.parametrize("space_name", SPACES)
def test_each_constraint_rejects_a_configuration_built_to_violate_it(space_name):
    # some constraints only bind on extents that are not multiples of 8 / of the Tensor Core
    # tile (or give odd k-step counts, or few k tiles): each must be violable alone on one shape
    spaces = [Gemm.from_args(s, space=space_name).space
              for s in [(1024, 1024, 1024), (1000, 1002, 1004), (256, 256, 64)]]
    finders = [Violators(space) for space in spaces]
    for name in spaces[0].constraint_names:
        for space, finder in zip(spaces, finders):
            config = finder.find(name)
            if config is not None:
                assert space.validate(config) == [name]
                break
        else:
            pytest.fail(f"no configuration violates only {name}")


def test_hand_built_violations_v1():
    space = Gemm(1024, 1024, 1024, space="v1").space
    good = {"wmma": "16x16x16", "tile_i": (16, 2, 2), "tile_j": (16, 2, 2), "tile_k": (16, 2, 2),
            "smem_at": 0, "frag_at": 1, "a_pad": 8, "b_pad": 8, "vec": 8, "pipeline": 2,
            "unroll": 64, "writeback": "shared", "c_at": "block", "c_pad": 8, "out_vec": 4}
    assert space.validate(good) == []
    direct = {"writeback": "direct", "c_at": None, "c_pad": None, "out_vec": None}
    assert space.validate({**good, **direct, "tile_i": (8, 8, 1), "tile_j": (4, 8, 2),
                           "tile_k": (64, 1, 1)}) == ["threads_le_1024"]
    assert space.validate({**good, "pipeline": 3, "tile_k": (4, 4, 4)}) == [
        "static_shared_memory_le_48KB"]
    assert space.validate({**good, "tile_i": (4, 4, 4), "tile_j": (4, 4, 4), "tile_k": (64, 1, 1),
                           "pipeline": 1}) == ["shared_memory_le_227KB"]
    assert space.validate({**good, **direct, "tile_i": (4, 2, 8), "tile_j": (16, 1, 4),
                           "smem_at": 1, "frag_at": 2, "pipeline": 1}) == [
        "accumulators_le_128_registers"]
    assert space.validate({**good, "smem_at": 1, "frag_at": 0}) == ["fragments_after_shared"]
    assert space.validate({**good, "tile_k": (32, 1, 2), "smem_at": 1}) == [
        "pipeline_le_fetch_loop"]
    assert space.validate({**good, "tile_i": (16, 2, 3)}) == ["tile_i.product"]
    assert space.validate({**good, "wmma": "4x4x4"}) == ["wmma.choice"]
    padded = Gemm(1000, 1024, 1024, space="v1").space
    assert padded.validate({**good, "tile_i": (25, 5, 1), "writeback": "direct", "c_at": None,
                            "c_pad": None, "out_vec": None}) == ["tile_i.product"]
    direct = {**good, "wmma": "8x32x16", "tile_i": (125, 1, 1), "tile_j": (16, 2, 1),
              "writeback": "direct", "c_at": None, "c_pad": None, "out_vec": None}
    assert padded.validate(direct) == []
    assert padded.validate({**direct, "wmma": "16x16x16",
                                                   "tile_i": (63, 1, 1), "tile_j": (8, 2, 4)}) == [
        "direct_writeback_unpadded"]


@pytest.mark.parametrize("space_name", SPACES)
@pytest.mark.parametrize("shape", [(1024, 1024, 1024), (32, 2048, 1000)])
def test_sampling_covers_every_value_of_every_knob(shape, space_name):
    space = Gemm.from_args(shape, space=space_name).space
    sample = space.sample(10_000, rng=0)
    reference = space.sample(10_000, rng=1)
    assert not any(space.validate_many(sample))
    for k in space.knobs:
        if isinstance(k, Split):
            for level in range(k.parts):
                seen = collections.Counter(c[k.name][level] for c in sample)
                common = {v for v, n in collections.Counter(
                    c[k.name][level] for c in reference).items() if n >= 50}
                assert common <= set(seen), (k.name, level, common - set(seen))
        else:
            seen = {c[k.name] for c in sample if c[k.name] is not None}
            assert seen == set(k.choices) - INFEASIBLE.get((space_name, shape, k.name), set()), \
                (k.name, set(k.choices) - seen)


#: Knob values no feasible configuration of a shape takes: K = 1000 has 63 k steps of 16, so
#: every shared tile row is 16 x an odd number of elements, never a multiple of 32 (the XOR
#: swizzle's chunk rows); M = 32 has at most 4 block rows, too few to group 8 or 16 of them
INFEASIBLE = {("v2", (32, 2048, 1000), "smem_layout"): {"xor"},
              ("v2", (32, 2048, 1000), "raster"): {8, 16}}


@pytest.mark.parametrize("space_name, knob", [("v2", "instr"), ("v1", "wmma")])
def test_sampling_matches_the_feasible_share_of_each_instruction(space_name, knob):
    """Uniform over the feasible set: the share of each Tensor Core shape (the conditioning
    knob) in the sample matches its share among feasible structural draws (an independent
    estimate)."""
    space = Gemm(1024, 1024, 1024, space=space_name).space
    rng = np.random.default_rng(5)
    cols = space._with_derived(space._draw_columns(300_000, rng))
    feasible = cols[knob][space.feasible_mask(cols)]
    expected = collections.Counter(feasible.tolist())
    got = collections.Counter(c[knob] for c in space.sample(20_000, rng=6))
    for shape, n in expected.items():
        assert abs(got[shape] / 20_000 - n / len(feasible)) < 0.02


@pytest.mark.parametrize("space_name", SPACES)
def test_encode_decode_round_trip(space_name):
    space = Gemm(32, 2048, 1000, space=space_name).space
    configs = space.sample(1000, rng=0)
    x = space.encode(configs)
    assert x.shape == (1000, space.encoded_width)
    assert np.isfinite(x).all()
    assert [Space.key(c) for c in space.decode(x)] == [Space.key(c) for c in configs]


@pytest.mark.parametrize("space_name", SPACES)
def test_neighbours_are_feasible(space_name):
    space = Gemm(1024, 1024, 1024, space=space_name).space
    for c in space.sample(20, rng=0):
        nbs = space.neighbours(c)
        assert nbs and not any(space.validate_many(nbs))


@pytest.mark.parametrize("space_name", SPACES)
def test_padding_extents(space_name):
    import math

    space = Gemm(32, 2048, 1000, space=space_name).space
    c = space.sample(1, rng=0)[0]
    assert math.prod(c["tile_k"]) == 1008 // 16


@pytest.mark.parametrize("args, message", [
    (dict(M=0, N=4, K=4), "M must be a positive integer"),
    (dict(M=4, N=4, K=4, dtype="fp32:fp32"), "dtype 'fp32:fp32' not supported"),
    (dict(M=4, N=4, K=4, layout="TT"), "layout 'TT' not supported"),
    (dict(M=4, N=4, K=4, space="v9"), "space 'v9' not known; use one of"),
    (dict(M=4, N=4, K=4, space="v3"), "space v3 .* needs K % 8 == 0"),
])
def test_bad_workload_gives_one_clear_error(args, message):
    with pytest.raises(WorkloadError, match=message):
        Gemm(**args)


def test_bad_shape_arity_names_the_problem():
    with pytest.raises(WorkloadError, match="needs 3 extents"):
        Gemm.from_args((1024, 1024))


@pytest.mark.parametrize("argv, message", [
    (["--shape", "1024,1024"], "gemm: shape needs 3 extents M,N,K"),
    (["--shape", "a,b,c"], "is not a comma-separated list of integers"),
    (["--dtype", "int8"], "dtype 'int8' not supported"),
])
def test_cli_bad_input_exits_2_with_one_line(argv, message):
    proc = subprocess.run([sys.executable, "-m", "bocast.cli", "space", "gemm", *argv],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("bocast: error:") and message in lines[0]


def test_cli_sample_json_last_line():
    proc = subprocess.run([sys.executable, "-m", "bocast.cli", "space", "gemm", "--shape",
                           "32,2048,1000", "--sample", "500", "--seed", "3", "--json"],
                          capture_output=True, text=True, check=True)
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["sampled"] == summary["valid"] == 500
    assert summary["workload"]["shape"] == [32, 2048, 1000]


# ------------------------------------------------------------------ static builds (nvcc)

def _build(op, config):
    from bocast.measure.builder import build_task

    return build_task({"workload": op.workload, "config": json.loads(Space.key(config))})


@needs_nvcc
@pytest.mark.parametrize("space_name", SPACES)
@pytest.mark.parametrize("shape, dtype, layout", [
    ((128, 128, 128), "fp16:fp32", "NT"),
    ((40, 72, 100), "fp16:fp32", "NN"),   # pads M, N and K
    ((64, 64, 64), "fp16:fp16", "NT"),
])
def test_sampled_configurations_build_for_sm90(shape, dtype, layout, space_name):
    from tests.builds import build_configs

    op = Gemm.from_args(shape, dtype=dtype, layout=layout, space=space_name)
    configs = op.space.sample(2, rng=1)
    for config, res in zip(configs, build_configs(op, configs)):
        assert res["status"] == "ok", res["error"]
        assert res["features"]["registers"] > 0
        check_shared_memory_model(res, op, config)
        warps = config["tile_i"][1] * config["tile_j"][1]
        assert tuple(res["block"][:2]) == (32, warps)
        assert res["grid"][0] == config["tile_i"][0] * config["tile_j"][0]


@needs_nvcc
def test_shared_memory_constraint_matches_a_real_failure_v1():
    op = Gemm(1024, 1024, 1024, space="v1")
    config = {"wmma": "16x16x16", "tile_i": (8, 2, 4), "tile_j": (8, 2, 4), "tile_k": (8, 8, 1),
              "smem_at": 0, "frag_at": 2, "a_pad": 8, "b_pad": 8, "vec": 8, "pipeline": 1,
              "unroll": 0, "writeback": "direct", "c_at": None, "c_pad": None, "out_vec": None}
    assert op.space.validate(config) == ["static_shared_memory_le_48KB"]
    res = _build(op, config)
    assert res["status"] == "build_error" and res["stage"] == "compile"
    assert "shared data" in res["error"]
