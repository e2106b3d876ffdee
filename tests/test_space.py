"""The generic space engine on a small space whose feasible set can be enumerated exactly."""

import collections
import itertools
import math

import numpy as np
import pytest
from scipy import stats

from bocast.space.knobs import (
    Categorical,
    Constraint,
    Ordinal,
    PowerOfTwo,
    SpaceError,
    Split,
    factorizations,
)
from bocast.space.space import Space


def toy_space() -> Space:
    knobs = [
        Categorical("shape", ("a", "b")),
        Split("tile", 3, extent=lambda c: 12 if c["shape"] == "a" else 8, extent_from=("shape",)),
        Ordinal("at", (0, 1, 2)),
        PowerOfTwo("vec", (1, 2, 4)),
        Categorical("mode", ("x", "y")),
        PowerOfTwo("pad", (0, 8), active_when={"mode": ("y",)}),
    ]
    constraints = [
        Constraint("inner_le_vec_x3", "", lambda c: c["tile"][:, 2] <= 3 * c["vec"]),
        Constraint("at_matches_outer", "", lambda c: (c["at"] < 2) | (c["tile"][:, 0] > 1)),
        Constraint("pad_needs_vec", "",
                   lambda c: (c["mode"] == "x") | (c["pad"] == 0) | (c["vec"] > 1)),
    ]
    return Space(knobs, constraints)


def enumerate_feasible(space: Space) -> list[dict]:
    return [c for c in space._enumerate_structural() if not space.validate(c)]


def test_factorizations_are_complete_and_ordered():
    f = factorizations(12, 3)
    assert len(f) == len(set(f)) == 18
    assert all(math.prod(t) == 12 for t in f)
    assert (1, 1, 12) in f and (12, 1, 1) in f and (2, 3, 2) in f


def test_size_is_exact_on_small_space():
    space = toy_space()
    feasible = enumerate_feasible(space)
    size = space.size()
    assert size.exact and size.feasible == len(feasible)
    # structural: shape a: 18 splits, shape b: 10; times at(3) vec(3) and mode x(1)+y(2 pads)
    assert space.structural_size == (18 + 10) * 3 * 3 * 3


def test_size_estimate_covers_exact_count():
    space = toy_space()
    exact = len(enumerate_feasible(space))
    est = space.size(draws=50_000, exact_limit=0)
    assert not est.exact
    assert est.ci95[0] <= exact <= est.ci95[1]


def test_sampling_is_uniform_over_feasible_set():
    space = toy_space()
    feasible = enumerate_feasible(space)
    n = 30 * len(feasible)
    counts = collections.Counter(Space.key(c) for c in space.sample(n, rng=1))
    assert set(counts) == {Space.key(c) for c in feasible}
    observed = np.array([counts[Space.key(c)] for c in feasible])
    p = stats.chisquare(observed).pvalue
    assert p > 1e-3, f"chi-square p={p}: sampling is not uniform"


def test_sample_unique_has_no_repeats():
    space = toy_space()
    n = len(enumerate_feasible(space))
    got = space.sample(n, rng=0, unique=True)
    assert len({Space.key(c) for c in got}) == n


def test_inactive_knob_is_none_and_active_knob_is_set():
    for c in toy_space().sample(200, rng=0):
        assert (c["pad"] is None) == (c["mode"] == "x")


def test_validate_names_each_violation():
    space = toy_space()
    good = {"shape": "a", "tile": (3, 2, 2), "at": 2, "vec": 2, "mode": "y", "pad": 8}
    assert space.validate(good) == []
    assert space.validate({**good, "tile": (1, 6, 2)}) == ["at_matches_outer"]
    assert space.validate({**good, "vec": 1}) == ["pad_needs_vec"]
    assert space.validate({**good, "tile": (1, 1, 12), "vec": 1}) == [
        "inner_le_vec_x3", "at_matches_outer", "pad_needs_vec"]
    assert space.validate({**good, "tile": (3, 2, 3)}) == ["tile.product"]
    assert space.validate({**good, "vec": 3}) == ["vec.choice"]
    assert space.validate({**good, "mode": "x"}) == ["pad.inactive"]
    assert space.validate({**good, "tile": (12, 1)}) == ["tile.parts"]


def test_malformed_configuration_raises_one_clear_error():
    space = toy_space()
    with pytest.raises(SpaceError, match=r"unknown knob\(s\) \['bogus'\]"):
        space.validate({"shape": "a", "tile": (3, 2, 2), "at": 0, "vec": 1, "mode": "x",
                        "pad": None, "bogus": 1})
    with pytest.raises(SpaceError, match=r"missing knob\(s\) \['pad'\]"):
        space.validate({"shape": "a", "tile": (3, 2, 2), "at": 0, "vec": 1, "mode": "x"})


def test_encode_decode_round_trip():
    space = toy_space()
    configs = enumerate_feasible(space)
    x = space.encode(configs)
    assert x.shape == (len(configs), space.encoded_width)
    assert [Space.key(c) for c in space.decode(x)] == [Space.key(c) for c in configs]


def test_decode_snaps_noise_to_the_nearest_configuration():
    space = toy_space()
    configs = space.sample(50, rng=3)
    x = space.encode(configs) + np.random.default_rng(0).normal(0, 0.05, (50, space.encoded_width))
    assert [Space.key(c) for c in space.decode(x)] == [Space.key(c) for c in configs]


def test_neighbours_are_feasible_and_change_one_knob():
    space = toy_space()
    for c in space.sample(50, rng=2):
        for nb in space.neighbours(c):
            assert space.validate(nb) == []
            changed = [k for k in c if c[k] != nb[k]]
            assert changed, "a neighbour must differ"
            # one knob, plus what a conditioning change implies (rescaled split, (in)active knobs)
            primary = [k for k in changed if k not in ("tile", "pad")] or changed
            assert len(primary) == 1


def test_neighbours_cover_every_split_move():
    space = toy_space()
    c = {"shape": "a", "tile": (3, 2, 2), "at": 0, "vec": 4, "mode": "x", "pad": None}
    tiles = {nb["tile"] for nb in space.neighbours(c)
             if nb["tile"] != c["tile"] and nb["shape"] == c["shape"]}
    assert tiles == {(1, 6, 2), (1, 2, 6), (6, 1, 2), (3, 1, 4), (6, 2, 1), (3, 4, 1)}


def test_conditioning_change_rescales_split():
    space = toy_space()
    c = {"shape": "a", "tile": (2, 2, 3), "at": 0, "vec": 4, "mode": "x", "pad": None}
    moved = [nb for nb in space.neighbours(c) if nb["shape"] == "b"]
    assert moved == [{**c, "shape": "b", "tile": (2, 2, 2)}]


def test_definition_errors():
    with pytest.raises(SpaceError):
        PowerOfTwo("v", (1, 3))
    with pytest.raises(SpaceError):
        Space([Ordinal("a", (1, 2)), Split("s", 2, extent=lambda c: 4, extent_from=("a",))], [])
    with pytest.raises(SpaceError):
        Space([Ordinal("a", (1, 2)), Ordinal("a", (1,))], [])


def test_factorizations_of_huge_extents_are_instant_and_bounded():
    import time

    from bocast.space.knobs import MAX_EXTENT

    t = time.perf_counter()
    assert factorizations(MAX_EXTENT, 3) == ((1, 1, MAX_EXTENT), (1, MAX_EXTENT, 1),
                                             (MAX_EXTENT, 1, 1))  # 2^31 - 1 is prime
    assert len(factorizations(2**30, 3)) == 31 * 32 // 2
    assert time.perf_counter() - t < 1.0
    with pytest.raises(SpaceError, match="larger than 2147483647"):
        factorizations(MAX_EXTENT + 1, 2)


def test_factorizations_keep_their_order():
    # the order decides which configuration a seed draws: lexicographic, as it always was
    for n in (1, 12, 60, 64):
        for parts in (1, 2, 3):
            f = factorizations(n, parts)
            brute = [t for t in itertools.product(range(1, n + 1), repeat=parts)
                     if math.prod(t) == n]
            assert list(f) == brute


def test_a_knob_added_later_reads_as_its_default_where_a_configuration_lacks_it():
    """A knob with a default (one added to a space after configurations of it were recorded):
    a configuration without it is completed with the default by from_json, validate and
    columns, and a dataset without its column reads as the default; a default must be one of
    an always active choice knob's values."""
    import pandas as pd

    from bocast.records.public import dataset_configs

    base = toy_space()
    space = Space([*base.knobs, Categorical("extra", ("off", "on"), default="off")],
                  base.constraints)
    config = base.sample(1, rng=0)[0]
    assert "extra" not in config
    assert space.validate(config) == [] and space.from_json(config)["extra"] == "off"
    assert space.complete(config) == {**config, "extra": "off"}
    assert space.complete({**config, "extra": "on"})["extra"] == "on"
    assert list(space.columns([config])["extra"]) == ["off"]
    with pytest.raises(SpaceError, match="missing knob"):
        space.validate({k: v for k, v in config.items() if k != "at"})
    row = {k: v for k, v in config.items() if k != "tile"}
    row.update({f"tile_{i}": p for i, p in enumerate(config["tile"])})
    (read,) = dataset_configs(pd.DataFrame([row]), list(row), space)
    assert read == {**config, "extra": "off"}
    for bad in (Categorical("extra", ("off", "on"), default="maybe"),
                Categorical("extra", ("off", "on"), default="off",
                            active_when={"mode": ("y",)})):
        with pytest.raises(SpaceError, match="default"):
            Space([*base.knobs, bad], base.constraints)


def test_coded_columns_compare_as_their_strings():
    # categorical columns come from a draw with their integer codes (structural.Coded): == and
    # != against a string must give what the string array gives, a value outside the choices
    # included, and a slice or gather must fall back to the strings
    from bocast.space.operators.operator import from_workload
    from bocast.space.structural import Coded

    space = from_workload({"op": "gemm", "shape": [128, 6144, 4096], "dtype": "fp16:fp32",
                           "layout": "NT", "space": "v3"}).space
    cols, _ = space._draw_grouped(5000, np.random.default_rng(0))
    coded = [k for k in space.knobs if isinstance(cols[k.name], Coded)]
    assert {"regs", "cluster", "swap_ab", "epilogue", "split_reduce"} <= {k.name for k in coded}
    for k in coded:
        col, plain = cols[k.name], cols[k.name].view(np.ndarray)
        for value in (*k.choices, "no such value"):
            assert np.array_equal(col == value, plain == value)
            assert np.array_equal(col != value, plain != value)
        part = col[::3]
        assert part._codes is None
        assert np.array_equal(part == k.choices[0], plain[::3] == k.choices[0])
    # the feasible rows and their order are the string arrays' (the constraints' own test)
    strings = {n: (c.view(np.ndarray) if isinstance(c, Coded) else c) for n, c in cols.items()}
    mask = space.feasible_mask(space._with_derived(dict(cols)))
    assert 0 < mask.sum() < len(mask)
    assert np.array_equal(mask, space.feasible_mask(space._with_derived(strings)))


def test_a_choice_open_only_where_its_constraint_allows_draws_only_feasible_values_uniformly():
    """``open_when``: a knob's values beyond its first are drawn only under the listed values
    of a categorical knob (tail_split's, whose other values a constraint refuses elsewhere).
    The feasible set and its uniform sampling are those of the same space without it; the
    structural set, and so the rejected draws, shrink; a configuration naming a closed value
    is still refused by the constraint."""
    def space(open_when):
        knobs = [Categorical("walk", ("persistent", "grid")), Ordinal("at", (0, 1, 2)),
                 Ordinal("tail", (1, 2, 4, 8), open_when=open_when)]
        needs = Constraint("tail_needs_persistent", "",
                           lambda c: (c["tail"] == 1) | (c["walk"] == "persistent"))
        return Space(knobs, [needs, Constraint("at_lt_tail", "", lambda c: c["at"] < c["tail"]
                                               + 1)])

    free, opened = space({}), space({"walk": ("persistent",)})
    feasible = enumerate_feasible(free)
    assert sorted(map(Space.key, feasible)) == sorted(map(Space.key, enumerate_feasible(opened)))
    assert opened.structural_size == 3 * 4 + 3 < free.structural_size == 2 * 3 * 4
    counts = collections.Counter(Space.key(c) for c in opened.sample(40 * len(feasible), rng=2))
    assert set(counts) == {Space.key(c) for c in feasible}
    assert stats.chisquare([counts[Space.key(c)] for c in feasible]).pvalue > 1e-3
    assert opened.validate({"walk": "grid", "at": 0, "tail": 4}) == ["tail_needs_persistent"]
