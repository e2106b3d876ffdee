"""Export a record's kernel (:func:`export`, ``bocast export``) and load it (:func:`load_kernel`).

A store keeps a record's configuration, not its kernel. :func:`export` rebuilds it with the
builder's own path (``bocast.measure.builder.build_one``) and writes a folder: schedule.py
(TVMScript, to read: TVM 0.27 cannot parse back its printed mma intrinsics), schedule.json
(``tvm.ir.save_json``, exact), kernel.cu, kernel.cubin (nvcc, sm_90: the binary the runner
times), kernel.so (TVM's ``export_library``) and kernel.json (provenance, sha256 of each file).

Why a cubin beside kernel.so: a TVM built without CUDA (the CPU machines) keeps the CUDA source
in its module and compiles it when the module is loaded, through its global
``tvm_callback_cuda_compile`` (NVRTC by default). :func:`load_kernel` answers that call with
kernel.cubin, so the kernel it runs is byte for byte the one the store's row timed.
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

from bocast import interrupt
from bocast.api import need_compiler
from bocast.errors import InputError
from bocast.locations import check_writable
from bocast.records.record import speed

FORMAT = "bocast-kernel"
FILES = ("schedule.py", "schedule.json", "kernel.cu", "kernel.cubin", "kernel.so")
META = "kernel.json"


def export(store: str | os.PathLike, *, out: str | os.PathLike, record: int | str = "best",
           any_status: bool = False) -> Kernel:
    """Rebuild one record of ``store`` into the new or empty folder ``out``; the exported
    :class:`Kernel` (loaded on its first call). ``record``: ``"best"`` (the kernel whose
    figure the run printed: its re-timed best, else the first ok row of highest TFLOPS), a row
    id or a configuration key; a status other than ok only with
    ``any_status``. Needs TVM, nvcc and a C compiler, no GPU; writes the whole folder or
    nothing."""
    from bocast.measure import build_cache
    from bocast.measure.builder import build_one
    from bocast.measure.nvcc import compile_cubin
    from bocast.records.store import Store
    from bocast.space.operators.operator import from_workload

    store, out = os.fspath(store), os.fspath(out)
    check_writable(out, "out", directory=True)
    if os.path.isdir(out) and os.listdir(out):
        raise InputError(f"out: {out} is not empty; export writes into a new or empty folder")
    with Store.open(store) as db:
        rows, workload = db.rows(), db.workload
        reference, subspace = db.get_meta("reference"), db.get_meta("subspace")
        sessions = {s["id"]: s for s in db.sessions()}
        figure = _figure_key(db.get_meta("retimed"))
    row_id, session, rec = _pick(rows, record, store, figure)
    if not rec.ok and not any_status:
        raise InputError(f"{store}: record {row_id} has status {rec.status}"
                         f"{f' ({rec.error[:200]})' if rec.error else ''}; export it with "
                         "any_status (--any-status) to rebuild it anyway")
    op = from_workload(workload)
    try:  # a MetaSchedule candidate's row holds a key into MetaSchedule's database, not knobs
        op.space.from_json(rec.config)
    except (InputError, TypeError, ValueError) as e:
        raise InputError(f"{store}: record {row_id} is not a configuration of the space of "
                         f"{op.workload} ({e}), so it cannot be rebuilt") from None
    need_compiler("export")
    arch = _arch(op, rec.config)
    # a TVM with CUDA compiles the kernel while lowering: with nvcc, as the builder does
    with _cuda_compile(lambda code, _: compile_cubin(code, arch=arch).cubin):
        built = build_one({"workload": workload, "config": rec.config},
                          cache=build_cache.from_setting())
    res = built.result
    if res.cubin is None:
        raise InputError(f"{store}: record {row_id} does not build here: {res.status} at stage "
                         f"{res.stage}: {res.error[-300:]}")
    meta = _meta(store, row_id, session, rec, built, op, reference, subspace, sessions)
    _write(out, built, meta)
    return Kernel(out)


def _arch(op, config) -> str:
    """What nvcc compiles the configuration's kernel for (sm_90a for space v3's wgmma)."""
    from bocast.measure.nvcc import DEFAULT_ARCH

    return op.build_options(op.space.from_json(config)).get("target", {}).get("arch",
                                                                              DEFAULT_ARCH)


def _figure_key(retimed: Any) -> str | None:
    """The key of the kernel whose figure the run printed: the best of its final re-timing
    (:func:`bocast.measure.retime.final_figure`, the store's ``retimed`` meta); None where
    the run ended without one."""
    try:
        key = retimed["best"]["key"]
    except (TypeError, KeyError):
        return None
    return key if isinstance(key, str) else None


def _pick(rows, record: int | str, store: str, figure: str | None = None):
    """The (id, session, record) that ``record`` names, or an InputError that says why not.
    ``"best"``: the kernel of the run's figure (``figure``, its re-timed best) where the run
    has one, else the ok row of highest in-run :func:`~bocast.records.record.speed` (the first
    of equals)."""
    if record == "best":
        chosen = [r for r in rows if figure is not None and r[2].key == figure and r[2].ok]
        if chosen:
            return chosen[0]
        ok = [r for r in rows if r[2].succeeded]
        if ok:
            speed_of = speed([r[2] for r in ok])
            return max(ok, key=lambda r: (speed_of(r[2]), -r[0]))
        counts = collections.Counter(str(r[2].status) for r in rows)
        raise InputError(f"{store} has no ok record to export ({len(rows)} rows"
                         + "".join(f", {k} {v}" for k, v in counts.most_common()) + ")")
    field = 0 if isinstance(record, int) and not isinstance(record, bool) else 2
    for r in rows:
        if (r[0] if field == 0 else r[2].key) == record:
            return r
    if field == 0:
        raise InputError(f"{store} has no record id {record}"
                         + (f" (ids {rows[0][0]}..{rows[-1][0]})" if rows else ""))
    raise InputError(f"{store} has no record of configuration {str(record)[:200]}")


@contextlib.contextmanager
def _cuda_compile(answer: Callable[[str, Any], bytes | None]):
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


def _meta(store, row_id, session, rec, built, op, reference, subspace,
          sessions) -> dict[str, Any]:
    from bocast.measure.nvcc import NVCC_FLAGS, nvcc_version
    from bocast.records.provenance import provenance
    from bocast.space.tensorcore import SM90_TARGET

    res, low = built.result, built.lowered
    options = op.build_options(op.space.from_json(rec.config))
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
                   "cluster": list(getattr(low, "cluster", (1, 1, 1))),
                   # outputs a launch must zero first (split K adds into them)
                   "zeroed": list(getattr(low, "zeroed", ())),
                   "kernel_args": list(low.args), "features": res.features,
                   "features_match_store": (all(rec.features[k] == res.features[k]
                                                for k in common) if common else None)},
        "build": {"nvcc": nvcc_version(),
                  "nvcc_flags": [*NVCC_FLAGS, f"-arch={low.arch}"],
                  # the target the kernel was lowered for (v3's options set arch sm_90a)
                  "target": {**SM90_TARGET, **options.get("target", {})}, "options": options,
                  "times": res.times},
        "provenance": provenance(),
    }


def _sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _write(out: str, built, meta: dict[str, Any]) -> None:
    """Every file into a temporary folder beside ``out``, renamed to ``out`` when all are
    written: an interrupt or a failure leaves no half-written export."""
    import tvm

    parent = os.path.dirname(os.path.abspath(out))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(dir=parent, prefix=f".{os.path.basename(out)}.")
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)  # mkdtemp's folder is private; the export is not
    try:
        mod = built.schedule.mod
        for name, text in (("schedule.py", f"# bocast export of {meta['key']}\n{mod.script()}"),
                           ("schedule.json", tvm.ir.save_json(mod)),
                           ("kernel.cu", built.lowered.source)):
            with open(os.path.join(tmp, name), "w") as f:
                f.write(text)
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

    ``kernel(*tensors)`` runs it on torch CUDA tensors, passed to TVM's function through DLPack
    (no copy; tvm_ffi launches on torch's current stream, so CUDA-graph capture works). The
    arguments are the operator's tensors in order, inputs then output (``kernel.signature``),
    each contiguous, on one GPU, of exactly that shape and dtype; the output is written in
    place and returned. GEMM, layout NT: ``A [M, K]``, ``B [N, K]`` (fp16), ``C [M, N] = A @
    B.T``; NN: ``B [K, N]``, ``C = A @ B``. In general it computes the operator's
    ``reference(*inputs)`` (``bocast/space/operators/``), the runner's check of every kernel
    (``gpu_worker.output_error``). A wrong argument raises :class:`InputError` naming it.

    ``workload``, ``config``, ``source`` (CUDA), ``measured`` (the store's figures of the
    record, its timing method and device), ``meta`` (kernel.json)."""

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
        self._function: Any = None  # the loaded module's entry (load())
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

            from bocast.measure.tensor_maps import register_im2col_encoder

            # a conv2d kernel of space v3's im2col producer encodes its map through a packed
            # function of ours (TVM has no im2col encoder), looked up when it is called
            register_im2col_encoder()
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
        names = [t["name"] for t in self.meta["tensors"]]
        for name in self.meta["kernel"].get("zeroed", []):  # split K adds into its output
            tensors[names.index(name)].zero_()
        self.load()._function(*tensors)
        return tensors[[t["role"] for t in self.meta["tensors"]].index("output")]


def load_kernel(path: str | os.PathLike) -> Kernel:
    """The kernel exported to the folder ``path`` (:func:`export`), loaded: needs TVM with its
    CUDA runtime (a GPU machine); :class:`Kernel` says how to call it."""
    return Kernel(path).load()
