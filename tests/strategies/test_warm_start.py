"""BO's warm start from other shapes' records (bocast/strategies/bo/transfer.py): replay of the
exhaustive GEMM 1024^3 table, warm-started from (small subsets of) the 4096^3 table."""

import json
import re
import warnings

import numpy as np
import pytest

from bocast.measure.parts import make_measurer, make_runner
from bocast.measure.replay import ReplayDataset
from bocast.records.datasets import load_dataset
from bocast.run.tuner import Tuner
from bocast.space.candidates import SpaceCandidates, TableCandidates
from bocast.space.operators.operator import get_operator
from bocast.space.space import Space
from bocast.strategies import StrategyError, make_strategy
from bocast.strategies.bo.sources import translate
from tests.spaces.test_pipelined import BEST_4096

T1024 = "exhaustive/gemm_1024_1024_1024_v2"
T4096 = "exhaustive/gemm_4096_4096_4096_v2"
OP1024 = get_operator("gemm").from_args((1024, 1024, 1024))
OP4096 = get_operator("gemm").from_args((4096, 4096, 4096))
FAST = {"pool_size": 512, "fit_maxiter": 25, "warm_start_points": 128}


def replay(dataset, store=None):
    """The measurer of a replay run of ``dataset`` (into ``store``, where given)."""
    return make_measurer(dataset.op, store, make_runner("replay", dataset=dataset))


def subset(src: str, dst: str, rows, **change) -> str:
    """A dataset of ``rows`` of ``src`` written at ``dst`` (columns in ``change`` replaced)."""
    df, meta = load_dataset(src)
    df = df.iloc[rows].assign(**change)
    df.to_csv(dst + ".csv.gz", index=False)
    with open(dst + ".json", "w") as f:
        json.dump({**meta, "rows": len(df)}, f)
    return dst


@pytest.fixture(scope="module")
def target():
    return ReplayDataset(T1024, OP1024)


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """400 rows of the 4096^3 table, its best row among them."""
    df, _ = load_dataset(T4096)
    rows = sorted({*range(399), int(df.tflops.idxmax())})
    return subset(T4096, str(tmp_path_factory.mktemp("src") / "g4096"), rows)


def test_translation_keeps_the_block_and_rescales_the_grid():
    t = translate(BEST_4096, OP1024.space)
    # 128 x 128 block tile of 2 x 2 warps, BK 32: 8 x 8 blocks at 1024^3 instead of 32 x 32
    assert t["tile_i"] == (8, 2, 4) and t["tile_j"] == (8, 2, 4) and t["tile_k"] == (32, 2)
    assert {k: v for k, v in t.items() if not k.startswith("tile_")} == \
        {k: v for k, v in BEST_4096.items() if not k.startswith("tile_")}
    assert translate(t, OP4096.space) == BEST_4096
    # an inner level that does not divide the target's extent: no translation
    assert translate({**BEST_4096, "tile_i": (2, 16, 128)}, OP1024.space) is None


def test_warm_start_changes_the_first_batch_to_the_source_models_picks(target, source):
    cold = make_strategy("bo", target.candidates(), seed=0, **FAST)
    warm = make_strategy("bo", target.candidates(), seed=0, warm_start=[source], **FAST)
    a, b = cold.ask(8), warm.ask(8)
    assert len(b) == 8 and warm.last_round["warm_start"]
    assert {Space.key(c) for c in a}.isdisjoint({Space.key(c) for c in b})
    # the picks rank high by the source model over the whole target table
    everything = warm.source.mean(warm.features(target.configs))
    picked = warm.source.mean(warm.features(b))
    assert picked.max() >= np.quantile(everything, 0.95)
    assert np.median(picked) > np.median(everything)


def test_source_rows_are_not_trials_and_stay_proposable(target, tmp_path):
    # a source of the target's own shape whose rows are ALL the candidates: were they taken
    # as measured, nothing would be left to propose
    rows = list(range(0, 4562, 50))
    src = subset(T1024, str(tmp_path / "own"), rows)
    cands = TableCandidates(OP1024.space, [target.configs[i] for i in rows], OP1024.workload)
    s = make_strategy("bo", cands, seed=0, warm_start=[src], **FAST)
    assert not s.history and not s.proposed
    res = Tuner(s, replay(target), trials=24, batch_size=8).run()
    assert len(res.records) == len(s.history) == len(s.proposed) == 24
    assert {r.key for r in res.records} <= set(cands.keys)


def test_same_seed_same_trajectory(target, source):
    def run(seed):
        s = make_strategy("bo", target.candidates(), seed=seed, warm_start=[source], **FAST)
        return [r.key for r in Tuner(s, replay(target), trials=16, batch_size=8)
                .run().records]

    first = run(3)
    assert first == run(3) and len(first) == 16
    assert first[:8] != run(4)[:8]


def test_the_target_model_sees_the_source_mean_as_one_more_input(target, source):
    s = make_strategy("bo", target.candidates(), seed=0, warm_start=[source], **FAST)
    s.tell([target.record(c) for c in s.ask(8)])
    assert len(s.ask(8)) == 8 and "warm_start" not in s.last_round  # the target model's round
    assert s.surrogate.X.shape[1] == s.features.bounds().shape[1] + 1


@pytest.mark.parametrize("strategy", ["bo", "cga"])
@pytest.mark.parametrize("paths, message", [
    (["bmm_12_512_512_64"],
     "holds records of bmm (dtype fp16:fp32, layout NT, space v1), not of the target's gemm"),
    (["gemm_1024_1024_1024"],
     "(space differ); a source must be the same operator on another shape"),
    (["no_such_dataset"], "no_such_dataset.json not found"),
    (["runs/no_such_store.db"], "record store runs/no_such_store.db not found"),
    ("gemm_4096_4096_4096_v2", "warm_start: expected a list, got"),
    ([3], "warm_start: expected a list of dataset prefixes or record store paths, got [3]"),
])
def test_bad_sources_name_the_problem(target, paths, message, strategy):
    fast = FAST if strategy == "bo" else {}
    with pytest.raises(StrategyError, match=re.escape(message)):
        make_strategy(strategy, target.candidates(), seed=0, warm_start=paths, **fast)


def test_a_source_without_ok_rows_is_refused(target, tmp_path):
    # a failure has no timing (bocast.records.record.check_record refuses a failed row with TFLOPS)
    src = subset(T4096, str(tmp_path / "failed"), range(5), status="build_error",
                 tflops=float("nan"))
    with pytest.raises(StrategyError, match=re.escape(f"{src} has no successful (ok) rows")):
        make_strategy("bo", target.candidates(), seed=0, warm_start=[src], **FAST)


def test_warm_start_needs_the_targets_workload(source):
    with pytest.raises(StrategyError, match="warm_start needs the target's workload"):
        make_strategy("bo", SpaceCandidates(OP1024.space), seed=0, warm_start=[source], **FAST)
    s = make_strategy("bo", SpaceCandidates(OP1024.space, OP1024.workload), seed=0,
                      warm_start=[source], **FAST)
    picks = s.ask(4)  # live candidates: the best source rows that are feasible join the pool
    assert len(picks) == 4 and not any(OP1024.space.validate_many(picks))


# --- another operator on the same matmul schedule: GEMM records for conv2d and bmm ----------
TCONV = "exhaustive/conv2d_16_14_14_256_256_3_3_1_1_1_v2"
OPCONV = get_operator("conv2d").from_args((16, 14, 14, 256, 256, 3, 3, 1, 1, 1))
OPBMM = get_operator("bmm").from_args((12, 512, 512, 64))


def test_a_gemm_block_tile_is_the_same_tile_in_a_conv2d_and_a_bmm():
    gemm = {**BEST_4096, "tile_i": (64, 2, 2)}  # 64 x 128 block tile, BK 32
    conv = translate(gemm, OPCONV.space)  # M = 16*14*14 = 3136 rows, K = 3*3*256 = 2304
    assert conv["tile_i"] == (3136 // 64, 2, 2) and conv["tile_k"] == (2304 // 32, 2)
    assert conv["tile_j"] == (256 // 128, 2, 4)
    assert translate(conv, OP4096.space) == gemm
    bmm = translate(gemm, OPBMM.space)  # a knob GEMM lacks takes its first value
    assert bmm["batch_bind"] == OPBMM.space.knob("batch_bind").choices[0]
    assert bmm["tile_k"] == (64 // 32, 2) and bmm["tile_i"] == (512 // 64, 2, 2)
    assert translate(bmm, OP4096.space) == gemm  # and a knob the target lacks is dropped
    assert translate(BEST_4096, OPCONV.space) is None  # 128 rows do not divide 3136


def test_gemm_records_warm_start_a_conv2d(source):
    conv = ReplayDataset(TCONV, OPCONV)
    s = make_strategy("bo", conv.candidates(), seed=0, warm_start=[source], **FAST)
    picks = s.ask(8)
    assert len(picks) == 8 and s.last_round["warm_start"]
    assert not any(OPCONV.space.validate_many(picks))
    # its model: the GEMM rows that fit the convolution's extents, in its space
    assert s.source.sources[0].dropped > 0 and s.source.configs
    assert all(not OPCONV.space.structural_violations(c) for c in s.source.configs)


@pytest.mark.parametrize("change, differ", [
    ({"dtype": "fp16:fp16"}, "dtype, layout, op differ"),
    ({"space": "v1"}, "layout, op, space differ"),
])
def test_another_operators_records_must_share_the_matmul(source, tmp_path, change, differ):
    df, meta = load_dataset(source)
    src = str(tmp_path / "other")
    df.to_csv(src + ".csv.gz", index=False)
    with open(src + ".json", "w") as f:
        json.dump({**meta, "workload": {**meta["workload"], **change}}, f)
    conv = ReplayDataset(TCONV, OPCONV)
    with pytest.raises(StrategyError, match=re.escape(
            f"({differ}); a source must be the same operator on another shape, or another "
            "operator on the same Tensor Core matmul (space, dtypes, operand layout)")):
        make_strategy("bo", conv.candidates(), seed=0, warm_start=[src], **FAST)


# --- the CGA's warm start: its first round is the best source rows the target contains -------
def test_the_cga_starts_from_the_best_source_rows(target, source):
    from bocast.strategies.bo.transfer import ranked_configs

    s = make_strategy("cga", target.candidates(), seed=0, warm_start=[source])
    first = s.ask(8)
    # best first: the source's best row, translated, with the 1024^3 table's raster (1, the
    # 4096^3 table's is 16), heads the first round
    df, _ = load_dataset(source)
    top = translate(ReplayDataset(source, OP4096).configs[int(np.argmax(df.tflops))], OP1024.space)
    assert top["raster"] == 16 and Space.key(first[0]) == Space.key({**top, "raster": 1})
    ranked = [{**c, "raster": 1} for c in ranked_configs([source], OP1024)]
    assert [Space.key(c) for c in first] == [Space.key(c) for c in ranked[:8]]
    assert all(s.candidates.contains(c) for c in first)
    # after the first round the tree model takes over; the seeds are not proposed again
    s.tell([target.record(c) for c in first])
    assert s.ask(8) and s.model.model is not None


def test_a_cold_cga_is_unchanged_by_the_option_left_empty(target):
    a = make_strategy("cga", target.candidates(), seed=5)
    b = make_strategy("cga", target.candidates(), seed=5, warm_start=[])
    assert [Space.key(c) for c in a.ask(8)] == [Space.key(c) for c in b.ask(8)]


def test_bo_can_start_from_the_rows_the_cga_starts_from(target, source):
    cga = make_strategy("cga", target.candidates(), seed=0, warm_start=[source]).ask(8)
    bo = make_strategy("bo", target.candidates(), seed=0, warm_start=[source],
                       warm_start_top=3, **FAST)
    picks = bo.ask(8)
    assert [Space.key(c) for c in picks[:3]] == [Space.key(c) for c in cga[:3]]
    assert len({Space.key(c) for c in picks}) == 8 and bo.last_round["warm_start_top"] == 3
    # left at 0 the first batch is LogEI's alone, as before the option existed
    plain = make_strategy("bo", target.candidates(), seed=0, warm_start=[source], **FAST)
    assert plain.ask(8) and plain.last_round["warm_start_top"] == 0


def test_interleave_takes_turns_and_keeps_each_item_once():
    from bocast.strategies.bo.transfer import interleave

    assert interleave([1, 2, 3], [3, 4]) == [1, 3, 2, 4]
    assert interleave([1, 2, 3], [1, 5, 6]) == [1, 5, 2, 6, 3]  # a taken item is passed over
    assert interleave([], [5, 6]) == [5, 6] and interleave([7], []) == [7]


def test_a_share_of_the_first_batch_alternates_source_rows_and_model_picks(target, source):
    cga = make_strategy("cga", target.candidates(), seed=0, warm_start=[source]).ask(8)
    rows = make_strategy("bo", target.candidates(), seed=0, warm_start=[source],
                         warm_start_top=4, **FAST).ask(8)
    bo = make_strategy("bo", target.candidates(), seed=0, warm_start=[source],
                       warm_start_share=0.5, **FAST)
    picks = bo.ask(8)
    keys = [Space.key(c) for c in picks]
    assert len(set(keys)) == 8 and bo.last_round["warm_start_top"] == 4
    assert keys[0::2] == [Space.key(c) for c in cga[:4]]  # the best source rows, in turn
    assert set(keys[1::2]) == {Space.key(c) for c in rows[4:]}  # the model's picks, as with top
    with pytest.raises(StrategyError, match="warm_start_top and warm_start_share"):
        make_strategy("bo", target.candidates(), seed=0, warm_start=[source], warm_start_top=2,
                      warm_start_share=0.5)


def test_the_best_source_rows_take_turns_nearest_source_first():
    # pooled by z-score, the 1024^3 table's small tiles came first for every target (its best
    # stand furthest above its mean); in turn, each source's best comes in the order given
    from bocast.space.operators.operator import make
    from bocast.strategies.bo.sources import load_sources
    from bocast.strategies.bo.transfer import ranked_configs

    target = make("gemm", (2048, 6144, 4096), space="v3")
    paths = [f"exhaustive/gemm_{s}_v3" for s in
             ("4096_4096_4096", "2048_8192_1024", "1024_1024_1024")]
    bests = [s.configs[int(np.argmax(s.log_tflops))] for s in load_sources(paths, target)]
    assert len({Space.key(c) for c in bests}) == 3  # three different best rows
    assert ranked_configs(paths, target)[:3] == bests
    assert ranked_configs(paths[::-1], target)[:3] == bests[::-1]


def test_v3_source_rows_are_rescaled_by_their_wave_efficiency():
    # 4096^3's best tile (128 x 256: 4 waves of 132 SMs, 0.97 of the slots busy) is 32 tiles at
    # 1024^3 (0.24): carried over as measured it would start the run, rescaled it does not;
    # the first row is a tile that keeps the SMs busy at 1024^3
    from bocast.space.operators.operator import make
    from bocast.strategies.bo.sources import _ok_rows, load_sources

    path = "exhaustive/gemm_4096_4096_4096_v3"
    target, source_op = make("gemm", (1024,) * 3, space="v3"), make("gemm", (4096,) * 3,
                                                                     space="v3")
    (src,) = load_sources([path], target)
    rows = _ok_rows(path, source_op)
    measured = np.log([t for _, t in rows])
    n = len(rows)  # the rows, then their tail_split twins (the next test)
    wave_t = target.space.columns(src.configs[:n])["wave_efficiency"]
    wave_s = source_op.space.columns([c for c, _ in rows])["wave_efficiency"]
    assert np.allclose(src.log_tflops[:n], measured + np.log(wave_t / wave_s))
    assert (src.configs[int(np.argmax(measured))]["bm"],
            src.configs[int(np.argmax(measured))]["bn"]) == (128, 256)
    assert wave_t[int(np.argmax(src.log_tflops[:n]))] > 0.9
    # a memory-bound target (a bmm of 57 flops a byte: its time is its traffic) takes the
    # rows as measured; 1024^3 moves 8 MB for 2.1 GFLOP (256 a byte)
    from bocast.strategies.bo.sources import COMPUTE_BOUND

    bmm = make("bmm", (32, 1024, 1024, 128), space="v3")
    assert bmm.arithmetic_intensity < COMPUTE_BOUND <= target.arithmetic_intensity == 256
    (to_bmm,) = load_sources([path], bmm)
    assert np.allclose(np.sort(to_bmm.log_tflops), np.sort(measured[
        [i for i, (c, _) in enumerate(rows) if translate(c, bmm.space)]]))
    # v2 derives no wave efficiency: its rows are carried over as measured
    (v2,) = load_sources([T4096], OP1024)
    assert np.allclose(np.sort(v2.log_tflops), np.sort(
        np.log([t for c, t in _ok_rows(T4096, OP4096) if translate(c, OP1024.space)])))


def test_a_source_that_never_varied_tail_split_gets_wave_twins_at_the_target():
    # 2048x28672x8192: the 128 x 128 tile walks 3,584 tiles, 27 rounds of 132 SMs and a 28th of
    # 20; cut into 4 slices that round takes a quarter of one (results/tail_split_h200: the
    # 128 x 192 kernel's tail-4 twin re-timed 1.027 of cuBLAS, itself 1.000; the table has no
    # 128 x 192 row). No shipped table has a row off tail 1.
    from bocast.space.operators.operator import make
    from bocast.strategies.bo.sources import _ok_rows, load_sources

    path = "exhaustive/gemm_4096_4096_4096_v3"
    target, source_op = make("gemm", (2048, 28672, 8192), space="v3"), make(
        "gemm", (4096,) * 3, space="v3")
    rows = _ok_rows(path, source_op)
    assert {c.get("tail_split", 1) for c, _ in rows} == {1}
    (src,) = load_sources([path], target)
    n, space = len(rows), target.space
    twins, base = src.configs[n:], src.configs[:n]
    assert twins and {c["tail_split"] for c in twins} == {2, 4}  # no tile's 8 slices fit
    assert space.feasible_mask(space.columns(twins)).all()
    assert any((c["bm"], c["bn"], c["tail_split"]) == (128, 128, 4) for c in twins)
    by_key = {Space.key({**c, "tail_split": 1}): i for i, c in enumerate(base)}
    for j, twin in enumerate(twins):
        i = by_key[Space.key({**twin, "tail_split": 1})]
        we = space.columns([base[i], twin])["wave_efficiency"]
        assert src.log_tflops[n + j] == pytest.approx(src.log_tflops[i] + np.log(we[1] / we[0]))
        if (twin["bm"], twin["bn"], twin["tail_split"]) == (128, 128, 4):
            assert we[1] / we[0] == pytest.approx(28 / 27.25)
    # a source whose rows vary tail_split says what it does: no twins
    from bocast.strategies.bo.sources import _wave_twins

    varied = [dict(base[0], tail_split=1), dict(twins[0])]
    got, ys = _wave_twins(varied, np.zeros(2), space.columns(varied)["wave_efficiency"], space)
    assert got == varied and len(ys) == 2
    # a memory-bound target (bmm of 57 flops a byte) gets none either
    bmm = make("bmm", (32, 1024, 1024, 128), space="v3")
    (to_bmm,) = load_sources([path], bmm)
    assert {c.get("tail_split", 1) for c in to_bmm.configs} == {1}


def test_gemm_rows_carried_into_conv2d_v3_get_a_feasible_pixel_tile():
    # a GEMM row has no pixel tile; the first values (1 x 1: BM images per tile) never fit 16
    # images, so no GEMM source row could start a conv2d v3 run
    from bocast.space.candidates import SpaceCandidates
    from bocast.space.operators.operator import make
    from bocast.strategies.bo.transfer import ranked_configs

    conv = make("conv2d", (16, 28, 28, 128, 128, 3, 3, 1, 1, 1), space="v3")
    rows = ranked_configs(["exhaustive/gemm_1024_1024_1024_v3"], conv)[:50]
    assert all(conv.space.is_feasible(c) for c in rows)
    assert rows[0]["tile_w"] * rows[0]["tile_h"] > 1
    cands = SpaceCandidates(conv.space, conv.workload)
    assert best_rows_of(rows, cands, 8) and len(best_rows_of(rows, cands, 8)) == 8


def best_rows_of(ranked, candidates, n):
    from bocast.strategies.bo.transfer import best_rows

    return best_rows(ranked, candidates, set(), n)


def test_a_dataset_is_translated_once_per_target_and_read_again_when_it_changes(tmp_path):
    # a run's automatic choice checks each candidate source, then its model reads the chosen:
    # one translation; a rewritten dataset (another stamp) is read again
    import os

    from bocast.strategies.bo.sources import load_sources

    path = subset(T4096, str(tmp_path / "g4096"), list(range(60)))
    (a,) = load_sources([path], OP1024)
    assert load_sources([path], OP1024)[0] is a
    assert load_sources([path], get_operator("gemm").from_args((2048,) * 3))[0] is not a
    subset(T4096, path, list(range(30)))
    os.utime(path + ".csv.gz", (1, 1))  # a new stamp even within the clock's resolution
    (b,) = load_sources([path], OP1024)
    assert b is not a and len(b.configs) < len(a.configs)


def test_a_live_warm_start_keeps_the_gps_inputs_in_the_unit_cube():
    """Issue 40: the source column's bounds came from a sample of the live space alone, and
    the first batch (what the source model rates best) lay above it: BoTorch warned "not
    contained to the unit cube" in every warm-started live run. The rows that would have left
    the cube, and the second round's fit (where BoTorch checks), stay inside it now."""
    from botorch.exceptions.warnings import InputDataWarning

    from bocast.records.record import Record
    from bocast.records.status import Status
    from bocast.strategies.bo.transfer import mean_bounds

    # the case needs a reference sample of the live space below the first batch: a draw, so a
    # change of the space's draws may move it (tail_split's did at 2048 x 4096 x 4096: the
    # sample gained a 256 x 192 kernel the source model rates above every first-batch row)
    op = get_operator("gemm").from_args((2048, 2048, 4096), space="v3")
    sources = ["gemm_4096_4096_4096_v3"]
    bo = make_strategy("bo", SpaceCandidates(op.space, op.workload), seed=0,
                       warm_start=sources, warm_start_share=0.5, n_init=4, **FAST)
    first = bo.ask(16)
    x = bo.surrogate.scale(bo._inputs(first)).numpy()
    assert x.min() >= 0 and x.max() <= 1
    # the case that warned: the source mean of the first batch exceeds the sample's range
    raw = bo.source.mean(bo.features(first))
    sampled = bo.source.mean(bo.features(bo.candidates.reference_configs()))
    assert raw.max() > sampled.max()
    assert list(mean_bounds(np.array([0.0, 1.0]), np.array([2.0]))) == pytest.approx([-0.2, 2.2])
    bo.tell([Record(Space.key(c), c, Status.OK, tflops=100.0 + i)
             for i, c in enumerate(first)])
    with warnings.catch_warnings():
        warnings.simplefilter("error", InputDataWarning)
        assert len(bo.ask(4)) == 4  # the GP's fit on the first batch: no warning
