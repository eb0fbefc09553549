"""The selective scan in chunks of time: a two-level recurrence with a hand-derived backward, for training on a CPU.

    h_t = exp(Δ_t A) ⊙ h_{t-1} + (Δ_t u_t) B_t,    y_t = h_t C_t + D ⊙ u_t,    h_0 = 0

``primacy_mamba.scan`` steps through all T positions, one small tensor operation per step. Here T is cut into
chunks of Q positions and the recurrence is split in two levels:

1. Every chunk runs the recurrence from a zero state at once: Q - 1 steps, each over all T / Q chunks.
2. The chunks are joined in order: chunk k's states gain span_t ⊙ h_end(k-1), where span_t = Π exp(Δ_s A) over
   the chunk's positions s ≤ t (a cumulative product) and h_end(k-1) the previous chunk's last, already joined,
   state: T / Q - 1 steps, each over a whole chunk.

That is Q + T / Q steps instead of T, over larger tensors, so Python's per-operation overhead shrinks, at the cost
of 3 more passes over the states per direction (``default_chunk`` picks one chunk, a plain recurrence, up to
T = 128). The backward pass recomputes the states and runs the adjoint recurrence g_t = ∂y/∂h_t + exp(Δ_{t+1} A) ⊙
g_{t+1} the same way backwards in time. The batch runs in slices whose (slice, P, E, N) scratch tensors are
allocated once per pass and reused: on a CPU the scan is bound by elementwise passes over such tensors, and fresh
megabyte-sized ones cost page faults that take about as long as the arithmetic (measured, quickstart sizes). The
contractions over E and N are batched matrix products, on a contiguous output gradient.

Numerical safety: every factor is a decay exp(Δ A) ≤ 1 or a product of such (span, and its backward twin), never
its inverse: nothing overflows whatever |A|·Δ and the chunk size, and a product that underflows to 0 stands for a
contribution that is below the precision of the state it is added to. This is why there is no closed form
exp(L_t) ⊙ Σ_{s ≤ t} exp(-L_s) ⊙ inject_s within a chunk (L the cumulative log decay): exp(-L_s) overflows float32
once |A|·ΣΔ over a chunk passes ~88, i.e. at chunks of ~5 positions with A = -16 and Δ = 1. The results equal the
recurrent scan's up to rounding (the joined states multiply the decays in a different order).

Legend: B batch, T time (padded to P = C·Q), C chunks, Q positions per chunk, E the scan's channels, N state size.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from primacy.errors import UsageError

CACHE_ELEMENTS = 2**18  # (slice, P, E, N) states per batch slice on the CPU (1 MiB in float32; 2**17 to 2**20 are
# within the noise of each other at the quickstart's sizes) ...
STEP_ELEMENTS = 2**14  # ... unless one step's (slice, C, E, N) would be smaller than this: then Python's overhead wins
# Joining chunks costs 3 extra passes over the states per direction; it paid off (measured on a loaded 2-core
# machine, float32, E·N = 2048, one thread, the scan's forward + backward) only once a slice outgrew the cache: one
# chunk 80, 84, 111 and 154 ms at (B, T) = (64, 64), (128, 32), (32, 128) and (16, 256), √T chunks 99, 132, 151 and
# 107 ms.
ONE_CHUNK_ELEMENTS = 2**21


def default_chunk(length: int) -> int:
    """The chunk size Q for T positions: T itself (one chunk, a plain recurrence over cache-sized slices) while the
    smallest efficient slice's states, STEP_ELEMENTS · T, stay within ONE_CHUNK_ELEMENTS; beyond, about √T, which
    makes the Q + T / Q sequential steps fewest (and the slices smaller)."""
    return length if STEP_ELEMENTS * length <= ONE_CHUNK_ELEMENTS else max(1, round(math.sqrt(length)))


def check_chunk(chunk: int | None) -> None:
    """Refuses a chunk size below 1 in one line (None is the default, ``default_chunk``)."""
    if chunk is not None and chunk < 1:
        raise UsageError(f"chunk={chunk} is invalid: it must be at least 1 (or null for the default)")


def chunked_selective_scan(u: torch.Tensor, dt: torch.Tensor, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor,
                           d: torch.Tensor, chunk: int | None = None) -> torch.Tensor:
    """y (B, T, E) of the scan above from u, dt (B, T, E), a (E, N), b, c (B, T, N) and d (E,), as
    ``selective_scan``, in chunks of ``chunk`` positions (None: ``default_chunk``). Differentiable in every
    input."""
    check_chunk(chunk)
    return _ChunkedScan.apply(u, dt, a, b, c, d, chunk or default_chunk(u.shape[1]))


def _slices(u: torch.Tensor, a: torch.Tensor, chunk: int) -> list[slice]:
    """Batch slices: whole on a GPU, else about CACHE_ELEMENTS states each, unless one step's (slice, C, E, N)
    would then be smaller than STEP_ELEMENTS (Python's overhead would win)."""
    batch, length, channels = u.shape
    per_step = (length // chunk) * channels * a.shape[1]
    states = length * channels * a.shape[1]
    size = batch if u.is_cuda else max(1, CACHE_ELEMENTS // states, STEP_ELEMENTS // per_step)
    return [slice(i, i + size) for i in range(0, batch, size)]


def _pad(x: torch.Tensor, length: int) -> torch.Tensor:
    """x (B, T, ·) with zeros appended along time up to ``length``: Δ = 0 and u = 0 there (a decay of 1 and no
    injection), so padding changes no state before it."""
    return F.pad(x, (0, 0, 0, length - x.shape[1])) if x.shape[1] < length else x


def _buffers(count: int, like: torch.Tensor, size: int, n: int) -> list[torch.Tensor]:
    """``count`` scratch tensors (size, P, E, N) like the (B, P, E) ``like``, reused by every batch slice: fresh
    megabyte-sized tensors per slice cost page faults that take longer than the arithmetic on them."""
    return [like.new_empty(size, *like.shape[1:], n) for _ in range(count)]


def _join_forward(states: torch.Tensor, decay: torch.Tensor, span: torch.Tensor) -> None:
    """In place: states (B, C, Q, E, N) holding each position's injection become h_t, given the decays (same
    shape): first each chunk's recurrence from zero, then the chunks joined in order. span is scratch."""
    h, dec = states.unbind(2), decay.unbind(2)  # Q views (B, C, E, N) each: one call, not one per step
    for q in range(1, len(h)):
        h[q].addcmul_(dec[q], h[q - 1])
    if states.shape[1] > 1:
        spans = span.unbind(2)  # Π exp(Δ_s A) from the chunk's start through q
        spans[0].copy_(dec[0])
        for q in range(1, len(h)):
            torch.mul(spans[q - 1], dec[q], out=spans[q])
        for k in range(1, states.shape[1]):
            states[:, k].addcmul_(span[:, k], states[:, k - 1, -1:])


def _join_backward(g: torch.Tensor, decay: torch.Tensor, tail: torch.Tensor) -> None:
    """In place: g (B, C, Q, E, N) holding ∂L/∂h_t through y_t only becomes the whole ∂L/∂h_t, the adjoint
    recurrence g_t += exp(Δ_{t+1} A) ⊙ g_{t+1} run backwards: within each chunk from zero, then joined. tail
    (same shape) is scratch."""
    chunks, length = g.shape[1], g.shape[2]
    gs, dec = g.unbind(2), decay.unbind(2)  # Q views (B, C, E, N) each
    for q in range(length - 2, -1, -1):
        gs[q].addcmul_(dec[q + 1], gs[q + 1])
    if chunks > 1:
        tails = tail[:, 1:].unbind(2)  # (B, C-1, E, N): Π exp(Δ_s A) from q + 1 through the next chunk's start
        tails[-1].copy_(decay[:, 1:, 0])
        for q in range(length - 2, -1, -1):
            torch.mul(tails[q + 1], dec[q + 1][:, :-1], out=tails[q])
        for k in range(chunks - 2, -1, -1):
            g[:, k].addcmul_(tail[:, k + 1], g[:, k + 1, :1])


def _states(u: torch.Tensor, dt: torch.Tensor, a: torch.Tensor, b: torch.Tensor, chunk: int,
            decay: torch.Tensor, states: torch.Tensor, span: torch.Tensor) -> None:
    """Writes exp(Δ_t A) into decay and h_t into states, (B, P, E, N) each, for every t (P a multiple of
    ``chunk``); span (same shape) is scratch."""
    batch, length, channels = u.shape
    shape = (batch, length // chunk, chunk, channels, a.shape[1])  # B C Q E N
    torch.mul(dt[..., None], a, out=decay).exp_()
    torch.mul((dt * u)[..., None], b[:, :, None, :], out=states)  # the injections, joined in place
    _join_forward(states.view(shape), decay.view(shape), span.view(shape))


class _ChunkedScan(torch.autograd.Function):
    @staticmethod
    def forward(ctx, u, dt, a, b, c, d, chunk):
        ctx.dtypes, ctx.chunk = (a.dtype, d.dtype), chunk  # mambapy passes A and D in float32 in a float64 model
        a = a.to(u.dtype)
        length = u.shape[1]
        padded = -(-length // chunk) * chunk
        up, dtp, bp, cp = (_pad(x, padded) for x in (u, dt, b, c))
        y = torch.empty_like(up)  # B P E
        parts = _slices(up, a, chunk)
        decay, states, span = _buffers(3, up, min(parts[0].stop, up.shape[0]), a.shape[1])  # B P E N each
        for part in parts:
            size = len(range(*part.indices(up.shape[0])))
            _states(up[part], dtp[part], a, bp[part], chunk, decay[:size], states[:size], span[:size])
            y[part] = _contract_n(states[:size], cp[part])
        y = y[:, :length] + d * u
        ctx.save_for_backward(u, dt, a, b, c, d)
        return y

    @staticmethod
    def backward(ctx, gy):
        u, dt, a, b, c, d = ctx.saved_tensors
        chunk, length = ctx.chunk, u.shape[1]
        padded = -(-length // chunk) * chunk
        gy = gy.contiguous()  # y.sum()'s gradient is expanded, which batched matrix products copy per matrix
        up, dtp, bp, cp, gyp = (_pad(x, padded) for x in (u, dt, b, c, gy))
        gu, gdt, gb, gc = (torch.empty_like(x) for x in (up, dtp, bp, cp))
        ga = torch.zeros_like(a)
        parts = _slices(up, a, chunk)
        buffers = _buffers(4, up, min(parts[0].stop, up.shape[0]), a.shape[1])  # B P E N each
        for part in parts:
            size = len(range(*part.indices(up.shape[0])))
            _slice_backward(up[part], dtp[part], a, bp[part], cp[part], gyp[part], chunk,
                            gu[part], gdt[part], ga, gb[part], gc[part], [x[:size] for x in buffers])
        gu = gu[:, :length] + gy * d
        a_dtype, d_dtype = ctx.dtypes
        return (gu, gdt[:, :length], ga.to(a_dtype), gb[:, :length], gc[:, :length], (gy * u).sum((0, 1)).to(d_dtype),
                None)


def _slice_backward(u: torch.Tensor, dt: torch.Tensor, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor,
                    gy: torch.Tensor, chunk: int, gu: torch.Tensor, gdt: torch.Tensor, ga: torch.Tensor,
                    gb: torch.Tensor, gc: torch.Tensor, buffers: list[torch.Tensor]) -> None:
    """Writes the scan's gradients without its D term for one batch slice (u, dt, gy (B, P, E), b, c (B, P, N))
    into gu, gdt (B, P, E), gb, gc (B, P, N), and adds A's (E, N) to ga; buffers are four (B, P, E, N) scratch."""
    decay, states, scratch, g = buffers  # B P E N each
    _states(u, dt, a, b, chunk, decay, states, scratch)
    shape = (u.shape[0], u.shape[1] // chunk, chunk, *decay.shape[2:])  # B C Q E N
    torch.mul(gy[..., None], c[:, :, None, :], out=g)  # ∂L/∂h_t through y_t
    _join_backward(g.view(shape), decay.view(shape), scratch.view(shape))
    gc.copy_(_contract_e(states, gy))  # Σ_e gy h_t
    g_log = decay  # B P E N: ∂L/∂(Δ_t A) = g_t ⊙ h_{t-1} ⊙ exp(Δ_t A), in place of the decays
    g_log[:, 1:] *= states[:, :-1]
    g_log[:, 1:] *= g[:, 1:]
    g_log[:, 0] = 0  # h_0 = 0: the first decay acts on nothing
    g_inject = _contract_n(g, b)  # B P E: ∂L/∂(Δ_t u_t)
    gb.copy_(_contract_e(g, dt * u))
    gu.copy_(g_inject * dt)
    gdt.copy_(g_inject * u + torch.mul(g_log, a, out=states) @ a.new_ones(a.shape[1]))
    ga += torch.mul(g_log, dt[..., None], out=g).sum((0, 1))


def _contract_n(x: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Σ_n x[..., e, n] v[..., n]: (B, P, E) from x (B, P, E, N) and v (B, P, N), as one batched matrix product."""
    batch, length, channels, n = x.shape
    return torch.bmm(x.reshape(-1, channels, n), v.reshape(-1, n, 1)).view(batch, length, channels)


def _contract_e(x: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Σ_e v[..., e] x[..., e, n]: (B, P, N) from x (B, P, E, N) and v (B, P, E), as one batched matrix product."""
    batch, length, channels, n = x.shape
    return torch.bmm(v.reshape(-1, 1, channels), x.reshape(-1, channels, n)).view(batch, length, n)
