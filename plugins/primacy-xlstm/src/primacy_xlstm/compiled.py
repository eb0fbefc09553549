"""The sLSTM recurrence compiled for the CPU: ``native/slstm.cpp``, built on first use with the machine's C++ compiler.

The map and its gradient are ``primacy_xlstm.slstm``'s (``_Sequence``: the same inputs, outputs and ties), computed
per batch element in plain loops instead of ~15 PyTorch operations a step forward and ~25 backward (at the atlas's
sizes each a few microseconds of work for tens of microseconds of dispatch). Each head's recurrent product is a sum
of rows of its (dh, 4dh) weight in a fixed order; R's gradient is one product per head in PyTorch, as in the loop.
The batch is split across ``torch.get_num_threads()`` threads (ctypes releases the GIL); a batch element's arithmetic
does not depend on the split, so the result is the same bits on any number of threads.

No PyTorch headers are involved: the library is plain C++ called through ctypes, built in seconds by ``$CXX``
(default ``c++``) into ``$PRIMACY_KERNEL_CACHE`` (default ``~/.cache/primacy/kernels``), under a name that hashes the
source, primacy's shared header (``primacy/native/fast_math.h``), the compiler, its flags and the machine's
architecture, written atomically (concurrent runs may build it at once), and refused if its ABI is not this module's.
Where no compiler works, ``slstm_loop='compiled'`` is a one-line error that says so.

``compiled_gates_sequence`` (``slstm_loop='compiled_gates'``) runs the sLSTM layer's gates with the loop: each head's
pre-activations are formed from its own units of the layer's inputs at each step (the dense product's zeros are not
multiplied), and the backward writes the inputs' gradient in the same pass; the gates' and R's weight gradients are
products per head in PyTorch.

float64 uses the C library's exp, log1p and tanh, so it equals the PyTorch loop (and xlstm's cell) to rounding;
float32 a vectorisable exp (relative error ≤ 3e-7; ``primacy/native/fast_math.h``, shared with primacy-mamba) and
log σ and tanh built on it (``native/slstm.cpp``).
"""

from __future__ import annotations

import ctypes
import threading
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path
from typing import Any

import torch
from primacy.errors import UsageError
from primacy.native import NativeLibrary
from torch.autograd.function import once_differentiable

SOURCE = Path(__file__).with_name("native") / "slstm.cpp"
ABI = 2  # primacy_slstm_abi() of the source this module calls (2: with the gates entry points)
_SUFFIX = {torch.float32: "f32", torch.float64: "f64"}
_FALLBACK = "use slstm_loop='pytorch'"
LIBRARY = NativeLibrary(SOURCE, "primacy_slstm", ABI, "slstm_loop='compiled'", _FALLBACK,
                        "this primacy-xlstm's sLSTM library")


def library_path() -> Path:
    """Where the build of this source by this compiler for this architecture is kept (``NativeLibrary``)."""
    return LIBRARY.path()


@cache
def library() -> ctypes.CDLL:
    """The compiled loops, built unless ``library_path()`` holds them; UsageError (one line) when they cannot be built
    or loaded."""
    return LIBRARY.load()


def check_compiled() -> None:
    """Builds (or finds) the library now, so that a config asking for it fails before any work, in one line."""
    library()


def compiled_takes(x: torch.Tensor) -> bool:
    """Whether the loops take a tensor like x: on the CPU, float32 or float64."""
    return x.device.type == "cpu" and x.dtype in _SUFFIX


def check_tensors(*tensors: torch.Tensor, setting: str = "slstm_loop='compiled'") -> None:
    """Refuses, in one line, tensors the loops cannot take: CPU tensors of float32 or float64, all of one dtype;
    ``setting`` is the one the error names."""
    first = tensors[0]
    if first.device.type != "cpu" or first.dtype not in _SUFFIX or any(x.dtype != first.dtype for x in tensors):
        found = ", ".join(sorted({f"{x.dtype} on {x.device.type}" for x in tensors}))
        raise UsageError(f"{setting} runs on float32 or float64 CPU tensors of one dtype, not {found}: "
                         f"{_FALLBACK}")


_KEPT_PER_NAME = 4  # kept tensors per name and thread: a stack's sLSTM blocks each find one
_kept = threading.local()


def kept_empty(name: str, shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
    """An uninitialised (``shape``) tensor of ``like``'s dtype and device, in memory this thread keeps between calls
    under ``name``: a kept tensor is handed out again (as a new view of it) only when no other tensor holds its
    storage, so nothing alive is ever overwritten; otherwise, or where PyTorch cannot count the storage's holders, a
    new tensor (kept for later, up to ``_KEPT_PER_NAME``). A name keeps tensors of one shape, dtype and device, the
    last asked for (another drops them), so what is kept is at most ``_KEPT_PER_NAME`` times a step's own tensors. Why:
    the sLSTM block's states, outputs and gradients (``slstm_loop='compiled_block'``) are written once a step, and
    fresh memory is memory the C library may have given back to the system since the last step, which the first write
    then faults in page by page (at T 256 the GELU gate's (B, T, 2F) gradient, 16 MB, took 3,200 faults a step, 11 ms
    of a 12 ms backward)."""
    pools = getattr(_kept, "pools", None)
    if pools is None:
        pools = _kept.pools = {}
    key = (tuple(shape), like.dtype, like.device)
    if name not in pools or pools[name][0] != key:
        pools[name] = (key, [])
    pool = pools[name][1]
    count = getattr(torch._C, "_storage_Use_Count", None)  # private: without it, fresh memory each call
    if count is not None:
        for kept in pool:
            if count(kept.untyped_storage()._cdata) == 2:  # the kept tensor and its storage's Python object alone
                return kept.view(shape)
    fresh = like.new_empty(shape)
    if count is not None and len(pool) < _KEPT_PER_NAME:
        pool.append(fresh)
        return fresh.view(shape)
    return fresh


def _parts(batch: int) -> list[tuple[int, int]]:
    """[first, last) batch ranges, one per thread torch may use."""
    count = max(1, min(batch, torch.get_num_threads()))
    edges = [batch * i // count for i in range(count + 1)]
    return list(zip(edges[:-1], edges[1:]))


def _run(kernel: Any, batch: int, *args: Any) -> None:
    """kernel(first, last, *args) over the batch, on threads when torch may use several; tensors passed as pointers,
    None as a null pointer, floats as double, integers as int64."""
    values = [ctypes.c_void_p(a.data_ptr()) if isinstance(a, torch.Tensor) else None if a is None
              else ctypes.c_double(a) if isinstance(a, float) else ctypes.c_int64(a) for a in args]
    parts = _parts(batch)
    if len(parts) == 1:
        kernel(ctypes.c_int64(0), ctypes.c_int64(batch), *values)
        return
    with ThreadPoolExecutor(len(parts)) as pool:
        for done in [pool.submit(kernel, ctypes.c_int64(a), ctypes.c_int64(b), *values) for a, b in parts]:
            done.result()


@torch.compiler.disable  # torch.compile (primacy's CompileBackbone) calls it as it is: it cannot trace ctypes
def compiled_sequence(xb: torch.Tensor, states: torch.Tensor, R: torch.Tensor, outputs_only: bool = False
                      ) -> torch.Tensor:
    """``primacy_xlstm.slstm._Sequence.apply`` on the compiled loops: xb (T, B, 4H) head-major pre-activations (with
    the bias), states (4, B, H), R (NH, 4dh, dh) -> (4, T+1, B, H) states, or y after each step (T, B, H) with
    ``outputs_only``. Differentiable in xb, states and R."""
    check_tensors(xb, states, R)
    return _CompiledSequence.apply(xb, states, R, outputs_only)


class _CompiledSequence(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, xb: torch.Tensor, states: torch.Tensor, R: torch.Tensor, outputs_only: bool
                ) -> torch.Tensor:
        length, batch, _ = xb.shape
        heads, _, dh = R.shape
        xb, R = xb.contiguous(), R.contiguous()
        raws = torch.empty_like(xb)  # T B 4H: each step's pre-activations, for backward
        all_states = xb.new_empty(4, length + 1, batch, heads * dh)
        all_states[:, 0] = states
        first_from_zero = bool(torch.all(states[2] == 0.0))  # as _Sequence: xlstm's first-step test, once
        kernel = getattr(library(), f"primacy_slstm_forward_{_SUFFIX[xb.dtype]}")
        _run(kernel, batch, length, batch, heads, dh, int(first_from_zero), xb, R.transpose(1, 2).contiguous(), raws,
             all_states)
        ctx.save_for_backward(raws, all_states, R)
        ctx.first_from_zero, ctx.outputs_only = first_from_zero, outputs_only
        return all_states[0, 1:] if outputs_only else all_states

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        raws, all_states, R = ctx.saved_tensors
        length, batch, _ = raws.shape
        heads, _, dh = R.shape
        grad = grad.contiguous()
        grad_raws = torch.empty_like(raws)
        grad_states = raws.new_empty(4, batch, heads * dh)
        kernel = getattr(library(), f"primacy_slstm_backward_{_SUFFIX[raws.dtype]}")
        gy_out, g_all = (grad, None) if ctx.outputs_only else (None, grad)
        _run(kernel, batch, length, batch, heads, dh, int(ctx.first_from_zero), raws, all_states, R, gy_out, g_all,
             grad_raws, grad_states)
        # R[h]'s gradient: Σ over T and B of head h's gate gradients (4dh) times its y before the step (dh)
        g_heads = grad_raws.view(length * batch, heads, 4 * dh)
        y_heads = all_states[0, :-1].reshape(length * batch, heads, dh)
        grad_R = torch.stack([g_heads[:, h].T @ y_heads[:, h] for h in range(heads)])  # NH 4dh dh
        return grad_raws, grad_states, grad_R, None


def _head_products(grad: torch.Tensor, inputs: torch.Tensor, heads: int) -> torch.Tensor:
    """Σ over rows of grad's head-h columns times inputs' head-h columns, per head: grad (N, NH·G), inputs (N, NH·d),
    both head-major, -> (NH, G, d). One product per head on strided views (no copy, no products between heads)."""
    g_heads = grad.view(grad.shape[0], heads, -1)
    x_heads = inputs.reshape(inputs.shape[0], heads, -1)
    return torch.stack([g_heads[:, h].T @ x_heads[:, h] for h in range(heads)])


@torch.compiler.disable  # as compiled_sequence
def compiled_gates_sequence(rows: torch.Tensor, w_in: torch.Tensor, bias: torch.Tensor, R: torch.Tensor,
                            kept: bool = False) -> torch.Tensor:
    """The sLSTM layer's gates and recurrence from a zero state on the compiled loops, each head's gate
    pre-activations formed inside the loop from its own units (``slstm_loop='compiled_gates'``): rows (T, B, 2D), the
    layer's (x_conv | x) at each position; w_in (NH, 4dh, dh), head h's weights from its dh units of x_conv (gates i,
    f) or of x (gates z, o) to its gates (R's layout); bias (4D) head-major; R (NH, 4dh, dh) -> y after each step
    (T, B, D). It equals ``compiled_sequence(rows @ W.T + bias, 0, R, True)`` with W the dense (4D, 2D) matrix of
    w_in's blocks (``primacy_xlstm.slstm.gate_matrix``) to rounding, without multiplying W's zeros: the gates' sums
    run over a head's own units in a fixed order, so float32 rounds its own way. Differentiable in all four. With
    ``kept`` (``slstm_loop='compiled_block'``) its saved states and its gradients are written in memory kept between
    steps (``kept_empty``), with the same bits."""
    check_tensors(rows, w_in, bias, R, setting="slstm_loop='compiled_gates'")
    return _CompiledGates.apply(rows, w_in, bias, R, kept)


class _CompiledGates(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, rows: torch.Tensor, w_in: torch.Tensor, bias: torch.Tensor, R: torch.Tensor, kept: bool
                ) -> torch.Tensor:
        length, batch, _ = rows.shape
        heads, _, dh = R.shape
        rows, w_in, bias, R = (x.contiguous() for x in (rows, w_in, bias, R))
        empty = kept_empty if kept else (lambda name, shape, like: like.new_empty(shape))
        raws = empty("gates_raws", (length, batch, 4 * heads * dh), rows)  # T B 4H: pre-activations, for backward
        all_states = empty("gates_states", (4, length + 1, batch, heads * dh), rows)
        all_states[:, 0] = 0.0  # xlstm's zero state
        kernel = getattr(library(), f"primacy_slstm_gates_forward_{_SUFFIX[rows.dtype]}")
        _run(kernel, batch, length, batch, heads, dh, rows, w_in.transpose(1, 2).contiguous(), bias,
             R.transpose(1, 2).contiguous(), raws, all_states)
        ctx.save_for_backward(rows, w_in, R, raws, all_states)
        ctx.kept = kept
        return all_states[0, 1:]  # T B H

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        rows, w_in, R, raws, all_states = ctx.saved_tensors
        length, batch, _ = raws.shape
        heads, _, dh = R.shape
        empty = kept_empty if ctx.kept else (lambda name, shape, like: like.new_empty(shape))
        grad_raws, grad_rows = empty("gates_graws", raws.shape, raws), empty("gates_grows", rows.shape, rows)
        kernel = getattr(library(), f"primacy_slstm_gates_backward_{_SUFFIX[raws.dtype]}")
        _run(kernel, batch, length, batch, heads, dh, raws, all_states, R, w_in, grad.contiguous(), grad_raws,
             grad_rows)
        count = length * batch
        g = grad_raws.view(count, heads, 2, 2 * dh)  # (i, f) and (z, o) of each head
        inputs = rows.view(count, 2, heads, dh)  # x_conv and x, per head
        # a head's gates i, f read its units of x_conv, z, o of x: w_in's gradient, one product per head and input
        grad_w = torch.stack([torch.cat([g[:, h, s].T @ inputs[:, s, h] for s in range(2)]) for h in range(heads)])
        grad_R = _head_products(grad_raws.view(count, -1), all_states[0, :-1].reshape(count, -1), heads)
        return grad_rows, grad_w, grad_raws.view(count, -1).sum(0), grad_R, None
