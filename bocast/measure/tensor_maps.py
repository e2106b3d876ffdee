"""TMA descriptors (CUtensorMap) encoded through the CUDA driver, ctypes on libcuda, no TVM:
space v3's tiled maps (GEMM, bmm, conv2d's tiled producer) and the im2col map of conv2d's im2col
producer (``bocast.space.operators._hopper_im2col``).

The runner (``gpu_worker.kernel_args``) encodes every map of a kernel from its tensor's pointer.
An exported kernel's host code (kernel.so) encodes its maps itself: tiled ones through TVM's
``runtime.cuTensorMapEncodeTiled``, the im2col one through the packed function
:func:`register_im2col_encoder` registers (TVM 0.27 has no im2col encoder), which decodes the
host code's flat arguments and calls the same :func:`encode_at`.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Mapping
from typing import Any

from bocast.space.operators import _hopper_im2col as im2col

#: CUtensorMapDataType of the tensors a TMA descriptor may describe (fp8 as UINT8, 0: TMA
#: moves bytes, and TVM's own encoder maps fp8 so too)
TMA_DTYPES = {"float8_e4m3fn": 0, "float8_e5m2": 0, "float16": 6, "float32": 7, "bfloat16": 9}
#: CU_TENSOR_MAP_L2_PROMOTION_L2_256B: the runner's maps, tiled and im2col alike
L2_PROMOTION = 3


class TensorMap:
    """A CUtensorMap: 128 opaque bytes at a 64-byte aligned address (the driver requires it),
    passed to a kernel by value (the launch copies the bytes its parameter points to)."""

    def __init__(self):
        self._raw = ctypes.create_string_buffer(128 + 64)
        self.address = (ctypes.addressof(self._raw) + 63) & ~63


def encode_at(cu, address: int, spec: Mapping[str, Any], pointer: int,
              dtype: str) -> tuple[str, int]:
    """Encode the map ``spec`` describes (space v3's ``tensor_map`` or ``_hopper_im2col
    .tensor_map``: dims and byte strides innermost first, element strides (1 where absent),
    swizzle; a tiled map's box, or ``mode`` im2col's corners, channels and pixels) of the
    tensor at ``pointer`` into the 128 bytes at ``address``, through the driver ``cu``
    (libcuda); no interleave, zero fill out of bounds. Returns the driver call's name and its
    CUresult (0: success), for the caller to check."""
    rank = len(spec["dims"])
    u64, u32, i32 = ctypes.c_uint64, ctypes.c_uint32, ctypes.c_int
    head = (ctypes.c_void_p(address), i32(TMA_DTYPES[dtype]), u32(rank), ctypes.c_void_p(pointer),
            (u64 * rank)(*spec["dims"]), (u64 * (rank - 1))(*spec["strides"]))
    elem = (u32 * rank)(*spec.get("element_strides", [1] * rank))
    tail = (i32(0), i32(spec["swizzle"]), i32(L2_PROMOTION), i32(0))
    if spec.get("mode") == "im2col":
        call = "cuTensorMapEncodeIm2col"
        spatial = rank - 2
        code = cu.cuTensorMapEncodeIm2col(
            *head, (i32 * spatial)(*spec["lower"]), (i32 * spatial)(*spec["upper"]),
            u32(spec["channels"]), u32(spec["pixels"]), elem, *tail)
    else:
        call = "cuTensorMapEncodeTiled"
        code = cu.cuTensorMapEncodeTiled(*head, (u32 * rank)(*spec["box"]), elem, *tail)
    return call, code


def _address(value) -> int:
    """A packed call's pointer argument (a ctypes.c_void_p, or an int) as an int."""
    if isinstance(value, ctypes.c_void_p):
        return value.value or 0
    return int(value)


def im2col_encoder(driver: Callable[[], Any]) -> Callable:
    """The packed function an exported kernel's host code calls for its im2col map, as (map,
    dtype, rank, pointer, *``_hopper_im2col.encode_args``): decoded and encoded by
    :func:`encode_at` through ``driver()``."""
    def encode_im2col(tmap, dtype, rank, pointer, *args):
        spec = im2col.parse_args(int(rank), args)
        call, code = encode_at(driver(), _address(tmap), spec, _address(pointer), str(dtype))
        if code != 0:
            raise RuntimeError(f"{call} failed with CUresult {code} for {spec}")

    return encode_im2col


def register_im2col_encoder() -> None:
    """Register :data:`_hopper_im2col.ENCODER` with TVM's FFI (:func:`im2col_encoder` on
    libcuda), for exported kernels with an im2col map (``bocast.kernel.Kernel.load``)."""
    import tvm_ffi

    tvm_ffi.register_global_func(im2col.ENCODER, im2col_encoder(_libcuda), override=True)


def _libcuda():
    return ctypes.CDLL("libcuda.so.1")
