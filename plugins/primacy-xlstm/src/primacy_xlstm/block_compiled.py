"""The sLSTM block's elementwise work around its loop compiled for the CPU (``slstm_loop='compiled_block'``):
``native/block.cpp``, built on first use with the machine's C++ compiler (``primacy.native.NativeLibrary``, as the
loops of ``primacy_xlstm.compiled``).

What it computes:

- ``head_norm_compiled``: the sLSTM layer's output norm, xlstm's ``MultiHeadLayerNorm`` with a weight and no bias (a
  layer norm over each head's dh units at each position, eps 1e-5, times the weight), read from the loop's (T, B, H)
  outputs and written in the block's (B, T, H). PyTorch's path permutes the outputs per head, copies them for the
  layer norm, multiplies by the weight and transposes back (and the same again backward): measured alone (B 64,
  T 64, 4 heads of 16, one thread, forward and backward with the rows' concatenation) 1.6 ms, with rows of 16 units
  the layer norm's per-row overhead.
- ``gelu_gate_compiled``: the sLSTM block's feed-forward gate, gelu(a) ⊙ b from the up-projection's (B, T, 2F)
  output (the gate's pre-activation a then the value b, xlstm's ``GatedFeedForward`` split), forward in one pass and
  the gradient of both halves in one pass, written into one (B, T, 2F) tensor, so the up-projection is one product
  and its input's gradient one product too. PyTorch's path makes five passes over (B, T, F) (gelu, the product, and
  backward the two products and gelu's derivative, which evaluates erf again): alone, B 64, T 64, F 128, 2.6 ms
  forward and backward.

What it must equal: PyTorch's layer norm and ``gelu(a) * b`` (approximate='none') in float64 to 1e-10, every gradient
included (``tests/test_slstm_block.py``). float32 rounds its own way: erf is Abramowitz and Stegun's 7.1.26 (absolute
error ≤ 1.5e-7, the formula of PyTorch's own vectorised float erf) on primacy's fast_exp, and the norm sums a head's
units in order. Each batch element is computed alone, so the bits do not depend on how the work is split across
torch's threads.
"""

from __future__ import annotations

import ctypes
from functools import cache
from pathlib import Path
from typing import Any

import torch
from primacy.errors import UsageError
from primacy.native import NativeLibrary
from torch.autograd.function import once_differentiable

from primacy_xlstm.compiled import _run, compiled_takes, kept_empty

SOURCE = Path(__file__).with_name("native") / "block.cpp"
ABI = 1  # primacy_block_abi() of the source this module calls
_SUFFIX = {torch.float32: "f32", torch.float64: "f64"}
SETTING = "slstm_loop='compiled_block'"
LIBRARY = NativeLibrary(SOURCE, "primacy_block", ABI, SETTING, "use slstm_loop='pytorch'",
                        "this primacy-xlstm's sLSTM block library")


def check_block_compiled() -> None:
    """Builds (or finds) the library now, so that a config asking for it fails before any work, in one line."""
    _library()


@cache
def _library() -> ctypes.CDLL:
    """The compiled loops, built unless cached; UsageError (one line) when they cannot be built or loaded."""
    return LIBRARY.load()


def _check(*tensors: torch.Tensor) -> None:
    if not all(compiled_takes(x) and x.dtype == tensors[0].dtype for x in tensors):
        found = ", ".join(sorted({f"{x.dtype} on {x.device.type}" for x in tensors}))
        raise UsageError(f"{SETTING} runs on float32 or float64 CPU tensors of one dtype, not {found}: use "
                         "slstm_loop='pytorch'")


def head_norm_compiled(y: torch.Tensor, weight: torch.Tensor, heads: int, eps: float) -> torch.Tensor:
    """y (T, B, H) the sLSTM loop's outputs, weight (H) the norm's (xlstm's ``weight_proxy``) -> (B, T, H): each
    head's dh = H / heads units at each position normalised (mean and biased variance, ``eps``) and times the weight.
    Differentiable in both; tensors not on the CPU or not of one dtype, float32 or float64, are refused in one line."""
    _check(y, weight)
    return _compiled_head_norm(y, weight, heads, float(eps))


@torch.compiler.disable  # torch.compile (primacy's CompileBackbone) calls it as it is: it cannot trace ctypes
def _compiled_head_norm(y: torch.Tensor, weight: torch.Tensor, heads: int, eps: float) -> torch.Tensor:
    return _HeadNorm.apply(y, weight, heads, eps)


class _HeadNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, y: torch.Tensor, weight: torch.Tensor, heads: int, eps: float) -> torch.Tensor:
        length, batch, width = y.shape
        y, weight = y.contiguous(), weight.contiguous()
        out = kept_empty("norm_out", (batch, length, width), y)
        stats = y.new_empty(batch, length, heads, 2)  # each row's mean and 1 / sqrt(var + eps)
        kernel = getattr(_library(), f"primacy_head_norm_forward_{_SUFFIX[y.dtype]}")
        _run(kernel, batch, length, batch, heads, width // heads, eps, y, weight, out, stats)
        ctx.save_for_backward(y, weight, stats)
        ctx.heads = heads
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        y, weight, stats = ctx.saved_tensors
        length, batch, width = y.shape
        g_y = kept_empty("norm_grad", tuple(y.shape), y)
        shares = y.new_empty(batch, width)  # each batch element's share of the weight's gradient
        kernel = getattr(_library(), f"primacy_head_norm_backward_{_SUFFIX[y.dtype]}")
        _run(kernel, batch, length, batch, ctx.heads, width // ctx.heads, y, weight, stats, grad.contiguous(), g_y,
             shares)
        return g_y, shares.sum(0), None, None


def gelu_gate_compiled(up: torch.Tensor) -> torch.Tensor:
    """up (B, T, 2F), the gate's pre-activations a then the values b -> gelu(a) ⊙ b (B, T, F), GELU exact
    (approximate='none'). Differentiable in up; a tensor not on the CPU or neither float32 nor float64 is refused in
    one line."""
    _check(up)
    return _compiled_gelu_gate(up)


@torch.compiler.disable  # as _compiled_head_norm
def _compiled_gelu_gate(up: torch.Tensor) -> torch.Tensor:
    return _GeluGate.apply(up)


class _GeluGate(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, up: torch.Tensor) -> torch.Tensor:
        batch, length, double = up.shape
        up = up.contiguous()
        out = kept_empty("gate_out", (batch, length, double // 2), up)
        kernel = getattr(_library(), f"primacy_gelu_gate_forward_{_SUFFIX[up.dtype]}")
        _run(kernel, batch, length, double // 2, up, out)
        ctx.save_for_backward(up)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        (up,) = ctx.saved_tensors
        batch, length, double = up.shape
        g_up = kept_empty("gate_grad", tuple(up.shape), up)
        kernel = getattr(_library(), f"primacy_gelu_gate_backward_{_SUFFIX[up.dtype]}")
        _run(kernel, batch, length, double // 2, up, grad.contiguous(), g_up)
        return g_up
