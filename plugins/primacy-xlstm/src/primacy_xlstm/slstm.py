"""The sLSTM recurrence over a sequence in O(T), for xlstm's PyTorch ("vanilla") cell.

Why: xlstm's ``slstm_forward`` (``xlstm.blocks.slstm.src.vanilla``), which ``sLSTMCell_vanilla._impl`` calls,
writes each step's states into a preallocated (4, T + 1, B, H) tensor (and its gates into another that ``_impl``
discards) under autograd, so every step's write is an in-place copy into the whole tensor and the backward pass
moves O(T²) memory; it also rebuilds the view of R and makes the first-step test on every step, and autograd records
~20 small operations a step. Here the loop records no graph: each step is one matrix product (every head's
recurrence at once, with a block-diagonal matrix built once per call) and ~15 elementwise operations, the states
are kept in Python lists and stacked once, and a hand-written backward recomputes every step's gates at once from
the saved pre-activations and states, runs only the recurrence of the gradients step by step, and forms R's
gradient in one product per head at the end.

What it must equal: ``slstm_forward(x, states, R, b, slstm_forward_pointwise)[0]`` of xlstm's vanilla cell (the
``slstm`` function), and its gradient, which is autograd's of xlstm's operations, to rounding (additions and
products are grouped differently). Per step, with the gates (i, f, z, o), each of width H = heads · head_dim, and
the states (y, c, n, m):

    ĩ, f̃, z̃, õ = x_t + b + R y_{t-1}                        (R block-diagonal over heads)
    m_t = ĩ                            if every entry of n_{t-1} is 0 (the first step from a zero state)
        = max(ĩ, m_{t-1} + log σ(f̃))   otherwise
    i = min(exp(ĩ - m_t), 1),  f = min(exp(m_{t-1} + log σ(f̃) - m_t), 1)
    c_t = f c_{t-1} + i tanh(z̃),  n_t = f n_{t-1} + i,  y_t = σ(õ) c_t / n_t

The gradient keeps what xlstm's ``torch.max`` and ``torch.minimum`` do on a tie, each side getting half (the gate
whose exponent is m_t's is exp(0) = 1, a tie with 1, on every step), and flows through m as in xlstm (no detach).

xlstm tests "every n is 0" on every step; here once, before the first step, as after any step it is false: m_t is
exactly one of ĩ and m_{t-1} + log σ(f̃) (or NaN), so one of i and f is exactly exp(0) = 1 (or NaN), and n_t = f n_{t-1}
+ i (f, i ≥ 0) is ≥ n_{t-1} where f = 1 and ≥ 1 where i = 1: an entry of n that is not 0 never becomes 0; after a
step from an all-zero n, m_t = ĩ, i = 1 and n_t = 1 (NaN where ĩ or f is not finite), not 0 either.

``tests/test_slstm_loop.py`` checks outputs, final states and gradients against xlstm's cell in float64.
``primacy_xlstm.compiled`` runs the same map and gradient in C++ loops on the CPU (``slstm_loop='compiled'`` of
``XLSTMBackbone``; ``tests/test_slstm_compiled.py`` checks it against this loop and xlstm's cell).

Each step adds its recurrent input in place to one copy of the pre-activations and writes its states with ``out=``
into the (4, T+1, B, H) tensor kept for the backward (no copy a step, no stack at the end); a caller that uses only
the outputs y (``FastsLSTMLayer``) asks for them alone, and the backward then adds no zero gradients of the other
states. Measured (one CPU thread, T = 256, B = 64, H = 64 in 4 heads): forward 40 → 33 ms, backward 142 → 116 ms.

``FastsLSTMLayer`` is xlstm's ``sLSTMLayer`` whose forward over a sequence from a zero state feeds this loop directly:
xlstm computes each gate's pre-activations with its own headwise projection into (B, T, 4H) in gate-major order, and
its cell then reorders them time-major, where this loop adds the bias and reorders them head-major once more (two
copies, forward and backward). Here the four projections are one linear map of the rows (x_conv | x), taken
time-major, with one (4H, 2H) weight (the four block-diagonal weights placed in the head-major rows: zeros between
heads and between the two inputs, ``gate_matrix``), the bias added in the same call, so its result is the loop's input
as it is. Seven eighths of that matrix are zeros (a head's gates read its own units, and i, f only x_conv, z, o only
x), so ``slstm_loop='compiled_gates'`` forms each head's pre-activations inside the compiled loop from its own units
instead (``primacy_xlstm.compiled.compiled_gates_sequence``: the same map; float32 rounds its own way). Measured (one
CPU thread, B = 64, T = 64, D = 64 in 4 heads, forward and backward, thread time, interleaved): the sLSTM block alone
37 → 27 ms, the atlas's xLSTM step 83 → 69 ms. ``slstm_loop='compiled_conv'`` runs the layer's convolution and its
SiLU compiled too (``primacy_xlstm.mlstm_compiled.conv_silu_compiled``, the mLSTM library's: one pass forward, one
backward); the atlas's xLSTM step, both blocks' convolutions compiled against the mLSTM's alone (T 64, 15 rounds):
51.7 → 50.1 ms.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.autograd.function import once_differentiable
from torch.nn.functional import linear, logsigmoid
from xlstm.blocks.slstm.cell import sLSTMCell_vanilla
from xlstm.blocks.slstm.layer import sLSTMLayer
from xlstm.components.ln import MultiHeadLayerNorm

from primacy_xlstm.block_compiled import head_norm_compiled
from primacy_xlstm.compiled import compiled_gates_sequence, compiled_sequence
from primacy_xlstm.mlstm_compiled import conv_silu_compiled

GATES = 4  # i, f, z, o


def slstm_sequence(x: torch.Tensor, states: torch.Tensor, R: torch.Tensor, b: torch.Tensor, loop: str = "pytorch"
                   ) -> torch.Tensor:
    """All states of the sLSTM recurrence over x, the initial ones first (module docstring), differentiable in x,
    states, R and b (once: no gradient of the gradient). x, states, R and b share one dtype. ``loop``: ``pytorch``
    (this module's loop, any device) or ``compiled`` (the same map in C++ on the CPU: primacy_xlstm.compiled).

    Args:
        x: T B 4H, the gates' input pre-activations in xlstm's internal order: gate (i, f, z, o), head, unit.
        states: 4 B H, the initial (y, c, n, m).
        R: NH 4·dh dh, xlstm's vanilla cell's internal recurrent kernel, R[h, g·dh + k, j] the weight from unit j of
            head h to gate g's unit k of the same head.
        b: 4H, the bias, ordered as x.

    Returns:
        4 T+1 B H: (y, c, n, m) before the first step and after each step.
    """
    length, batch, _ = x.shape
    heads, _, dh = R.shape
    # head-major (head, gate, unit), so that a head's gates are contiguous: one copy, and autograd maps it back
    xb = (x + b).view(length, batch, GATES, heads, dh).transpose(2, 3).reshape(length, batch, GATES * heads * dh)
    return sequence_function(loop)(xb, states, R)


def sequence_function(loop: str) -> Callable[..., torch.Tensor]:
    """``_Sequence.apply`` for ``loop='pytorch'``, its compiled twin ``compiled_sequence`` for ``'compiled'`` and
    ``'compiled_gates'`` (whose gates differ only where ``FastsLSTMLayer`` forms them): both take (xb, states, R,
    outputs_only=False)."""
    return compiled_sequence if loop in ("compiled", "compiled_gates", "compiled_conv") else _Sequence.apply


def recurrent_matrix(R: torch.Tensor) -> torch.Tensor:
    """R (NH, 4·dh, dh) as one (H, 4H) matrix W with y @ W every head's recurrent input, head-major:
    W[h·dh + j, h·4dh + g·dh + k] = R[h, g·dh + k, j], zero between heads."""
    return torch.block_diag(*R.transpose(1, 2))  # H 4H


class _Sequence(torch.autograd.Function):
    """``slstm_sequence`` on head-major pre-activations xb = x + b (T, B, 4H as (head, gate, unit)); the states in and
    out are xlstm's (4, ·, B, H as (head, unit)). With ``outputs_only`` it returns only y after each step (T, B, H),
    for a caller that uses nothing else: the backward then skips the gradients of the other states, which are zero,
    instead of receiving them as a (4, T+1, B, H) tensor of zeros."""

    @staticmethod
    def forward(ctx: Any, xb: torch.Tensor, states: torch.Tensor, R: torch.Tensor, outputs_only: bool = False
                ) -> torch.Tensor:
        length, batch, _ = xb.shape
        heads, _, dh = R.shape
        W = recurrent_matrix(R)  # H 4H
        raws = xb.clone(memory_format=torch.contiguous_format)  # T B 4H: each step's pre-activations, for backward
        all_states = xb.new_empty(4, length + 1, batch, heads, dh)  # each step writes its states in place
        all_states[:, 0] = states.view(4, batch, heads, dh)
        y, c, n, m = all_states[:, 0].unbind(0)  # B NH dh each
        first_from_zero = bool(torch.all(n == 0.0))  # xlstm's per-step test; false after any step (module docstring)
        for t in range(length):
            raw = raws[t].addmm_(y.reshape(batch, -1), W)  # B 4H: in place, one copy of xb above, not one a step
            i_raw, f_raw, z_raw, o_raw = raw.view(batch, heads, GATES, dh).unbind(2)  # B NH dh each
            y_out, c_out, n_out, m_out = all_states[:, t + 1].unbind(0)  # B NH dh each: where this step's go
            log_f_plus_m = logsigmoid(f_raw).add_(m)
            m = m_out.copy_(i_raw) if t == 0 and first_from_zero else torch.max(i_raw, log_f_plus_m, out=m_out)
            i_gate = torch.exp(i_raw - m).clamp_(max=1.0)  # the value of torch.minimum(·, 1)
            f_gate = torch.exp(log_f_plus_m.sub_(m)).clamp_(max=1.0)
            c = torch.addcmul(f_gate * c, i_gate, torch.tanh(z_raw), out=c_out)
            n = torch.addcmul(i_gate, f_gate, n, out=n_out)
            y = torch.sigmoid(o_raw, out=y_out).mul_(c).div_(n)
        all_states = all_states.view(4, length + 1, *states.shape[1:])  # 4 T+1 B H
        ctx.save_for_backward(raws, all_states, R)
        ctx.first_from_zero, ctx.outputs_only = first_from_zero, outputs_only
        return all_states[0, 1:] if outputs_only else all_states

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        raws, all_states, R = ctx.saved_tensors  # T B 4H, 4 T+1 B H, NH 4dh dh
        length, batch, _ = raws.shape
        heads, _, dh = R.shape
        local = _local_derivatives(raws, all_states, heads, ctx.first_from_zero)
        incoming = _Incoming(grad, length, batch, heads, ctx.outputs_only)
        grad_raws, grad_states = _gradient_loop(local, incoming, recurrent_matrix(R), raws.shape)
        # R[h]'s gradient: Σ over T and B of head h's gate gradients (4dh) times its y_prev (dh); a head's gates are
        # one strided matrix of grad_raws (head-major), so no copy, and no products between heads
        g_heads = grad_raws.view(length * batch, heads, GATES * dh)
        y_heads = all_states[0, :-1].reshape(length * batch, heads, dh)  # y before each step
        grad_R = torch.stack([g_heads[:, h].T @ y_heads[:, h] for h in range(heads)])  # NH 4dh dh
        return grad_raws, grad_states.view(4, batch, heads * dh), grad_R, None


class _Incoming:
    """The gradient ``_Sequence.backward`` receives, as what each state gets from outside the recurrence, (y, c, n,
    m) (B, NH, dh) each, after the last step (``last``) and before step t (``before(t)``); None: nothing (only y after
    each step was returned, so the other states' gradients are zero and are not added)."""

    def __init__(self, grad: torch.Tensor, length: int, batch: int, heads: int, outputs_only: bool) -> None:
        self.outputs_only = outputs_only
        if outputs_only:
            self.y = grad.reshape(length, batch, heads, -1)  # T B NH dh: into y after each step
        else:
            self.all = grad.view(4, length + 1, batch, heads, -1)  # 4 T+1 B NH dh

    def last(self) -> list[torch.Tensor | None]:
        if self.outputs_only:
            return [self.y[-1], None, None, None]
        return self.before(self.all.shape[1] - 1)

    def before(self, t: int) -> list[torch.Tensor | None]:
        if self.outputs_only:
            return [self.y[t - 1] if t > 0 else None, None, None, None]
        return list(self.all[:, t].unbind(0))


def _local_derivatives(raws: torch.Tensor, all_states: torch.Tensor, heads: int, first_from_zero: bool
                       ) -> dict[str, torch.Tensor]:
    """Every step's local derivatives at once, (T, B, NH, dh) each, from the saved pre-activations (T, B, 4H) and
    states (4, T+1, B, H); a = ĩ − m, L = m_prev + log σ(f̃), b = L − m."""
    length, batch, _ = raws.shape
    dh = raws.shape[-1] // (GATES * heads)
    i_raw, f_raw, z_raw, o_raw = raws.view(length, batch, heads, GATES, dh).unbind(3)  # T B NH dh each
    states = all_states.view(4, length + 1, batch, heads, dh)
    _, c_prev, n_prev, m_prev = states[:, :-1].unbind(0)  # T B NH dh each
    y, c, n, m = states[:, 1:].unbind(0)
    log_f_plus_m = m_prev + logsigmoid(f_raw)
    e_i, e_f = torch.exp(i_raw - m), torch.exp(log_f_plus_m - m)
    to_i, to_l = _maximum_share(i_raw, log_f_plus_m), _maximum_share(log_f_plus_m, i_raw)  # d m / d ĩ, d m / d L
    if first_from_zero:
        to_i[0], to_l[0] = 1.0, 0.0  # m = ĩ on the first step
    sig_o, tanh_z = torch.sigmoid(o_raw), torch.tanh(z_raw)
    return {
        "c_prev": c_prev, "n_prev": n_prev, "tanh_z": tanh_z, "to_i": to_i, "to_l": to_l,
        "f_gate": e_f.clamp(max=1.0),
        "d_a": e_i * _minimum_share(e_i),  # d i / d a: exp, then torch.minimum(·, 1)
        "d_b": e_f * _minimum_share(e_f),  # d f / d b
        "d_o": c / n * sig_o * (1 - sig_o),  # d y / d õ
        "d_c": sig_o / n,  # d y / d c
        "d_n": -y / n,  # d y / d n
        "d_z": e_i.clamp(max=1.0) * (1 - tanh_z * tanh_z),  # d c / d z̃
        "d_f": torch.sigmoid(-f_raw),  # d log σ(f̃) / d f̃
    }


def _gradient_loop(local: dict[str, torch.Tensor], incoming: _Incoming, W: torch.Tensor, shape: torch.Size
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """The recurrence of the gradients, last step first: the gradient of the pre-activations (T, B, 4H, head-major)
    and of the initial states (4, B, NH, dh). g_y, g_c, g_n, g_m: into the states after step t."""
    length, batch, _ = shape
    heads, dh = local["d_c"].shape[2:]
    grad_raws = local["d_c"].new_empty(shape)  # T B 4H, contiguous
    g_i, g_f, g_z, g_o = grad_raws.view(length, batch, heads, GATES, dh).unbind(3)  # T B NH dh each, views
    d_c, d_n, d_o, d_z, d_a, d_b, d_f = (local[name] for name in ("d_c", "d_n", "d_o", "d_z", "d_a", "d_b", "d_f"))
    tanh_z, c_prev, n_prev, to_i, to_l, f_gate = (local[name] for name in
                                                  ("tanh_z", "c_prev", "n_prev", "to_i", "to_l", "f_gate"))
    g_y, g_c, g_n, g_m = (g if g is not None else d_c.new_zeros(batch, heads, dh) for g in incoming.last())
    for t in range(length - 1, -1, -1):
        g_c = torch.addcmul(g_c, g_y, d_c[t])
        g_n = torch.addcmul(g_n, g_y, d_n[t])
        torch.mul(g_y, d_o[t], out=g_o[t])
        torch.mul(g_c, d_z[t], out=g_z[t])
        g_a = torch.addcmul(g_n, g_c, tanh_z[t]).mul_(d_a[t])  # into a = ĩ - m
        g_b = torch.addcmul(g_c * c_prev[t], g_n, n_prev[t]).mul_(d_b[t])  # into b = L - m
        g_m = g_m - g_a - g_b  # into m, all its uses
        torch.addcmul(g_a, g_m, to_i[t], out=g_i[t])
        g_l = torch.addcmul(g_b, g_m, to_l[t])  # into L
        torch.mul(g_l, d_f[t], out=g_f[t])
        y_in, c_in, n_in, m_in = incoming.before(t)  # into the states before step t, from outside
        g_y = (grad_raws[t] @ W.T if y_in is None else torch.addmm(y_in.reshape(batch, -1), grad_raws[t], W.T))
        g_y = g_y.view(batch, heads, dh)
        g_c = g_c * f_gate[t] if c_in is None else torch.addcmul(c_in, g_c, f_gate[t])
        g_n = g_n * f_gate[t] if n_in is None else torch.addcmul(n_in, g_n, f_gate[t])
        g_m = g_l if m_in is None else g_l + m_in
    return grad_raws, torch.stack((g_y, g_c, g_n, g_m))  # T B 4H, 4 B NH dh


def _minimum_share(e: torch.Tensor) -> torch.Tensor:
    """The share of the gradient ``torch.minimum(e, 1)`` gives e: 1 where e < 1, 1/2 where e = 1, 0 where e > 1."""
    return torch.where(e == 1.0, 0.5, 1.0).to(e.dtype).masked_fill_(e > 1.0, 0.0)


def _maximum_share(a: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    """The share of the gradient ``torch.max(a, other)`` gives a: 1 where a > other, 1/2 on a tie, 0 where less."""
    return torch.where(a == other, 0.5, 1.0).to(a.dtype).masked_fill_(a < other, 0.0)


class FastsLSTMCell(sLSTMCell_vanilla):
    """xlstm's PyTorch sLSTM cell with ``slstm_sequence`` as ``_impl`` (forward over a sequence); its parameters, state
    dict keys, ``_impl_step`` (one step) and everything else are ``sLSTMCell_vanilla``'s. xlstm's own loop still runs
    for what ``slstm_sequence`` does not cover: another cell function than ``slstm``, mixed dtypes, autocast.
    ``slstm_loop`` (an attribute, not in the state dict; ``XLSTMBackbone`` sets it) is the loop it runs, ``pytorch``
    or ``compiled``; ``FastsLSTMLayer`` reads its cell's."""

    slstm_loop = "pytorch"

    def _impl(self, training: bool, input: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        R, b = self._recurrent_kernel, self._bias
        same_dtype = input.dtype == state.dtype == R.dtype == b.dtype
        if self.config.function != "slstm" or not same_dtype or torch.is_autocast_enabled(input.device.type):
            return super()._impl(training, input, state)
        return slstm_sequence(input, state, R, b, self.slstm_loop)


class FastsLSTMLayer(sLSTMLayer):
    """xlstm's ``sLSTMLayer`` (same parameters and state dict) whose forward over a sequence from a zero state, with a
    ``FastsLSTMCell`` that takes it (``_fast_path``), computes the gates' pre-activations as one product straight into
    the loop's layout (module docstring); otherwise, and in ``step``, it is xlstm's."""

    def forward(self, x: torch.Tensor, conv_state: torch.Tensor | None = None, slstm_state: torch.Tensor | None = None,
                return_last_state: bool = False, **kwargs: Any) -> Any:
        """x (B, T, D) -> (B, T, D), as sLSTMLayer.forward."""
        if conv_state is not None or slstm_state is not None or return_last_state or not self._fast_path(x):
            return super().forward(x, conv_state, slstm_state, return_last_state, **kwargs)
        batch, length, width = x.shape
        if self.config.conv1d_kernel_size > 0 and self._conv_compiled():  # the convolution and its SiLU compiled
            conv = self.conv1d.conv
            loop = self.slstm_cell.slstm_loop
            x_conv = conv_silu_compiled(x, conv.weight, conv.bias, f"slstm_loop={loop!r}",
                                        "slstm_conv" if loop == "compiled_block" else "")  # B T D
        else:
            x_conv = self.conv_act_fn(self.conv1d(x)) if self.config.conv1d_kernel_size > 0 else x  # B T D
        rows = torch.cat([x_conv.transpose(0, 1), x.transpose(0, 1)], dim=-1).view(length * batch, 2 * width)  # T·B 2D
        cell = self.slstm_cell
        heads = cell.config.num_heads
        bias = cell._bias.view(GATES, heads, -1).transpose(0, 1).reshape(-1)  # 4D: (head, gate, unit)
        # xlstm's sLSTMLayer feeds the gates (i, f, z, o) from (fgate, igate, zgate, ogate): kept as it is
        weights = [self.fgate.weight, self.igate.weight, self.zgate.weight, self.ogate.weight]  # NH dh dh each
        if cell.slstm_loop in ("compiled_gates", "compiled_conv", "compiled_block"):  # each head's gates, compiled
            w_in = torch.stack(weights, dim=1).flatten(1, 2)  # NH 4dh dh: R's layout
            y = compiled_gates_sequence(rows.view(length, batch, -1), w_in, bias, cell._recurrent_kernel,
                                        cell.slstm_loop == "compiled_block")  # T B D
        else:
            xb = linear(rows, gate_matrix(weights), bias).view(length, batch, -1)  # T B 4D
            states = x.new_zeros(GATES, batch, width)  # 4 B D: xlstm's zero state
            y = sequence_function(cell.slstm_loop)(xb, states, cell._recurrent_kernel, True)  # T B D: y after each step
        y = self.dropout(y)
        if self._norm_compiled():  # slstm_loop='compiled_block': the norm read from the loop's layout, compiled
            norm = self.group_norm
            return head_norm_compiled(y, norm.weight_proxy, heads, norm.eps)  # B T D
        y = y.view(length, batch, heads, -1).permute(1, 2, 0, 3)  # B NH T dh, as xlstm's cell returns it
        return self.group_norm(y).transpose(1, 2).reshape(batch, length, -1)  # B T D

    def _conv_compiled(self) -> bool:
        """Whether the convolution and its SiLU run compiled (``slstm_loop='compiled_conv'``): xlstm's SiLU after a
        plain depthwise convolution that no hook watches (``_fast_path`` has ruled out autocast)."""
        conv, module = self.conv1d.conv, self.conv1d
        plain = (conv is not None and conv.groups == conv.in_channels == conv.out_channels and conv.dilation == (1,)
                 and conv.stride == (1,) and not module._forward_hooks and not module._forward_pre_hooks)
        return (self.slstm_cell.slstm_loop in ("compiled_conv", "compiled_block") and plain
                and type(self.conv_act_fn) is torch.nn.SiLU)

    def _norm_compiled(self) -> bool:
        """Whether the output norm runs compiled (``slstm_loop='compiled_block'``): xlstm's per-head layer norm with a
        weight and no bias that no hook watches."""
        norm = self.group_norm
        plain = (isinstance(norm, MultiHeadLayerNorm) and norm.weight is not None and norm.bias is None
                 and not norm._forward_hooks and not norm._forward_pre_hooks)
        return self.slstm_cell.slstm_loop == "compiled_block" and plain

    def _fast_path(self, x: torch.Tensor) -> bool:
        """Whether the cell is ``FastsLSTMCell`` computing xlstm's ``slstm`` function on x's dtype, without autocast
        (what ``FastsLSTMCell._impl`` itself requires), and the gates' projections have no bias."""
        cell = self.slstm_cell
        if type(cell) is not FastsLSTMCell or cell.config.function != "slstm":
            return False
        gates = (self.fgate, self.igate, self.zgate, self.ogate)
        dtypes = {x.dtype, cell._recurrent_kernel.dtype, cell._bias.dtype, *(gate.weight.dtype for gate in gates)}
        biased = any(gate.bias is not None for gate in gates)
        return len(dtypes) == 1 and not biased and not torch.is_autocast_enabled(x.device.type)


def gate_matrix(weights: list[torch.Tensor]) -> torch.Tensor:
    """The four gates' headwise weights (NH, dh, dh) each, the first two applied to x_conv and the last two to x, as
    one (4D, 2D) matrix W, a linear layer's weight: (x_conv | x) Wᵀ are their pre-activations in the loop's
    head-major order (head, gate, unit), W[h·4dh + g·dh + k, s·D + h·dh + j] = weights[g][h, k, j] where s is gate
    g's input (0 for g < 2, else 1), zero elsewhere.

    A linear layer's (out, in) weight, not its transpose, because of the gradient's underflow: the sLSTM's gradients
    into early steps decay through the forget gates into float32's subnormal range, and the weight's gradient, the
    product of those gradients and the rows over T·B, is then about 10 times faster as gradᵀ @ rows, the product
    autograd forms for this layout, than as rowsᵀ @ grad, which it forms for a (2D, 4D) matrix (one CPU thread, a
    training step of the atlas's xLSTM row at T = 256: 25 ms against 245 ms)."""
    heads, dh, _ = weights[0].shape
    gates = torch.stack(weights, dim=1)[:, :, :, None, None, :]  # NH 4 dh(k) 1 1 dh(j)
    same_head = torch.eye(heads, dtype=gates.dtype, device=gates.device)[:, None, None, None, :, None]  # NH 1 1 1 NH 1
    source = torch.zeros(GATES, 2, dtype=gates.dtype, device=gates.device)  # 4 2: which input feeds gate g
    source[:2, 0], source[2:, 1] = 1.0, 1.0
    dense = gates * same_head * source[None, :, None, :, None, None]  # NH 4 dh 2 NH dh
    return dense.reshape(GATES * heads * dh, 2 * heads * dh)  # 4D 2D
