"""TVM MetaSchedule as a competitor, measured by our builder and runner.

``tune_tir`` keeps its own search (the post-order-apply space with TVM's CUDA Tensor Core rules,
evolutionary search, XGBoost cost model); we plug in a builder and a runner so that its trials are

- built like ours: TVM lowering and nvcc for sm_90 in our process pool, with our build time
  limit (default 180 s, not MetaSchedule's 30 s, which on the H100 machine killed 90-100% of its
  candidates: ../shared/anchors/README.md), failures classified the same way, and one TVM pass
  option (``PASS_CONFIG``, below) that works around a TVM 0.27 lowering bug its candidates hit;
- timed like ours: the same isolated runner, CUDA-graph event timing, random inputs and
  correctness check against torch;
- counted like ours: every candidate handed to the builder is one trial, failures included, and
  each is appended to a bocast record store as it finishes (``config`` holds the candidate's
  structural hash; the traces are in MetaSchedule's own database under ``work_dir``).

MetaSchedule schedules the operator's unscheduled ``prim_func()``; it does not see our space.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from bocast.measure.builder import Builder, BuildResult
from bocast.measure.engine import to_record
from bocast.measure.runner import Runner
from bocast.records.provenance import provenance
from bocast.records.record import Record
from bocast.records.status import Status
from bocast.records.store import Store
from bocast.run.tuner import Trajectory, best_so_far
from bocast.space.operators.operator import Operator
from bocast.space.tensorcore import SM90_TARGET, import_all_intrinsics

NAME = "metaschedule"

#: TVM 0.27's StorageRewrite merges MetaSchedule's fp16 operand and fp32 accumulator staging
#: buffers (both in ``shared.dyn``) into one and then fails its own dtype check ("tvm_access_ptr
#: element type must match the source buffer"): 70% of its candidates on our live GEMM runs of
#: 2026-11-23. With this option StorageRewrite leaves shared memory to the pass that merges
#: allocations by byte offset, and those candidates lower and compile (checked on the CPU with
#: nvcc: same registers and shared memory as with storage rewrite disabled). A workaround for
#: the competitor, in the spirit of giving it a builder that does not censor its search.
PASS_CONFIG = {"tirx.merge_static_smem": True}


class _Bridge:
    """What MetaSchedule's builder and runner calls reach: our builder, runner and store."""

    def __init__(self, op: Operator, store: Store, builder: Builder, runner: Runner,
                 session: int):
        self.op, self.store, self.builder, self.runner = op, store, builder, runner
        self.session = session
        self.built: dict[str, BuildResult] = {}
        self.records: list[Record] = []

    def keep(self, rec: Record) -> None:
        self.store.append(rec, self.session)
        self.records.append(rec)

    def build(self, mods) -> list[tuple[str | None, str | None]]:
        """(artifact key, error) per module; failed builds are recorded here."""
        import tvm
        from tvm_ffi.structural import structural_hash

        self.built.clear()  # artifacts live from one build call to the run that follows it
        keyed = []
        for mod in mods:
            key = f"ms:{structural_hash(mod) & (2**64 - 1):016x}"
            keyed.append((key, tvm.ir.save_json(mod)))
        # MetaSchedule may propose a module it has measured before (its database dedupes by
        # structure, we by hash); measure it again but do not count it twice
        out: list[tuple[str | None, str | None]] = []
        for b in self.builder.build_modules(self.op, keyed, pass_config=PASS_CONFIG):
            if b.status is Status.OK:
                self.built[b.key] = b
                out.append((b.key, None))
            else:
                if b.key not in self.store:
                    self.keep(to_record(b.key, {"metaschedule": b.key}, b, None, NAME))
                out.append((None, f"{b.status}: {b.error}"))
        return out

    def run(self, keys: Sequence[str]) -> list[tuple[float | None, str | None]]:
        """(seconds, error) per built artifact; every result is recorded."""
        builds = [self.built[k] for k in keys]
        out: list[tuple[float | None, str | None]] = []
        for b, r in zip(builds, self.runner.run(self.op, builds)):
            if b.key not in self.store:
                self.keep(to_record(b.key, {"metaschedule": b.key}, b, r, NAME))
            if r.status is Status.OK and r.latency_ms is not None:
                out.append((r.latency_ms * 1e-3, None))
            else:
                out.append((None, f"{r.status}: {r.error}"))
        return out


def cannot_resume(store: Store, work_dir: str) -> str | None:
    """Why a run cannot go on from ``store`` and ``work_dir`` (None when it can): a store with
    trials needs the MetaSchedule database they came from."""
    if len(store) and not os.path.exists(os.path.join(work_dir, "database_tuning_record.json")):
        return (f"the store holds {len(store)} MetaSchedule trials but {work_dir} has no "
                "MetaSchedule database to resume from")
    return None


def tune(op: Operator, *, trials: int, seed: int, store: Store, builder: Builder, runner: Runner,
         work_dir: str, batch_size: int = 32, reference: float | None = None,
         session_info: dict | None = None, search: dict | None = None) -> Trajectory:
    """Run MetaSchedule on ``op`` until ``store`` holds ``trials`` candidates; returns our
    Trajectory (records in the order they were written).

    An interrupted run resumes from ``work_dir``: MetaSchedule reloads its database (every
    candidate measured so far, which seeds its evolutionary search and excludes repeats) and
    runs the trials that are missing from the store. Its cost model restarts from that
    database rather than from the lost process's state.

    ``search``: options of MetaSchedule's evolutionary search (``population_size``,
    ``genetic_num_iters``, ...) in place of its defaults; the tests use a small search, whose
    default population of 512 costs minutes of CPU per round."""
    import time

    import tvm
    from tvm.ir.utils import derived_object
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.builder import BuilderResult, PyBuilder
    from tvm.s_tir.meta_schedule.runner import PyRunner, RunnerFuture, RunnerResult

    import_all_intrinsics()  # the WMMA/MMA intrinsics its Tensor Core rules use

    problem = cannot_resume(store, work_dir)
    if problem:
        raise ValueError(f"{NAME}: {problem}")
    done = store.records()
    bridge = _Bridge(op, store, builder, runner,
                     store.start_session(provenance({**(session_info or {}), "strategy": NAME,
                                                     "pass_config": PASS_CONFIG})))
    bridge.records = list(done)
    if len(done) >= trials:
        return Trajectory(done, best_so_far(done), 0.0, None, [], None, reference)

    @derived_object
    class _Builder(PyBuilder):
        def build(self, build_inputs):
            return [BuilderResult(key, err)
                    for key, err in bridge.build([b.mod for b in build_inputs])]

    @derived_object
    class _Runner(PyRunner):
        def run(self, runner_inputs):
            results = bridge.run([r.artifact_path for r in runner_inputs])
            return [RunnerFuture(lambda: True,
                                 lambda s=s, e=e: RunnerResult([s] if s is not None else None, e))
                    for s, e in results]

    space = ms.space_generator.PostOrderApply(sch_rules="cuda-tensorcore",
                                              postprocs="cuda-tensorcore",
                                              mutator_probs="cuda-tensorcore")
    os.makedirs(work_dir, exist_ok=True)
    t0 = time.perf_counter()
    ms.tune_tir(tvm.IRModule({"main": op.prim_func()}), tvm.target.Target(SM90_TARGET), work_dir,
                max_trials_global=trials - len(done), num_trials_per_iter=batch_size,
                builder=_Builder(),
                runner=_Runner(), space=space, seed=seed, num_tuning_cores=os.cpu_count() or 1,
                strategy=ms.search_strategy.EvolutionarySearch(**search) if search
                else "evolutionary",
                # the default callbacks also delete build artifacts, which are files for its
                # own builder and keys for ours
                measure_callbacks=[ms.measure_callback.AddToDatabase(),
                                   ms.measure_callback.UpdateCostModel()])
    return Trajectory(bridge.records, best_so_far(bridge.records), time.perf_counter() - t0,
                      None, [], None, reference)

