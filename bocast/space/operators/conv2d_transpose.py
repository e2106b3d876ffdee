"""Transposed 2-D convolution on Tensor Cores as an implicit GEMM (``_conv.py``): the direct
convolution of the stride-dilated input, input X[N,H,W,C], weights W[K,R,S,C] (torch's
[C,K,R,S] in channels-last order), output Y[N,OH,OW,K] with OH = (H-1)*stride - 2*pad +
dilation*(R-1) + output_padding + 1.

Knobs and constraints: the GEMM's (``gemm.py``) over M = N*OH*OW, N = K, K = R*S*C, with
``vec_divides_c`` in place of ``vec_divides_k``. With stride s, only one tap in s (per dimension)
of the gathered A tile is a real input element; the kernel multiplies the zeros anyway (``flops``
counts the useful ones). Space v3 (``--space v3``: dilation 1, C % 32 == 0, fp16:fp32) runs it
as stride x stride phase convolutions on the Hopper template, no zero insertion
(``_hopper_tconv.py``); ``space auto`` takes it (:data:`AUTO_V3_TRANSPOSED`, measured).
Default: the 2x upsampling of a DCGAN-style generator, 14x14 -> 28x28,
256 -> 128 channels, 4x4, stride 2, pad 1. Heron's figure-6 cases (order N,H,W,C,K,R,S,stride,pad,
dilation,output_padding): T1 [16,56,56,64,64,3,3,1,1,1,0], T3 [16,28,28,128,128,3,3,1,1,1,0],
T5 [16,14,14,256,512,3,3,1,1,1,0] and 1x1 stride-2 cases T2/T4/T6.
"""

from typing import ClassVar

from bocast.space.operators.operator import register

from ._conv import Conv

#: ``space auto`` takes v3 (the phase decomposition) for conv2d_transpose: measured on an H200
#: (2026-11-28, experiments/results/skinny_tconv_h200x4/, cold BO, 64 trials, seed 0, each space
#: in its own run against cuDNN with the weight laid out once): pix2pix's U-Net up-sampling
#: layer (16x32x32, 512 -> 128, 4x4 stride 2) v3 1.055 against v2 0.089 (re-timed figures)
AUTO_V3_TRANSPOSED = True


@register
class Conv2dTranspose(Conv):
    name = "conv2d_transpose"
    spatial, kernel, torch_fn = ("H", "W"), ("R", "S"), "conv_transpose2d"
    transposed = True
    hopper_v3 = True  # space v3: bocast/space/operators/_hopper_tconv.py
    v3_rule: ClassVar[str | None] = ("v3 takes it (dilation 1, C % 32 == 0, fp16:fp32) while "
                                     "conv2d_transpose.AUTO_V3_TRANSPOSED: measured, it beat v2")
    shape_help = ("N,H,W,C,K,R,S[,stride,pad,dilation,output_padding] (X[N,H,W,C], W[K,R,S,C], "
                  "Y[N,OH,OW,K]; stride 1, pad 0, dilation 1, output_padding 0 when left out)")
    default_shape = (16, 14, 14, 256, 128, 4, 4, 2, 1, 1, 0)

    @classmethod
    def prefers_v3(cls, shape: tuple[int, ...]) -> bool:
        return AUTO_V3_TRANSPOSED

    # The weights a user's ConvTranspose2d holds are torch's [C, K, R, S]; bocast's W[K,R,S,C]
    # viewed so is not channels-last contiguous, and cuDNN copied it on every call (measured on
    # an H200, pix2pix's 512 -> 128 4x4 stride-2 layer: 502 TFLOPS as a view, 569 laid out
    # once; experiments/results/skinny_tconv_h200x4/). The reference lays it out once per
    # weight tensor, outside the timing, as a model's parameter already is.
    @property
    def reference_call(self) -> str:
        return ("torch.nn.functional.conv_transpose2d (the weight laid out once, channels-last "
                "[C,K,R,S])")

    def reference_fast(self, x, w):
        import torch

        xt, wt, kw = self._torch_args(x, w)
        laid_out = self.once_for("weight", (w,),
                                 lambda: wt.contiguous(memory_format=torch.channels_last))
        return self._channels_last(torch.nn.functional.conv_transpose2d(xt, laid_out, **kw))
