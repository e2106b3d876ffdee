"""The package as a wheel installs it: ``bocast --version``, and the shipped datasets as package
data (bocast/data/), found through one function (bocast.records.datasets.locate): by name, by their
path in the package, and by the path they had before, experiments/data/..., which older
configurations and stores name. (CI installs the wheel itself and runs the quick start: .ci/run.)"""

import os
import platform

import pytest

import bocast
from bocast.records import library
from bocast.records.datasets import locate, shipped_datasets, shipped_folder, shipped_name
from bocast.run import identity
from bocast.run.config import parse

T1024 = "exhaustive/gemm_1024_1024_1024_v2"


def test_version_names_bocast_python_tvm_and_torch(bocast_cli):
    code, out, err = bocast_cli("--version")
    assert code == 0 and err == ""
    assert out.startswith(f"bocast {bocast.__version__}")
    assert f"Python {platform.python_version()}" in out and "apache-tvm " in out
    assert "torch " in out and len(out.strip().splitlines()) == 1


def test_the_shipped_datasets_are_the_packages_data():
    assert shipped_folder() == os.path.join(os.path.dirname(os.path.abspath(
        bocast.__file__)), "data")
    names = [library.portable(p) for p in shipped_datasets()]
    assert "gemm_32_2048_1000" in names and T1024 in names and len(names) == len(set(names))


@pytest.mark.parametrize("given", [
    T1024, f"experiments/data/{T1024}", f"./experiments/data/{T1024}",
    f"/somewhere/else/experiments/data/{T1024}", f"bocast/data/{T1024}"])
def test_a_shipped_dataset_is_found_by_its_name_and_its_old_path(given):
    assert shipped_name(given) == T1024
    assert os.path.abspath(locate(given)) == os.path.join(shipped_folder(), T1024)
    assert library.portable(given) == T1024


def test_a_path_that_exists_wins_and_an_unknown_name_stays_as_given(tmp_path):
    own = tmp_path / "exhaustive" / "gemm_1024_1024_1024_v2"
    own.parent.mkdir()
    own.with_suffix(".json").write_text("{}")
    assert locate(T1024, str(tmp_path)) == str(own)  # the user's file, not the shipped one
    for name in ("no_such_dataset", "experiments/data/no_such_dataset",
                 "../data/gemm_32_2048_1000"):
        assert shipped_name(name) is None and locate(name) == name


def test_a_configuration_naming_the_old_path_replays_the_packaged_copy(tmp_path):
    cfg = parse({"workload": {"op": "gemm", "shape": [1024, 1024, 1024], "space": "v2"},
                 "strategy": {"name": "random"}, "budget": {"trials": 8}, "seed": 0,
                 "batch_size": 8, "runner": "replay",
                 "dataset": f"experiments/data/{T1024}", "output": str(tmp_path)})
    assert cfg.dataset == os.path.join(shipped_folder(), T1024)


def test_a_store_naming_sources_by_their_old_paths_resumes_as_the_same_run():
    def ident(sources):
        return identity.run_identity(strategy="bo", options={"warm_start": sources}, seed=0,
                                     batch_size=8, runner="replay", dataset=T1024)

    old = ident([f"experiments/data/{T1024}", "experiments/data/gemm_4096_4096_4096_v2"])
    assert identity.mismatch(old, ident([T1024, "gemm_4096_4096_4096_v2"])) is None
    assert identity.mismatch(old, ident([T1024])) is not None
