"""2-D convolution on Tensor Cores as an implicit GEMM (``_conv.py``): input X[N,H,W,C], weights
W[K,R,S,C], output Y[N,OH,OW,K]; fp16 inputs, fp32 or fp16 accumulation and output (space v3:
also bf16 inputs; fp32 accumulation, an fp32 or 16-bit output).

Knobs and constraints: the GEMM's (``gemm.py``) over M = N*OH*OW, N = K, K = R*S*C, with
``vec_divides_c`` in place of ``vec_divides_k``. Space v3 (``--space v3``, any stride up to 8,
padding and dilation, C % 32 == 0, fp16 or bf16 in, fp32 or 16-bit out) is the Hopper TMA +
wgmma template as an implicit GEMM whose A operand TMA gathers from X, by pixel tiles of a 4-D
tiled map or by TMA's im2col mode (knob ``a_load``, ``_hopper_conv.py``). ``space auto`` takes
v3 at every stride (measured: :data:`AUTO_V3_STRIDED`); conv2d_dilated too
(:data:`AUTO_V3_DILATED`). Default: ResNet-50 stage 3, 3x3, 256 -> 256 channels on 14x14, batch
16 (Heron's figure-6 case C5, [16,14,14,256,256,3,3,1,1,1] in the same order; its other cases: C1
[16,56,56,64,64,3,3,1,1,1], C3 [16,28,28,128,128,3,3,1,1,1] and the 1x1 stride-2 downsamples
C2/C4/C6).
"""

from typing import ClassVar

from bocast.space.operators.operator import register

from ._conv import Conv

#: ``space auto`` takes v3 for a strided conv2d (stride >= 2): measured on an H200
#: (2026-11-28, experiments/results/conv_v3_h200/, cold BO, 32 trials, seed 0, each space against
#: cuDNN in its own run): ResNet-50 layer2.0.conv2 (3x3 stride 2) v3 1.070 against v2 0.312 (v2's
#: run cut at 17 of 32 trials),
#: layer2.0.downsample (1x1 stride 2) v3 0.954 against v2 0.378 (re-timed figures)
AUTO_V3_STRIDED = True
#: ``space auto`` takes v3 for conv2d_dilated: measured on an H200 (2026-11-28,
#: experiments/results/breadth_h200x4/, cold BO, 64 trials, seed 0, each space in its own run):
#: DeepLabv3-ResNet-50 layer4 (8x33x33, 512 -> 512, 3x3 dilation 2) v3 1.207 of cuDNN against
#: v2 0.737 (re-timed figures)
AUTO_V3_DILATED = True


@register
class Conv2d(Conv):
    name = "conv2d"
    spatial, kernel, torch_fn = ("H", "W"), ("R", "S"), "conv2d"
    hopper_v3 = True  # space v3: bocast/space/operators/_hopper_conv.py
    shape_help = ("N,H,W,C,K,R,S[,stride,pad,dilation] (X[N,H,W,C], W[K,R,S,C], Y[N,OH,OW,K]; "
                  "stride 1, pad 0, dilation 1 when left out)")
    default_shape = (16, 14, 14, 256, 256, 3, 3, 1, 1, 1)
    #: cold, v3 reached 0.94-1.21 of cuDNN on two stride-1 ResNet stages where v2 reached
    #: 0.26-0.45 (H200, experiments/results/v3_vs_v2_h200.md), and 0.95-1.07 at stride 2 where v2
    #: reached 0.31-0.38 (AUTO_V3_STRIDED); one with C % 32 != 0 stays v2's (v3 refuses it)
    v3_rule: ClassVar[str | None] = ("v3 takes the convolution (C % 32 == 0); measured, it beat "
                                     "v2 at stride 1" + (" and 2" if AUTO_V3_STRIDED else ""))

    @classmethod
    def prefers_v3(cls, shape: tuple[int, ...]) -> bool:
        stride = shape[7] if len(shape) > 7 else 1
        return stride == 1 or AUTO_V3_STRIDED
