"""The MetaSchedule adapter on the CPU: TVM's own search proposes, our builder lowers its
candidates (no nvcc here) and the stand-in runner (SYNTHETIC timings) runs them; every candidate
is one trial in our store, failures typed.

Importing TVM's full tensor-intrinsic set, which MetaSchedule needs, costs about 30 s of CPU, and
its default search (population 512) minutes per round. Each run pays the import once: the
default run's fresh process registers our own intrinsics first (our WMMA ones, and an mma
build's: each of those orders broke that import before), then runs a small MetaSchedule
search, and the tests below read what it wrote; the slow run's full-size search registers our
WMMA intrinsics first on their own (the order of e7be78d). The fresh processes are background
jobs (tests/background.py): they start when collection ends and run on the core the tests
before them leave idle."""

import json
import os
import sys

import pytest

from bocast.records.status import Status
from bocast.records.store import Store
from bocast.space.operators.operator import get_operator
from tests import background

SMALL = r"""
import json, sys
from bocast.space.operators.operator import get_operator
from bocast.space.tensorcore import lower, wmma_intrin
from tests.spaces.test_pipelined import MMA_64

out = sys.argv[1]
ours = wmma_intrin("load_a", (16, 16, 16), "float16")  # our WMMA intrinsics first
mma = get_operator("gemm").from_args((64, 64, 64))      # and an mma build's registrations
options = mma.build_options(MMA_64)
lower(mma.apply(MMA_64).mod, pass_config=options["pass_config"],
      target_overrides=options["target"])

from bocast.run import metaschedule
from bocast.measure.builder import Builder
from bocast.measure.standin import StandinRunner
from bocast.records.store import Store

op = get_operator("gemm").from_args((128, 128, 128))
with Builder(workers=2, compile=False) as builder, StandinRunner() as runner, \
        Store(out + "/ms.db", op.workload) as store:
    res = metaschedule.tune(op, trials=4, seed=0, store=store, builder=builder, runner=runner,
                            work_dir=out + "/ms", batch_size=4,
                            search={"population_size": 16, "init_min_unmeasured": 16,
                                    "genetic_num_iters": 1})

import tvm_ffi
from tvm.s_tir import TensorIntrin
from tvm.s_tir.tensor_intrin.cuda import LDMATRIX_f16_A_INTRIN

json.dump({
    "result_keys": [r.key for r in res.records],
    "best_so_far": res.best_so_far,
    "ours_registered": TensorIntrin.get(ours) is not None,
    "tvms_registered": TensorIntrin.get("wmma_load_16x16x16_f16_a_shared") is not None,
    "ldmatrix": TensorIntrin.get(LDMATRIX_f16_A_INTRIN) is not None,
    "index_map": tvm_ffi.get_global_func(
        "tirx.index_map.shared_16x16_to_ldmatrix_32x8_layout", allow_missing=True) is not None,
}, open(out + "/result.json", "w"))
"""


# started when collection ends (tests/background.py): it runs beside the tests before these
SMALL_RUN = background.job("metaschedule_small", [sys.executable, "-c", SMALL, "{out}"],
                           timeout_s=1200)


@pytest.fixture(scope="module")
def small_run():
    proc, out = background.result(SMALL_RUN)
    assert proc.returncode == 0, proc.stderr[-3000:]
    op = get_operator("gemm").from_args((128, 128, 128))
    with Store(os.path.join(out, "ms.db"), op.workload) as store:
        rows = store.records()
    return json.load(open(os.path.join(out, "result.json"))), rows


def _recorded_like_ours(rows, keys, best_so_far, trials):
    assert len(rows) == len(keys) == trials
    assert [r.key for r in rows] == keys
    assert all(r.key.startswith("ms:") and r.source == "metaschedule" for r in rows)
    assert all(r.status in (Status.OK, Status.BUILD_ERROR) for r in rows)
    # with PASS_CONFIG none should fail the storage-rewrite dtype check of TVM 0.27
    assert not any("tvm_access_ptr element type" in r.error for r in rows), [r.error for r in rows]
    assert any(r.ok for r in rows), "at least one candidate should build and run"
    for r in rows:
        if not r.ok:
            assert r.stage in ("lower", "compile") and r.error
    assert best_so_far[-1] == max(r.tflops or 0 for r in rows if r.ok)


@pytest.mark.background(SMALL_RUN)
def test_metaschedule_trials_are_built_run_and_recorded_like_ours(small_run):
    result, rows = small_run
    _recorded_like_ours(rows, result["result_keys"], result["best_so_far"], 4)


@pytest.mark.background(SMALL_RUN)
def test_our_intrinsics_and_tvms_full_set_can_live_in_one_process(small_run):
    # The space builder registers only the intrinsics it needs (WMMA; for an mma build, the
    # ldmatrix index map too); MetaSchedule imports TVM's whole set. Ours came first here.
    result, _ = small_run
    assert result["ours_registered"] and result["tvms_registered"]
    assert result["ldmatrix"] and result["index_map"]


FULL = r"""
import json, sys
from bocast.space.tensorcore import wmma_intrin

out = sys.argv[1]
ours = wmma_intrin("load_a", (16, 16, 16), "float16")  # ours first, alone: e7be78d's order

from bocast.run import metaschedule
from bocast.measure.builder import Builder
from bocast.measure.standin import StandinRunner
from bocast.space.operators.operator import get_operator
from bocast.records.store import Store

op = get_operator("gemm").from_args((256, 256, 256))
with Builder(workers=2, compile=False) as builder, StandinRunner() as runner, \
        Store(out + "/ms.db", op.workload) as store:
    res = metaschedule.tune(op, trials=8, seed=0, store=store, builder=builder,
                            runner=runner, work_dir=out + "/ms", batch_size=8)
from tvm.s_tir import TensorIntrin

json.dump({"result_keys": [r.key for r in res.records], "best_so_far": res.best_so_far,
           "ours_registered": TensorIntrin.get(ours) is not None,
           "tvms_registered": TensorIntrin.get("wmma_load_16x16x16_f16_a_shared") is not None},
          open(out + "/result.json", "w"))
"""
FULL_RUN = background.job("metaschedule_full", [sys.executable, "-c", FULL, "{out}"],
                          timeout_s=1800)


@pytest.mark.slow
@pytest.mark.background(FULL_RUN)
def test_metaschedule_full_search_records_like_ours():
    """MetaSchedule's default search (population 512), 8 trials: minutes on 2 cores; a
    background job (in-process before: it now runs beside the other slow tests). Our WMMA
    intrinsics were registered first, on their own: TVM's whole set was imported after them."""
    proc, out = background.result(FULL_RUN)
    assert proc.returncode == 0, proc.stderr[-3000:]
    op = get_operator("gemm").from_args((256, 256, 256))
    with Store(os.path.join(out, "ms.db"), op.workload) as store:
        rows = store.records()
    with open(os.path.join(out, "result.json")) as f:
        result = json.load(f)
    _recorded_like_ours(rows, result["result_keys"], result["best_so_far"], 8)
    assert result["ours_registered"] and result["tvms_registered"]
