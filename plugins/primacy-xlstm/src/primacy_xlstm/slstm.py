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
"""

from __future__ import annotations

from typing import Any

import torch
from torch.autograd.function import once_differentiable
from torch.nn.functional import logsigmoid
from xlstm.blocks.slstm.cell import sLSTMCell_vanilla

GATES = 4  # i, f, z, o


def slstm_sequence(x: torch.Tensor, states: torch.Tensor, R: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """All states of the sLSTM recurrence over x, the initial ones first (module docstring), differentiable in x,
    states, R and b (once: no gradient of the gradient). x, states, R and b share one dtype.

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
    return _Sequence.apply(xb, states, R)


def block_diagonal(R: torch.Tensor) -> torch.Tensor:
    """R (NH, 4·dh, dh) as one (H, 4H) matrix W with y @ W every head's recurrent input, head-major:
    W[h·dh + j, h·4dh + g·dh + k] = R[h, g·dh + k, j], zero between heads."""
    return torch.block_diag(*R.transpose(1, 2))  # H 4H


class _Sequence(torch.autograd.Function):
    """``slstm_sequence`` on head-major pre-activations xb = x + b (T, B, 4H as (head, gate, unit)); the states in and
    out are xlstm's (4, ·, B, H as (head, unit))."""

    @staticmethod
    def forward(ctx: Any, xb: torch.Tensor, states: torch.Tensor, R: torch.Tensor) -> torch.Tensor:
        length, batch, _ = xb.shape
        heads, _, dh = R.shape
        W = block_diagonal(R)  # H 4H
        raws = xb.new_empty(xb.shape)  # T B 4H, contiguous: each step's pre-activations, for the backward
        y, c, n, m = states.view(4, batch, heads, dh).unbind(0)  # B NH dh each
        first_from_zero = bool(torch.all(n == 0.0))  # xlstm's per-step test; false after any step (module docstring)
        ys, cs, ns, ms = [y], [c], [n], [m]
        for t in range(length):
            raw = torch.addmm(xb[t], y.reshape(batch, -1), W, out=raws[t])  # B 4H
            i_raw, f_raw, z_raw, o_raw = raw.view(batch, heads, GATES, dh).unbind(2)  # B NH dh each
            log_f_plus_m = logsigmoid(f_raw).add_(m)
            m = i_raw.clone() if t == 0 and first_from_zero else torch.max(i_raw, log_f_plus_m)
            i_gate = torch.exp(i_raw - m).clamp_(max=1.0)  # the value of torch.minimum(·, 1)
            f_gate = torch.exp(log_f_plus_m.sub_(m)).clamp_(max=1.0)
            c = torch.addcmul(f_gate * c, i_gate, torch.tanh(z_raw))
            n = torch.addcmul(i_gate, f_gate, n)
            y = torch.sigmoid(o_raw).mul_(c).div_(n)
            ys.append(y)
            cs.append(c)
            ns.append(n)
            ms.append(m)
        all_states = torch.stack(ys + cs + ns + ms).view(4, length + 1, *states.shape[1:])  # 4 T+1 B H
        ctx.save_for_backward(raws, all_states, R)
        ctx.first_from_zero = first_from_zero
        return all_states

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        raws, all_states, R = ctx.saved_tensors  # T B 4H, 4 T+1 B H, NH 4dh dh
        length, batch, _ = raws.shape
        heads, _, dh = R.shape
        W = block_diagonal(R)  # H 4H
        i_raw, f_raw, z_raw, o_raw = raws.view(length, batch, heads, GATES, dh).unbind(3)  # T B NH dh each
        states = all_states.view(4, length + 1, batch, heads, dh)
        y_prev, c_prev, n_prev, m_prev = states[:, :-1].unbind(0)  # T B NH dh each
        y, c, n, m = states[:, 1:].unbind(0)
        # every step's local derivatives at once, T B NH dh each
        log_f_plus_m = m_prev + logsigmoid(f_raw)
        e_i, e_f = torch.exp(i_raw - m), torch.exp(log_f_plus_m - m)
        f_gate = e_f.clamp(max=1.0)
        d_a = e_i * _minimum_share(e_i)  # d i / d (ĩ - m): exp, then torch.minimum(·, 1)
        d_b = e_f * _minimum_share(e_f)  # d f / d (L - m), L = m_prev + log σ(f̃)
        to_i, to_l = _maximum_share(i_raw, log_f_plus_m), _maximum_share(log_f_plus_m, i_raw)  # d m / d ĩ, d m / d L
        if ctx.first_from_zero:
            to_i[0], to_l[0] = 1.0, 0.0  # m = ĩ on the first step
        sig_o, tanh_z = torch.sigmoid(o_raw), torch.tanh(z_raw)
        d_o = c / n * sig_o * (1 - sig_o)  # d y / d õ
        d_c = sig_o / n  # d y / d c
        d_n = -y / n  # d y / d n
        d_z = e_i.clamp(max=1.0) * (1 - tanh_z * tanh_z)  # d c / d z̃
        d_f = torch.sigmoid(-f_raw)  # d log σ(f̃) / d f̃
        grad_raws = raws.new_empty(raws.shape)  # T B 4H, contiguous
        g_i, g_f, g_z, g_o = grad_raws.view(length, batch, heads, GATES, dh).unbind(3)  # T B NH dh each, views
        grads = grad.view(4, length + 1, batch, heads, dh)
        g_y, g_c, g_n, g_m = grads[:, -1].unbind(0)  # B NH dh each: into the states of the last step
        for t in range(length - 1, -1, -1):  # g_y, g_c, g_n, g_m: into step t's states (all_states[:, t + 1])
            g_c = torch.addcmul(g_c, g_y, d_c[t])
            g_n = torch.addcmul(g_n, g_y, d_n[t])
            torch.mul(g_y, d_o[t], out=g_o[t])
            torch.mul(g_c, d_z[t], out=g_z[t])
            g_a = torch.addcmul(g_n, g_c, tanh_z[t]).mul_(d_a[t])  # into ĩ - m
            g_b = torch.addcmul(g_c * c_prev[t], g_n, n_prev[t]).mul_(d_b[t])  # into L - m
            g_m = g_m - g_a - g_b  # into m, all its uses
            torch.addcmul(g_a, g_m, to_i[t], out=g_i[t])
            g_l = torch.addcmul(g_b, g_m, to_l[t])  # into L
            torch.mul(g_l, d_f[t], out=g_f[t])
            g_y = torch.addmm(grads[0, t].reshape(batch, -1), grad_raws[t], W.T).view(batch, heads, dh)
            g_c = torch.addcmul(grads[1, t], g_c, f_gate[t])
            g_n = torch.addcmul(grads[2, t], g_n, f_gate[t])
            g_m = g_l + grads[3, t]
        grad_states = torch.stack((g_y, g_c, g_n, g_m)).view(4, batch, heads * dh)  # 4 B H
        # R[h]'s gradient: Σ over T and B of head h's gate gradients (4dh) times its y_prev (dh); a head's gates are
        # one strided matrix of grad_raws (head-major), so no copy, and no products between heads
        g_heads = grad_raws.view(length * batch, heads, GATES * dh)
        y_heads = y_prev.reshape(length * batch, heads, dh)
        grad_R = torch.stack([g_heads[:, h].T @ y_heads[:, h] for h in range(heads)])  # NH 4dh dh
        return grad_raws, grad_states, grad_R


def _minimum_share(e: torch.Tensor) -> torch.Tensor:
    """The share of the gradient ``torch.minimum(e, 1)`` gives e: 1 where e < 1, 1/2 where e = 1, 0 where e > 1."""
    return torch.where(e == 1.0, 0.5, 1.0).to(e.dtype).masked_fill_(e > 1.0, 0.0)


def _maximum_share(a: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    """The share of the gradient ``torch.max(a, other)`` gives a: 1 where a > other, 1/2 on a tie, 0 where less."""
    return torch.where(a == other, 0.5, 1.0).to(a.dtype).masked_fill_(a < other, 0.0)


class FastsLSTMCell(sLSTMCell_vanilla):
    """xlstm's PyTorch sLSTM cell with ``slstm_sequence`` as ``_impl`` (forward over a sequence); its parameters, state
    dict keys, ``_impl_step`` (one step) and everything else are ``sLSTMCell_vanilla``'s. xlstm's own loop still runs
    for what ``slstm_sequence`` does not cover: another cell function than ``slstm``, mixed dtypes, autocast."""

    def _impl(self, training: bool, input: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        R, b = self._recurrent_kernel, self._bias
        same_dtype = input.dtype == state.dtype == R.dtype == b.dtype
        if self.config.function != "slstm" or not same_dtype or torch.is_autocast_enabled(input.device.type):
            return super()._impl(training, input, state)
        return slstm_sequence(input, state, R, b)
