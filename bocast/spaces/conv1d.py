"""1-D convolution on Tensor Cores as an implicit GEMM (``_conv.py``): input X[N,L,C],
weights W[K,R,C], output Y[N,OL,K]; fp16 inputs, fp32 or fp16 accumulation and output.

Knobs and constraints: the GEMM's (``gemm.py``) over M = N*OL, N = K, K = R*C, with
``vec_divides_c`` in place of ``vec_divides_k``; space v3 (``--space v3``): the conv template's
im2col producer over a rank-3 map (``_hopper_conv.py``), not yet ``space auto``'s choice.
Default: N=16, L=512, 256 -> 256 channels, kernel
3, pad 1. Heron's figure-6 cases, in the same order: C1D1..C1D4 [16,892,512,512,3,1,p,1] with pad
p = 4, 8, 16, 32, and the pointwise C1D5 [16,892,512,1024,1,1,0,1], C1D6 [16,892,1024,512,1,1,0,1].
"""

from bocast.operator import register

from ._conv import Conv


@register
class Conv1d(Conv):
    name = "conv1d"
    spatial, kernel, torch_fn = ("L",), ("R",), "conv1d"
    #: space v3: the conv template's im2col producer (bocast/spaces/_hopper_conv.py); no v3
    #: rule yet (not measured against v2), so space auto keeps v2
    hopper_v3 = True
    shape_help = ("N,L,C,K,R[,stride,pad,dilation] (X[N,L,C], W[K,R,C], Y[N,OL,K]; "
                  "stride 1, pad 0, dilation 1 when left out)")
    default_shape = (16, 512, 256, 256, 3, 1, 1, 1)
