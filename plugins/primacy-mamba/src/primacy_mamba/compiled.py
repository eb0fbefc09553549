"""The selective scan compiled for the CPU: ``native/scan.cpp``, built on first use with the machine's C++ compiler.

    h_t = exp(Δ_t A) ⊙ h_{t-1} + (Δ_t u_t) B_t,    y_t = h_t C_t + D ⊙ u_t,    h_{-1} = 0

On a CPU the PyTorch scans (``primacy_mamba.scan``, ``primacy_mamba.chunked``) are bound by passes over (B, T, E, N)
tensors in memory. The compiled loops keep one position's (E, N) state in cache instead and write the states of all
positions only in the backward pass, for one batch element at a time. The batch is split across
``torch.get_num_threads()`` threads (ctypes releases the GIL), each batch element's gradient of A is a partial sum of
its own, and the partials are summed in batch order: the result is the same whatever the number of threads.

No PyTorch headers are involved: the library is plain C++ called through ctypes, built in about a second by
``$CXX`` (default ``c++``) into ``$PRIMACY_KERNEL_CACHE`` (default ``~/.cache/primacy/kernels``), under a name that
hashes the source, primacy's shared header (``primacy/native/fast_math.h``: the float exp, log1p series and
sigmoid), the compiler, its flags and the machine's architecture, and written atomically (concurrent runs may build it
at once). Where no compiler works, asking for ``scan='compiled'`` is a one-line error that says so.

float32 uses a vectorisable exp (relative error ≤ 3e-7, exponent clamped to [-87, 88]); float64 the C library's, so
the float64 scan equals the other scans up to rounding.

Legend: B batch, T time, E the scan's channels (E·D of the mixer), N state size.
"""

from __future__ import annotations

import ctypes
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path

import torch
from primacy.errors import UsageError
from primacy.native import NativeLibrary

SOURCE = Path(__file__).with_name("native") / "scan.cpp"
ABI = 7  # primacy_scan_abi() of the source this module calls
LIBRARY = NativeLibrary(SOURCE, "primacy_scan", ABI, "scan='compiled'", "use scan='chunked'",
                        "this primacy-mamba's scan")
_SUFFIX = {torch.float32: "f32", torch.float64: "f64"}


def library_path() -> Path:
    """Where the build of this source by this compiler for this machine's architecture is kept (``NativeLibrary``)."""
    return LIBRARY.path()


@cache
def library() -> ctypes.CDLL:
    """The compiled scan, built unless ``library_path()`` holds it already; UsageError (one line) when it cannot be
    built or loaded."""
    return LIBRARY.load()


def check_compiled() -> None:
    """Builds (or finds) the library now, so that a config asking for it fails before any work, in one line."""
    library()


@torch.compiler.disable  # torch.compile (primacy's CompileBackbone) calls it as it is: it cannot trace ctypes
def compiled_selective_scan(u: torch.Tensor, dt: torch.Tensor, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor,
                            d: torch.Tensor) -> torch.Tensor:
    """y (B, T, E) of the scan above from u, dt (B, T, E), a (E, N), b, c (B, T, N) and d (E,), on CPU tensors of
    float32 or float64, as ``primacy_mamba.scan.selective_scan``. Differentiable in every input."""
    check_tensors(u, dt, b, c)
    return _CompiledScan.apply(u, dt, a, b, c, d)


def check_tensors(*tensors: torch.Tensor) -> None:
    """Refuses, in one line, tensors the compiled loops cannot take: they run on CPU tensors of float32 or float64,
    all of one dtype."""
    first = tensors[0]
    if first.device.type != "cpu" or first.dtype not in _SUFFIX or any(x.dtype != first.dtype for x in tensors):
        found = ", ".join(sorted({f"{x.dtype} on {x.device.type}" for x in tensors}))
        raise UsageError(f"scan='compiled' runs on float32 or float64 CPU tensors of one dtype, not {found}: "
                         "use scan='chunked' (or kernel='fused' on a GPU)")


def _pointer(x: torch.Tensor) -> ctypes.c_void_p:
    return ctypes.c_void_p(x.data_ptr())


def _sizes(*sizes: int) -> list[ctypes.c_int64]:
    return [ctypes.c_int64(size) for size in sizes]


def _parts(batch: int) -> list[tuple[int, int]]:
    """[first, last) batch ranges, one per thread torch may use."""
    count = max(1, min(batch, torch.get_num_threads()))
    edges = [batch * i // count for i in range(count + 1)]
    return list(zip(edges[:-1], edges[1:]))


def _run(work, parts: list[tuple[int, int]]) -> None:
    """work(i, first, last) for each part i, on threads when there are several."""
    if len(parts) == 1:
        work(0, *parts[0])
        return
    with ThreadPoolExecutor(len(parts)) as pool:
        for done in [pool.submit(work, i, *part) for i, part in enumerate(parts)]:
            done.result()


class _CompiledScan(torch.autograd.Function):
    @staticmethod
    def forward(ctx, u, dt, a, b, c, d):
        ctx.dtypes = a.dtype, d.dtype  # mambapy passes A and D in float32 even in a float64 model
        u, dt, b, c = (x.contiguous() for x in (u, dt, b, c))
        a = a.to(u.dtype).contiguous()
        batch, length, channels = u.shape
        n = a.shape[1]
        y = torch.empty_like(u)  # B T E
        parts = _parts(batch)
        scratch = u.new_empty(len(parts), 2 * channels * n + n)  # each thread's h_{t-1}, h_t (E, N) and decays (N)
        kernel = getattr(library(), f"primacy_scan_forward_{_SUFFIX[u.dtype]}")

        def work(i: int, first: int, last: int) -> None:
            kernel(*_sizes(first, last, length, channels, n), *map(_pointer, (u, dt, a, b, c, y, scratch[i])))

        _run(work, parts)
        ctx.save_for_backward(u, dt, a, b, c, d)
        return y + d * u

    @staticmethod
    def backward(ctx, gy):
        u, dt, a, b, c, d = ctx.saved_tensors
        gy = gy.contiguous()
        batch, length, channels = u.shape
        n = a.shape[1]
        gu, gdt, gb, gc = (torch.empty_like(x) for x in (u, dt, b, c))
        ga_parts = a.new_empty(batch, channels, n)  # B E N: one partial sum per batch element
        parts = _parts(batch)
        states = u.new_empty(len(parts), length + 1, channels, n)  # each thread's h_{-1}, ..., h_{T-1}
        decays = u.new_empty(len(parts), length, channels, n)  # ... and exp(Δ_t A)
        carry = u.new_empty(len(parts), channels, n)
        small = u.new_empty(len(parts), 2, n)  # ... and G_t and ∂L/∂(Δ_t A) of one channel
        kernel = getattr(library(), f"primacy_scan_backward_{_SUFFIX[u.dtype]}")

        def work(i: int, first: int, last: int) -> None:
            kernel(*_sizes(first, last, length, channels, n),
                   *map(_pointer, (u, dt, a, b, c, gy, gu, gdt, gb, gc, ga_parts, states[i], carry[i], decays[i],
                                   *small[i])))

        _run(work, parts)
        ga = ga_parts[0].clone()
        for part in ga_parts[1:]:  # in batch order, however the batch was split
            ga += part
        a_dtype, d_dtype = ctx.dtypes
        return gu + gy * d, gdt, ga.to(a_dtype), gb, gc, (gy * u).sum((0, 1)).to(d_dtype)
