"""Every configuration shipped under experiments/ reads as its command reads it, and the files it
names exist: a typo or a stale path fails here, on the CPU, instead of in a device call."""

import glob
import os

import pytest

from bocast.records.datasets import dataset_csv, locate
from bocast.run import comparison
from bocast.run.config import load, read_yaml


def _ablation():
    from bocast.tools import ablation

    return ablation


def _named_files(entries) -> list[str]:
    """The warm-start sources that strategy entries (or a table's variant options) name."""
    return [p for e in entries for p in e.get("warm_start") or []]


def _exists(path: str) -> bool:
    """A store, or a dataset as a configuration names one (a path, or a shipped one's name)."""
    return os.path.isfile(path) if path.endswith(".db") else \
        os.path.isfile(dataset_csv(locate(path)))


@pytest.mark.parametrize("path", sorted(glob.glob("experiments/compare/*.yaml")))
def test_comparisons_parse_and_name_existing_files(path):
    raw = read_yaml(path)
    comparison.parse(raw, path)
    named = _named_files(raw["strategies"]) + ([raw["dataset"]] if raw.get("dataset") else [])
    assert [p for p in named if not _exists(p)] == []


@pytest.mark.parametrize("path", sorted(glob.glob("experiments/configs/*.yaml")))
def test_tune_configs_load(path):
    load(path)  # a replay config also opens its dataset, checked against the workload


@pytest.mark.parametrize("path", sorted(glob.glob("experiments/ablation/*.yaml")))
def test_ablations_parse_and_name_existing_files(path):
    spec = read_yaml(path)
    _ablation()._configs(spec, path)
    named = [t["dataset"] for t in spec["tables"]]
    for t in spec["tables"]:
        named += _named_files((t.get("variant_options") or {}).values())
    assert [p for p in named if not _exists(p)] == []
