"""1-D convolution on Tensor Cores as an implicit GEMM (``_conv.py``): input X[N,L,C],
weights W[K,R,C], output Y[N,OL,K]; fp16 inputs, fp32 or fp16 accumulation and output.

Knobs and constraints: the GEMM's (``gemm.py``) over M = N*OL, N = K, K = R*C, with
``vec_divides_c`` in place of ``vec_divides_k``; space v3 (``--space v3``): the conv template's
im2col producer over a rank-3 map (``_hopper_conv.py``), ``space auto``'s choice
(:data:`AUTO_V3`). The timed reference is cuDNN's 2-D convolution with H = 1, the fastest
vendor route measured (below).
Default: N=16, L=512, 256 -> 256 channels, kernel
3, pad 1. Heron's figure-6 cases, in the same order: C1D1..C1D4 [16,892,512,512,3,1,p,1] with pad
p = 4, 8, 16, 32, and the pointwise C1D5 [16,892,512,1024,1,1,0,1], C1D6 [16,892,1024,512,1,1,0,1].
"""

from typing import ClassVar

from bocast.space.operators.operator import register

from ._conv import Conv

#: ``space auto`` takes v3 for conv1d: measured on an H200 (2026-11-28,
#: experiments/results/breadth_h200x4/, cold BO, 64 trials, seed 0, each space in its own run):
#: Whisper-base encoder conv2 (4x3000, 512 -> 512, k3 stride 2) v3 570.4 TFLOPS against v2 170.1
#: (re-timed figures)
AUTO_V3 = True


@register
class Conv1d(Conv):
    name = "conv1d"
    spatial, kernel, torch_fn = ("L",), ("R",), "conv1d"
    #: space v3: the conv template's im2col producer (bocast/space/operators/_hopper_conv.py)
    hopper_v3 = True
    v3_rule: ClassVar[str | None] = ("v3 takes the convolution (C % 32 == 0, TMA's im2col mode "
                                     "can load it) while conv1d.AUTO_V3: measured, it beat v2")
    shape_help = ("N,L,C,K,R[,stride,pad,dilation] (X[N,L,C], W[K,R,C], Y[N,OL,K]; "
                  "stride 1, pad 0, dilation 1 when left out)")
    default_shape = (16, 512, 256, 256, 3, 1, 1, 1)

    @classmethod
    def prefers_v3(cls, shape: tuple[int, ...]) -> bool:
        return AUTO_V3

    # The reference is the fastest vendor route measured, not torch's conv1d: on an H200
    # (experiments/device/conv1d_routes.py, breadth_h200x4) cuDNN's conv1d ran at 86-92
    # TFLOPS, the same convolution as a conv2d with H = 1 at 339-430, cuBLAS on the implicit
    # GEMM at 147-251 with the patch matrix built (411-584 without: not a whole route).
    @property
    def reference_call(self) -> str:
        return "torch.nn.functional.conv2d on the [N,C,1,L] view (H = 1)"

    def reference_fast(self, x, w):
        import torch

        x, w, kw = self._torch_args(x, w)
        y = torch.nn.functional.conv2d(x.unsqueeze(2), w.unsqueeze(2), stride=(1, self.stride),
                                       padding=(0, self.pad), dilation=(1, self.dilation))
        return self._channels_last(y.squeeze(2))
