"""The MetaSchedule adapter on the CPU: TVM's own search proposes, our builder lowers its
candidates (no nvcc here) and the stand-in runner (SYNTHETIC timings) runs them; every candidate
is one trial in our store, failures typed. Slow (about 3 minutes on 2 cores: MetaSchedule
imports every tensor intrinsic and searches a population per round)."""

import subprocess
import sys

from bocast import metaschedule
from bocast.measure.builder import Builder
from bocast.measure.standin import StandinRunner
from bocast.measure.status import Status
from bocast.operator import get_operator
from bocast.records import Store


def test_metaschedule_trials_are_built_run_and_recorded_like_ours(tmp_path):
    op = get_operator("gemm").from_args((256, 256, 256))
    with Builder(workers=2, compile=False) as builder, StandinRunner() as runner, \
            Store(str(tmp_path / "ms.db"), op.workload) as store:
        res = metaschedule.tune(op, trials=8, seed=0, store=store, builder=builder,
                                runner=runner, work_dir=str(tmp_path / "ms"), batch_size=8)
        rows = store.records()
    assert len(rows) == res.trials == 8
    assert [r.key for r in rows] == [r.key for r in res.records]
    assert all(r.key.startswith("ms:") and r.source == "metaschedule" for r in rows)
    assert all(r.status in (Status.OK, Status.BUILD_ERROR) for r in rows)
    # with PASS_CONFIG none should fail the storage-rewrite dtype check of TVM 0.27
    assert not any("tvm_access_ptr element type" in r.error for r in rows), [r.error for r in rows]
    assert any(r.ok for r in rows), "at least one candidate should build and run"
    for r in rows:
        if not r.ok:
            assert r.stage in ("lower", "compile") and r.error
    assert res.best_so_far[-1] == max(r.tflops or 0 for r in rows if r.ok)


def test_our_wmma_intrinsics_and_tvms_full_set_can_live_in_one_process():
    # The space builder registers only the WMMA intrinsics it needs; MetaSchedule imports TVM's
    # whole set. Either may come first in a process (here: ours first, the order that broke).
    code = ("from bocast.tensorcore import wmma_intrin\n"
            "name = wmma_intrin('load_a', (16, 16, 16), 'float16')\n"
            "import tvm.s_tir.tensor_intrin.cuda\n"
            "from tvm.s_tir import TensorIntrin\n"
            "assert TensorIntrin.get(name) is not None\n"
            "assert TensorIntrin.get('wmma_load_16x16x16_f16_a_shared') is not None\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
