"""TVM pieces shared by the Tensor Core spaces: the target, WMMA intrinsics, launch extents.

``tvm.s_tir.tensor_intrin.cuda`` registers a few hundred intrinsics when imported, which takes
about 28 s on a 2-core CPU (the parse of every TVMScript description). We need a handful, so we
load only that file's generator functions (``get_wmma_*_intrin``) and register, on first use,
exactly the WMMA shapes and dtypes a configuration asks for. Every builder worker thus starts in
about 3 s (the import of tvm itself) instead of 30.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import os
import re
import types
from dataclasses import dataclass, field
from typing import Any

#: The three WMMA shapes of fp16 Tensor Cores, as (m, n, k).
WMMA_SHAPES = {"16x16x16": (16, 16, 16), "32x8x16": (32, 8, 16), "8x32x16": (8, 32, 16)}

SM90_TARGET = {
    "kind": "cuda",
    "arch": "sm_90",
    "max_threads_per_block": 1024,
    "max_shared_memory_per_block": 49152,
    "thread_warp_size": 32,
}

#: Pass options every space builds with (TVM's defaults; a space adds its own per configuration,
#: ``Operator.build_options``). Note: TVM's storage rewrite may merge a float32 shared buffer into
#: a float16 one and then fail a dtype check where a typed pointer (a WMMA store) addresses it:
#: space v1 keeps buffers of different types in different scopes (static "shared" vs
#: "shared.dyn"), space v2 keeps its WMMA staging tile static; its mma staging tile, written by
#: element-wise stores, shares the dynamic allocation with the fp16 tiles.
PASS_CONFIG: dict = {}


def target(overrides: dict | None = None):
    """The sm_90 target; ``overrides`` replaces some of its attributes (a space that uses more
    than 48 KB of dynamic shared memory raises ``max_shared_memory_per_block``)."""
    import tvm

    return tvm.target.Target({**SM90_TARGET, **(overrides or {})})


@functools.lru_cache(maxsize=1)
def _helpers() -> types.ModuleType:
    spec = importlib.util.find_spec("tvm.s_tir")
    if spec is None or spec.origin is None:
        raise RuntimeError("tvm.s_tir not found: bocast needs TVM 0.27 (apache-tvm)")
    origin = os.path.join(os.path.dirname(spec.origin), "tensor_intrin", "cuda.py")
    with open(origin) as f:
        tree = ast.parse(f.read())

    def registers(node):
        return any(isinstance(x, ast.Call) and "register" in ast.unparse(x.func)
                   for x in ast.walk(node))

    # Decorated top-level functions are registrations (``@register_global_func``): running the
    # decorators here would make a later ``import tvm.s_tir.tensor_intrin.cuda`` (MetaSchedule
    # needs it) fail with "already registered"; we keep the functions without them.
    keep: list[ast.stmt] = []
    for n in tree.body:
        if isinstance(n, ast.FunctionDef):
            n.decorator_list = []
            keep.append(n)
        elif isinstance(n, (ast.Import, ast.ImportFrom)) or (
                isinstance(n, (ast.Assign, ast.AnnAssign)) and not registers(n)):
            keep.append(n)
    mod = types.ModuleType("bocast._tvm_cuda_intrin_helpers")
    exec(compile(ast.Module(body=keep, type_ignores=[]), origin, "exec"), mod.__dict__)
    return mod


def wmma_intrin(kind: str, shape: tuple[int, int, int], dtype: str, *, scope: str = "shared",
                b_transposed: bool = False) -> str:
    """Name of a registered WMMA intrinsic, registering it on first use.

    kind: ``load_a`` | ``load_b`` | ``fill`` | ``store`` | ``sync``. ``dtype`` is the fragment's
    element type (fp16 for loads; the accumulator type for fill/store/sync).
    """
    from tvm.s_tir import TensorIntrin

    m, n, k = shape
    name = f"bocast_wmma_{kind}_{m}x{n}x{k}_{dtype}_{scope.replace('.', '_')}" \
           f"{'_bt' if b_transposed else ''}"
    if TensorIntrin.get(name, allow_missing=True) is not None:
        return name
    h = _helpers()
    if kind == "load_a":
        pair = h.get_wmma_load_intrin(m, n, k, dtype, scope, False, False)
    elif kind == "load_b":
        pair = h.get_wmma_load_intrin(m, n, k, dtype, scope, True, b_transposed)
    elif kind == "fill":
        pair = h.get_wmma_fill_intrin(m, n, k, dtype)
    elif kind == "store":
        pair = h.get_wmma_store_intrin(m, n, k, dtype, scope)
    elif kind == "sync":
        pair = h.get_wmma_sync_intrin(m, n, k, "float16", dtype, b_transposed)
    else:
        raise ValueError(f"unknown WMMA intrinsic kind {kind!r}")
    TensorIntrin.register(name, *pair)
    return name


#: Global functions TVM's CUDA codegen looks up (mma_store's address map) that only the full
#: ``tvm.s_tir.tensor_intrin.cuda`` registers: we register them where that module is not loaded,
#: and give them back before it is (:func:`import_all_intrinsics`).
_CODEGEN_FUNCS = {"tirx.index_map.shared_16x16_to_ldmatrix_32x8_layout":
                  "index_map_shared_16x16_to_ldmatrix_32x8_layout"}
_REGISTERED: set[str] = set()


def _register_codegen_funcs() -> None:
    import tvm_ffi

    for name, fn in _CODEGEN_FUNCS.items():
        if tvm_ffi.get_global_func(name, allow_missing=True) is None:
            tvm_ffi.register_global_func(name, getattr(_helpers(), fn))
            _REGISTERED.add(name)


def import_all_intrinsics() -> None:
    """Import TVM's whole CUDA intrinsic module (every intrinsic it registers), after removing
    the codegen functions we registered in its stead (it registers them itself)."""
    import tvm_ffi

    for name in list(_REGISTERED):
        tvm_ffi.remove_global_func(name)
        _REGISTERED.discard(name)
    import tvm.s_tir.tensor_intrin.cuda  # noqa: F401


def mma_intrin(kind: str, dtype: str, *, scope: str = "shared",
               b_transposed: bool = False) -> str:
    """Name of a registered ldmatrix / mma.sync intrinsic on 16x16x16 tiles (fp16 operands),
    registering it on first use.

    kind: ``load_a`` | ``load_b`` (ldmatrix from ``scope``) | ``fill`` | ``store`` (to
    ``scope``) | ``sync`` (two mma.sync m16n8k16). ``dtype`` is the operand type for loads and
    the accumulator type otherwise. ``b_transposed``: B is stored [N, K]."""
    from tvm.s_tir import TensorIntrin

    name = f"bocast_mma_{kind}_{dtype}_{scope.replace('.', '_')}{'_bt' if b_transposed else ''}"
    if TensorIntrin.get(name, allow_missing=True) is not None:
        return name
    h = _helpers()
    if kind == "load_a":
        pair = h.get_ldmatrix_intrin(16, dtype, "A", False, scope)
    elif kind == "load_b":
        pair = h.get_ldmatrix_intrin(16, dtype, "B", b_transposed, scope)
    elif kind == "fill":
        pair = h.get_mma_fill_intrin(dtype, 8)
    elif kind == "store":
        # mma_store (paired stores) to global memory; element-wise stores to shared memory
        # (TVM's "simple" store, the one its permuted layouts are tested with)
        pair = h.get_mma_store_intrin(dtype, 8, scope, scope == "global")
        _register_codegen_funcs()
    elif kind == "sync":
        pair = h.get_mma_intrin(16, "float16", "float16", dtype, False, b_transposed)
    else:
        raise ValueError(f"unknown mma intrinsic kind {kind!r}")
    TensorIntrin.register(name, *pair)
    return name


def ldmatrix_layout(i, j):
    """Index map of a warp's fragments: 16x16 tiles, each in the 32-thread x 8-element layout of
    ldmatrix / mma.sync."""
    h = _helpers()
    return (i // 16, j // 16, *h.shared_16x16_to_ldmatrix_32x8_layout(i % 16, j % 16))


@dataclass(frozen=True)
class Lowered:
    """A scheduled PrimFunc lowered to one CUDA kernel, with what it takes to launch it."""

    source: str
    kernel: str
    args: tuple[str, ...]          # tensor names, in the kernel's parameter order
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    dynamic_smem: int              # bytes of dynamic shared memory passed at launch
    module: Any = field(default=None, repr=False, compare=False)  # TVM runtime module (host + CUDA)
    arch: str = "sm_90"            # what nvcc compiles the source for
    #: kernel parameters that are TMA descriptors: name -> encoding (space v3's ``tensor_map``)
    tensor_maps: dict = field(default_factory=dict)
    #: thread-block cluster dims of the launch (a cluster launch, cuLaunchKernelEx, when not
    #: (1, 1, 1)): space v3's cluster knob
    cluster: tuple[int, int, int] = (1, 1, 1)
    #: output tensors each launch zeroes first (space v3's split K adds partial sums into them)
    zeroed: tuple[str, ...] = ()


def source_only():
    """TVM's CUDA codegen hands its source to ``tvm_callback_cuda_compile`` (NVRTC, 1-2 s); we
    compile it ourselves with nvcc, so the callback hands the source back instead."""
    import tvm  # noqa: F401 - registers TVM's callback first, so ours can override it

    try:
        import tvm_ffi

        @tvm_ffi.register_global_func("tvm_callback_cuda_compile", override=True)
        def _source_only(code, *args):  # noqa: ARG001
            return code.encode() if isinstance(code, str) else bytes(code)
    except Exception:  # noqa: BLE001 - older/other TVM builds: nothing to override
        pass


_SIGNATURE = re.compile(r'extern "C" __global__ void (?:__launch_bounds__\(\d+\) )?'
                        r'(\w+)\(([^)]*)\) \{')


def _compile(mod, tgt, pipeline) -> tuple[str, Any]:
    """``mod`` through ``pipeline`` (TVM's (run, finalize host, finalize device) triple) for
    ``tgt``, as ``tvm.compile`` does: the host code's TVMScript, taken before finalisation
    lowers the kernel launch to a packed call, and the runtime module."""
    import tvm
    from tvm.tirx.build import split_host_device_mods, tir_to_runtime

    host_target = tvm.target.Target("llvm" if tvm.runtime.enabled("llvm") else "c")
    mod = tvm.tirx.transform.BindTarget(tgt.with_host(host_target))(mod)
    run, finalize_host, finalize_device = pipeline
    host_mod, device_mods = split_host_device_mods(run(mod))
    host_script = host_mod.script()
    host_mod = finalize_host()(host_mod)
    device_mods = {t: finalize_device()(m) for t, m in device_mods.items()}
    return host_script, tir_to_runtime(host_mod, device_mods, host_target)


def lower_tirx(kernel, *, target_overrides: dict | None = None) -> Lowered:
    """Compile a TIRx kernel (space v3's ``TirxKernel``) with TVM's ``tirx`` pipeline (the steps
    of ``tvm.compile(..., tir_pipeline="tirx")``). Its launch (grid, block, cluster, dynamic
    shared memory, tensor maps) is the template's own, checked against the launch TVM's host
    code makes (what an export's kernel.so runs: a cluster launch too), so the runner, which
    launches from the template's figures, launches as TVM does; the kernel's parameters are read
    from the CUDA source. TVM hands the source to ``tvm_callback_cuda_compile``: the builder's
    answers with the source (:func:`source_only`), an export's with nvcc's cubin."""
    import tvm

    tgt = tvm.target.Target({"kind": "cuda", **(target_overrides or {})})
    host_script, rt = _compile(kernel.mod, tgt, tvm.tirx.get_tir_pipeline("tirx"))
    launch = tvm_launch(host_script)
    cluster = tuple(getattr(kernel, "cluster", (1, 1, 1)))
    ours = {"grid": tuple(kernel.grid), "block": tuple(kernel.block), "cluster": cluster,
            "dynamic_smem": int(kernel.dynamic_smem)}
    theirs = {k: launch[k] for k in ours}
    if ours != theirs:
        raise RuntimeError(f"the template's launch {ours} is not TVM's {theirs}")
    source = rt.imports[0].inspect_source()
    sig = _SIGNATURE.search(source)
    if sig is None:
        raise RuntimeError("no kernel signature in the TIRx kernel's CUDA source")
    params = [p.split()[-1] for p in sig.group(2).split(",")]
    args = tuple(re.sub(r"_ptr$", "", p) for p in params)
    return Lowered(source=source, kernel=sig.group(1), args=args, grid=kernel.grid,
                   block=kernel.block, dynamic_smem=kernel.dynamic_smem, module=rt,
                   arch=(target_overrides or {}).get("arch", "sm_90"),
                   tensor_maps=dict(kernel.tensor_maps), cluster=cluster,
                   zeroed=tuple(getattr(kernel, "zeroed", ())))


def _launch_call(host_script: str) -> tuple[str, list[str], list[str]]:
    """The one kernel launch of TVM's host code: the kernel's name, the call's arguments (its
    buffers and handles, then one value per launch parameter) and the launch parameters' tags
    (``blockIdx.x``, ``threadIdx.x``, ``clusterCtaIdx.x``, ``tirx.use_dyn_shared_memory``)."""
    calls = _CALL.findall(host_script)
    if len(calls) != 1:
        raise RuntimeError(f"expected one kernel launch, TVM generated {len(calls)}")
    kernel, arg_text, tag_text = calls[0]
    args = [a.strip() for a in arg_text.split(", ")]
    return kernel, args, [t.strip().strip('"') for t in tag_text.split(",") if t.strip()]


def _launch_dims(launch: dict[str, int]) -> dict[str, Any]:
    """Grid, block and cluster dims and dynamic shared memory from the launch parameters."""
    def dims(prefix: str) -> tuple[int, ...]:
        return tuple(launch.get(f"{prefix}.{a}", 1) for a in "xyz")

    return {"grid": dims("blockIdx"), "block": dims("threadIdx"),
            "cluster": dims("clusterCtaIdx"),
            "dynamic_smem": launch.get("tirx.use_dyn_shared_memory", 0)}


def _int(arg: str) -> int:
    return int(re.sub(r"T\.u?int\d+\((\d+)\)", r"\1", arg))


def tvm_launch(host_script: str) -> dict:
    """The launch of the one kernel TVM's host code (its TVMScript, before finalisation lowers
    the launch to a packed call) makes: grid, block, cluster dims (its ``clusterCtaIdx`` tags,
    which TVM's CUDA runtime passes as cuLaunchKernelEx's CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION)
    and dynamic shared memory."""
    _, args, tags = _launch_call(host_script)
    return _launch_dims(dict(zip(tags, (_int(a) for a in args[len(args) - len(tags):]))))


_CALL = re.compile(r'T\.call_ffi_kernel\("(\w+)", (.*?), launch_params=\[([^\]]*)\]')


def lower(mod, *, pass_config: dict | None = None, target_overrides: dict | None = None
          ) -> Lowered:
    """Run TVM's default TIR pipeline and CUDA codegen (what ``tvm.compile`` does), keeping the
    host-side launch call so that grid, block and dynamic shared memory are exactly TVM's.
    ``pass_config`` adds to :data:`PASS_CONFIG`; ``target_overrides`` to :data:`SM90_TARGET`."""
    import tvm

    tgt = target(target_overrides)
    with tvm.transform.PassContext(config={**PASS_CONFIG, **(pass_config or {})}):
        host_script, runtime_mod = _compile(mod, tgt, tvm.tirx.get_default_tir_pipeline(tgt))
    kernel, args, tags = _launch_call(host_script)
    buffers = [a for a in args if a.endswith(".data")]
    values = [_int(a) for a in args[len(buffers):]]
    if len(values) != len(tags):
        raise RuntimeError(f"cannot match launch values {values} to {tags}")
    launch = _launch_dims(dict(zip(tags, values)))
    return Lowered(
        source=runtime_mod.imports[0].inspect_source(),
        kernel=kernel,
        args=tuple(re.sub(r"(_\d+)?\.data$", "", b) for b in buffers),
        grid=launch["grid"],
        block=launch["block"],
        dynamic_smem=launch["dynamic_smem"],
        module=runtime_mod,
    )
