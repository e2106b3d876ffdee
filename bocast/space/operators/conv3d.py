"""3-D convolution on Tensor Cores as an implicit GEMM (``_conv.py``): input
X[N,D,H,W,C], weights W[K,T,R,S,C], output Y[N,OD,OH,OW,K]; fp16 inputs, fp32 or fp16
accumulation and output.

Knobs and constraints: the GEMM's (``gemm.py``) over M = N*OD*OH*OW, N = K, K = T*R*S*C,
with ``vec_divides_c`` in place of ``vec_divides_k``; space v3 (``--space v3``): the conv
template's im2col producer over a rank-5 map (``_hopper_conv.py``), ``space auto``'s choice
(:data:`AUTO_V3`). Default: N=4, 16x28x28, 64 -> 64 channels,
3x3x3, pad 1. Heron's figure-6 cases, in the same order: C3D1 [8,8,56,56,64,64,3,3,3,1,1,1],
C3D3 [8,4,28,28,128,128,3,3,3,1,1,1], C3D5 [8,2,14,14,256,256,3,3,3,1,1,1] and 1x1x1 stride-2
downsamples C3D2/C3D4/C3D6.
"""

from typing import ClassVar

from bocast.space.operators.operator import register

from ._conv import Conv

#: ``space auto`` takes v3 for conv3d: measured on an H200 (2026-11-28,
#: experiments/results/breadth_h200x4/, cold BO, 64 trials, seed 0, each space in its own run):
#: R3D-18 layer2 (8x8x28x28, 128 -> 128, 3x3x3) v3 1.304 of cuDNN against v2 0.268 (v2's run
#: 48 trials in its time; re-timed figures)
AUTO_V3 = True


@register
class Conv3d(Conv):
    name = "conv3d"
    spatial, kernel, torch_fn = ("D", "H", "W"), ("T", "R", "S"), "conv3d"
    #: space v3: the conv template's im2col producer (bocast/space/operators/_hopper_conv.py)
    hopper_v3 = True
    v3_rule: ClassVar[str | None] = ("v3 takes the convolution (C % 32 == 0, TMA's im2col mode "
                                     "can load it) while conv3d.AUTO_V3: measured, it beat v2")
    shape_help = ("N,D,H,W,C,K,T,R,S[,stride,pad,dilation] (X[N,D,H,W,C], W[K,T,R,S,C], "
                  "Y[N,OD,OH,OW,K]; stride 1, pad 0, dilation 1 when left out)")
    default_shape = (4, 16, 28, 28, 64, 64, 3, 3, 3, 1, 1, 1)

    @classmethod
    def prefers_v3(cls, shape: tuple[int, ...]) -> bool:
        return AUTO_V3
