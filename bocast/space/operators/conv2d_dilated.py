"""Dilated 2-D convolution on Tensor Cores: ``conv2d`` (``conv2d.py``) with the dilation
required to be at least 2, the tap offsets ``r * dilation`` in the gather's index expressions.

Heron tunes it as its own operator (dil, 59 parameters: the direct NHWC convolution with its four
output axes and three reduction axes tiled separately); here it is the same implicit GEMM as
conv2d, with the GEMM's knobs, and in space v3 conv2d's template (the tap offsets in TMA's
coordinates); ``space auto`` takes v3 for it while ``conv2d.AUTO_V3_DILATED`` (measured).
Default: N=16, 14x14, 256 -> 256 channels, 3x3, dilation 2, pad 2
(the output stays 14x14). Heron's figure-6 cases, in the same order: D1 [16,56,56,64,64,3,3,1,1,2],
D3 [16,28,28,128,128,3,3,1,1,2], D5 [16,14,14,256,256,3,3,1,1,2] and 1x1 cases D2/D4/D6 (where
dilation has no effect).
"""

from typing import ClassVar

from bocast.space.operators.operator import register

from . import conv2d


@register
class Conv2dDilated(conv2d.Conv2d):
    name = "conv2d_dilated"
    min_dilation = 2
    hopper_v3 = True  # space v3: conv2d's template (bocast/space/operators/_hopper_conv.py)
    v3_rule: ClassVar[str | None] = ("v3 takes the convolution (C % 32 == 0) while "
                                     "conv2d.AUTO_V3_DILATED: measured, it beat v2 on a DeepLabv3 "
                                     "layer")
    shape_help = ("N,H,W,C,K,R,S,stride,pad,dilation (X[N,H,W,C], W[K,R,S,C], Y[N,OH,OW,K]; "
                  "dilation >= 2)")
    default_shape = (16, 14, 14, 256, 256, 3, 3, 1, 2, 2)

    @classmethod
    def prefers_v3(cls, shape: tuple[int, ...]) -> bool:
        return conv2d.AUTO_V3_DILATED
