"""Export a record's kernel (:func:`export`, ``bocast export``) and load it (:func:`load_kernel`).

A store keeps a record's configuration, not its kernel. :func:`export` rebuilds the kernel with
the builder the runner's kernels come from (``bocast.measure.builder.build_one``: the same
schedule, lowering and nvcc flags) and writes a folder:

==============  ================================================================================
schedule.py     the scheduled TensorIR module (TVMScript, to read: TVM 0.27 prints its mma
                intrinsics in a form its parser refuses)
schedule.json   the same module in TVM's serialisation (``tvm.ir.load_json``, exact)
kernel.cu       the CUDA source TVM generated (what nvcc compiled)
kernel.cubin    nvcc's sm_90 binary: the kernel the runner times
kernel.so       TVM's ``export_library`` of the compiled module (host launcher + CUDA kernel)
kernel.json     workload, configuration, the record's stored figures, launch, provenance, and
                the sha256 of every file
==============  ================================================================================

Why a cubin beside kernel.so: a TVM built without CUDA (the CPU machines) cannot put a binary
in its module; it keeps the CUDA source, and TVM compiles that source when the module is loaded,
through its global ``tvm_callback_cuda_compile`` (NVRTC by default). :func:`load_kernel` answers
that call with kernel.cubin, so the kernel it runs is byte for byte the one the store's row
timed. ``tvm.runtime.load_module("kernel.so")`` alone works too, with TVM's own compiler.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from typing import Any

from bocast.errors import InputError

FORMAT = "bocast-kernel"
FILES = ("schedule.py", "schedule.json", "kernel.cu", "kernel.cubin", "kernel.so")
META = "kernel.json"


def export(store: str | os.PathLike, *, out: str | os.PathLike, record: int | str = "best",
           any_status: bool = False) -> Kernel:
    """Rebuild one record of ``store`` and write its kernel into the folder ``out`` (new or
    empty). ``record``: ``"best"`` (the ok row of highest TFLOPS, the first of equals), a row
    id, or a configuration key. A record whose status is not ``ok`` is refused unless
    ``any_status``. Returns the exported :class:`Kernel` (not loaded: calling it loads it).
    Needs TVM, nvcc and a C compiler (``export_library``), no GPU; nothing is written unless
    the whole folder is."""
    from bocast.api import need_compiler
    from bocast.operator import from_workload
    from bocast.records import Store
    from bocast.schema import check_writable

    store, out = os.fspath(store), os.fspath(out)
    check_writable(out, "out", directory=True)
    if os.path.isdir(out) and os.listdir(out):
        raise InputError(f"out: {out} is not empty; export writes into a new or empty folder")
    with Store(store, None, readonly=True) as db:
        rows, workload = db.rows(), db.workload
        reference, subspace = db.get_meta("reference"), db.get_meta("subspace")
        sessions = {s["id"]: s for s in db.sessions()}
    row_id, session, rec = _pick(rows, record, store)
    if not rec.ok and not any_status:
        raise InputError(f"{store}: record {row_id} has status {rec.status}"
                         f"{f' ({rec.error[:200]})' if rec.error else ''}; export it with "
                         "any_status (--any-status) to rebuild it anyway")
    need_compiler("export")
    built = _build(workload, rec.config)
    res = built.result
    if res.cubin is None:
        raise InputError(f"{store}: record {row_id} does not build here: {res.status} at stage "
                         f"{res.stage}: {res.error[-300:]}")
    meta = _meta(store, row_id, session, rec, built, from_workload(workload), reference,
                 subspace, sessions)
    _write(out, built, meta)
    return Kernel(out)


def _pick(rows, record: int | str, store: str):
    """The (id, session, record) that ``record`` names, or an InputError that says why not."""
    if not rows:
        raise InputError(f"{store} holds no records")
    if record == "best":
        ok = [r for r in rows if r[2].ok and r[2].tflops]
        if not ok:
            counts = collections.Counter(str(r[2].status) for r in rows)
            raise InputError(f"{store} has no ok record to export ({len(rows)} rows: "
                             + ", ".join(f"{k} {v}" for k, v in counts.most_common()) + ")")
        return max(ok, key=lambda r: (r[2].tflops, -r[0]))
    if isinstance(record, int) and not isinstance(record, bool):
        found = [r for r in rows if r[0] == record]
        if not found:
            raise InputError(f"{store} has no record id {record} (ids {rows[0][0]}..{rows[-1][0]})")
        return found[0]
    if isinstance(record, str):
        found = [r for r in rows if r[2].key == record]
        if not found:
            raise InputError(f"{store} has no record of configuration {record[:200]}")
        return found[0]
    raise InputError(f"record: expected 'best', a row id or a configuration key, got {record!r}")


@contextlib.contextmanager
def _cuda_compile(answer: Callable[[str, Any], bytes]):
    """Within the block, TVM's ``tvm_callback_cuda_compile`` (source -> CUDA binary, called
    when TVM creates a CUDA module) is ``answer(source, previous callback or None)``."""
    import tvm  # noqa: F401 - registers TVM's own callback first
    import tvm_ffi

    name = "tvm_callback_cuda_compile"
    previous = tvm_ffi.get_global_func(name, allow_missing=True)
    tvm_ffi.register_global_func(name, lambda code, *_: answer(code, previous), override=True)
    try:
        yield
    finally:
        if previous is not None:
            tvm_ffi.register_global_func(name, previous, override=True)
        else:
            tvm_ffi.remove_global_func(name)


def _nvcc(code: str, _previous=None) -> bytes:
    from bocast.measure.nvcc import compile_cubin

    res = compile_cubin(code)
    if not res.ok:
        raise RuntimeError(f"nvcc failed: {res.log[-500:]}")
    return res.cubin


def _build(workload: dict, config: dict):
    """The builder's build of ``config``, in this process. A TVM with CUDA compiles the
    module's kernel while lowering: with nvcc here, so that kernel.so holds the runner's binary
    too (a TVM without CUDA keeps the source; see the module docstring)."""
    from bocast.measure.builder import build_one

    with _cuda_compile(_nvcc):
        return build_one({"workload": workload, "config": config})


def _meta(store, row_id, session, rec, built, op, reference, subspace,
          sessions) -> dict[str, Any]:
    from bocast.measure.nvcc import NVCC_FLAGS, nvcc_version
    from bocast.records import provenance
    from bocast.tensorcore import SM90_TARGET

    res, low = built.result, built.lowered
    stored = {**dataclasses.asdict(rec), "status": str(rec.status)}
    # the static figures of the row (ptxas at measure time) against this build's
    common = sorted(set(rec.features) & set(res.features))
    session_prov = sessions.get(session, {})
    (entry,) = built.schedule.mod.get_global_vars()  # the host function kernel.so exports
    return {
        "format": FORMAT, "version": 1, "workload": op.workload, "config": rec.config,
        "key": rec.key,
        "record": {"store": os.path.abspath(store), "id": row_id, "session": session, **stored},
        # the reference (cuBLAS) of a store is timed by its runner's method, in its first session
        "timing": {"runner": session_prov.get("runner"),
                   "method": (reference or {}).get("method"),
                   "device": session_prov.get("device")},
        "store": {"reference": reference, "subspace": subspace, "session": session_prov},
        "tensors": [{"name": t.name, "shape": list(t.shape), "dtype": t.dtype, "role": t.role}
                    for t in op.tensors()],
        "kernel": {"entry": entry.name_hint, "name": low.kernel, "grid": list(low.grid),
                   "block": list(low.block), "dynamic_smem_bytes": low.dynamic_smem,
                   "kernel_args": list(low.args), "features": res.features,
                   "features_match_store": (all(rec.features[k] == res.features[k]
                                                for k in common) if common else None)},
        "build": {"nvcc": nvcc_version(), "nvcc_flags": list(NVCC_FLAGS),
                  "target": SM90_TARGET, "options": op.build_options(
                      op.space.from_json(rec.config)), "times": res.times},
        "provenance": provenance(),
    }


def _sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _write(out: str, built, meta: dict[str, Any]) -> None:
    """Every file into a temporary folder beside ``out``, renamed to ``out`` when all are
    written: an interrupt or a failure leaves no half-written export."""
    import tvm

    from bocast import interrupt

    parent = os.path.dirname(os.path.abspath(out))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(dir=parent, prefix=f".{os.path.basename(out)}.")
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)  # mkdtemp's folder is private; the export is not
    try:
        header = (f"# bocast export: the scheduled TensorIR of {json.dumps(meta['workload'])}\n"
                  f"# configuration {meta['key']}\n")
        with open(os.path.join(tmp, "schedule.py"), "w") as f:
            f.write(header + built.schedule.mod.script())
        with open(os.path.join(tmp, "schedule.json"), "w") as f:
            f.write(tvm.ir.save_json(built.schedule.mod))
        with open(os.path.join(tmp, "kernel.cu"), "w") as f:
            f.write(built.lowered.source)
        with open(os.path.join(tmp, "kernel.cubin"), "wb") as f:
            f.write(built.result.cubin)
        built.lowered.module.export_library(os.path.join(tmp, "kernel.so"))
        meta["files"] = {name: _sha256(os.path.join(tmp, name)) for name in FILES}
        with open(os.path.join(tmp, META), "w") as f:
            json.dump(meta, f, indent=1, sort_keys=True, default=str)
        with interrupt.held():
            os.replace(tmp, out)  # over an empty folder too
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


class Kernel:
    """An exported kernel (:func:`load_kernel`, :func:`export`).

    ``kernel(*tensors)`` runs it on torch CUDA tensors: they go to TVM's compiled function as
    they are, through DLPack (tvm_ffi takes a torch tensor without a copy, and launches on
    torch's current stream, so the kernel orders with torch's work and CUDA-graph capture).
    The arguments are the operator's tensors in order, inputs then the output, as
    ``kernel.signature`` lists them: each contiguous (row-major), on one GPU, of exactly that
    shape and dtype; the output is written in place and returned. For a GEMM (layout NT):
    ``A [M, K]`` and ``B [N, K]`` (fp16), ``C [M, N] = A @ B.T`` (the workload's output
    dtype); layout NN has ``B [K, N]`` and ``C = A @ B``. In general the kernel computes what
    the operator's ``reference(*inputs)`` computes (``spaces/``), the check the runner applies
    to every kernel it times (``bocast.measure.gpu_worker.output_error``). A wrong argument
    raises :class:`InputError` naming it, before anything runs.

    ``workload``, ``config``, ``source`` (the CUDA), ``measured`` (the store's figures of the
    record: status, latency statistics in ms, TFLOPS, timing method and device), ``meta`` (all
    of kernel.json)."""

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        meta_path = os.path.join(self.path, META)
        try:
            with open(meta_path) as f:
                self.meta = json.load(f)
        except FileNotFoundError:
            raise InputError(f"{self.path} is not an exported kernel (no {META})") from None
        except (OSError, ValueError) as e:
            raise InputError(f"{meta_path} cannot be read ({e})") from None
        if not isinstance(self.meta, dict) or self.meta.get("format") != FORMAT:
            raise InputError(f"{meta_path} is not a bocast kernel description")
        for name, digest in self.meta.get("files", {}).items():
            file = os.path.join(self.path, name)
            if not os.path.isfile(file):
                raise InputError(f"{self.path}: {name} is missing")
            if _sha256(file) != digest:
                raise InputError(f"{self.path}: {name} differs from the file exported "
                                 f"(sha256 in {META})")
        self._function = None
        self.binary: str | None = None  # set by load()

    @property
    def workload(self) -> dict[str, Any]:
        return self.meta["workload"]

    @property
    def config(self) -> dict[str, Any]:
        return self.meta["config"]

    @property
    def measured(self) -> dict[str, Any]:
        return {**self.meta["record"], "timing": self.meta["timing"]}

    @property
    def source(self) -> str:
        with open(os.path.join(self.path, "kernel.cu")) as f:
            return f.read()

    @property
    def signature(self) -> str:
        return ", ".join(f"{t['name']} {t['dtype']}{t['shape']} ({t['role']})"
                         for t in self.meta["tensors"])

    def __repr__(self) -> str:
        return f"Kernel({self.path!r}: {self.workload['op']} {self.signature})"

    def check(self, *tensors) -> None:
        """Raise InputError naming the first argument that does not fit the signature."""
        specs = self.meta["tensors"]
        if len(tensors) != len(specs):
            raise InputError(f"the kernel takes {len(specs)} tensors ({self.signature}), "
                             f"got {len(tensors)}")
        for i, (t, spec) in enumerate(zip(tensors, specs)):
            what = f"argument {i + 1} ({spec['name']})"
            if not hasattr(t, "is_cuda") or not hasattr(t, "is_contiguous"):
                raise InputError(f"{what}: expected a torch tensor, got {type(t).__name__}")
            if str(t.dtype) != f"torch.{spec['dtype']}" or list(t.shape) != spec["shape"]:
                raise InputError(f"{what}: expected {spec['dtype']}{spec['shape']}, got "
                                 f"{str(t.dtype).removeprefix('torch.')}{list(t.shape)}")
            if not t.is_contiguous():
                raise InputError(f"{what}: not contiguous (the kernel indexes row-major)")
        for i, (t, spec) in enumerate(zip(tensors, specs)):  # where, once each is what
            if not t.is_cuda or t.device != tensors[0].device:
                raise InputError(f"argument {i + 1} ({spec['name']}): on {t.device}; every "
                                 "argument must be on the same CUDA GPU")

    def load(self) -> Kernel:
        """Load kernel.so (once); its CUDA kernel is kernel.cubin (the module docstring)."""
        if self._function is None:
            import tvm

            with open(os.path.join(self.path, "kernel.cubin"), "rb") as f:
                cubin = f.read()
            source = self.source
            library = os.path.join(self.path, "kernel.so")

            supplied = []

            def answer(code, previous):
                if code == source:
                    supplied.append(True)
                    return cubin
                if previous is None:
                    raise RuntimeError("no CUDA compiler callback registered")
                return previous(code)

            try:
                with _cuda_compile(answer):
                    module = tvm.runtime.load_module(library)
            except Exception as e:  # noqa: BLE001 - TVM's errors: say which file and why
                first = " ".join(str(e).split())[:400]
                raise InputError(f"cannot load {library}: {first}") from None
            self._function = module[self.meta["kernel"]["entry"]]
            # which binary runs: ours, or one kernel.so holds (exported by a TVM with CUDA)
            self.binary = "kernel.cubin" if supplied else "kernel.so"
        return self

    def __call__(self, *tensors):
        self.check(*tensors)
        self.load()._function(*tensors)
        return tensors[[t["role"] for t in self.meta["tensors"]].index("output")]


def load_kernel(path: str | os.PathLike) -> Kernel:
    """The kernel exported to the folder ``path`` (:func:`export`), loaded: needs TVM with its
    CUDA runtime (a GPU machine); :class:`Kernel` says how to call it."""
    return Kernel(path).load()
