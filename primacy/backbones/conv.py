"""The short causal depthwise convolution that the matrix-memory mixers (``conv_kernel`` > 1: DeltaNet's default, every
atlas row's) and Mamba's plugin put before their mixing, in time-major layout, with its own backward.

Input and output are (B, T, C), as the projections before it and the heads after it want them, so each head's
features sit contiguous in memory. The convolution is K shifted multiply-adds, and its backward is written out
(``_DepthwiseConv``) instead of left to autograd or conv1d. On a CPU (B 64, T 64, 192 channels, K 4), conv1d's
backward for a depthwise kernel took about a sixth of a one-block DeltaNet's training step, and autograd's backward of
shifted slices fills and adds a full-size gradient for each of the K taps.

Legend: B batch, T time, C channels, K kernel width.
"""

from __future__ import annotations

import torch


class _DepthwiseConv(torch.autograd.Function):
    """y_t = Σ_j w[j] ⊙ p_{t+j} over the left-padded input p (B, K-1+T, C) and the taps w (K, C)."""

    @staticmethod
    def forward(ctx, padded: torch.Tensor, taps: torch.Tensor) -> torch.Tensor:
        length = padded.shape[1] - taps.shape[0] + 1
        y = padded[:, :length] * taps[0]  # B T C
        for j in range(1, taps.shape[0]):
            y.addcmul_(padded[:, j:j + length], taps[j])
        ctx.save_for_backward(padded, taps)
        return y

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        padded, taps = ctx.saved_tensors
        length = grad.shape[1]
        grad_padded = grad_taps = None
        if ctx.needs_input_grad[0]:
            grad_padded = padded.new_zeros(padded.shape)  # B K-1+T C
            for j in range(taps.shape[0]):
                grad_padded[:, j:j + length].addcmul_(grad, taps[j])
        if ctx.needs_input_grad[1]:
            grad_taps = torch.stack([(grad * padded[:, j:j + length]).sum((0, 1)) for j in range(taps.shape[0])])
        return grad_padded, grad_taps  # B K-1+T C, K C


def causal_depthwise(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                     window: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """y_t = Σ_j w[:, j] · x_{t-(K-1)+j} + b for x (B, T, C) and the weight (C, 1, K) of ``nn.Conv1d(C, C, K,
    groups=C)``, the same map as that convolution over x padded on the left; ``window`` (B, K-1, C) holds the K-1
    inputs before x (zeros, the padding, when None). Returns y (B, T, C), contiguous, and the last K-1 inputs
    (B, K-1, C): the next call's window."""
    batch, length, channels = x.shape
    if window is None:
        window = x.new_zeros(batch, weight.shape[-1] - 1, channels)
    padded = torch.cat([window, x], dim=1)  # B K-1+T C
    y = _DepthwiseConv.apply(padded, weight[:, 0].t())  # B T C
    return (y if bias is None else y + bias), padded[:, length:]  # B T C, B K-1 C
