"""scan='compiled_fma': the mixer from in_proj's output to the gate in compiled loops with fused multiply-adds equals
the same maps in PyTorch around the recurrent scan, output and every gradient, in float64 (and in float32 to its
rounding), with the same bits on any number of threads and from every build this CPU runs; so does its RMSNorm."""

import pytest
import torch
from mambapy.mamba import RMSNorm
from primacy.testing import check_backbone

import primacy_mamba.compiled
import primacy_mamba.compiled_fma
from primacy_mamba import MambaBackbone
from primacy_mamba.compiled_fma import compiled_fma_mixer, compiled_rms_norm, fma_reference
from primacy_mamba.scan import selective_scan

NAMES = ["out", "xz", "conv_weight", "conv_bias", "x_proj_weight", "dt_proj_weight", "dt_bias", "a", "d"]


def fma_inputs(batch: int, length: int, channels: int, n: int, rank: int, taps: int, dtype=torch.float64,
               bias: bool = True, decay: float = 1.0) -> list[torch.Tensor | None]:
    """in_proj's output xz (B, T, 2 E), the convolution's weight and bias, x_proj's weight, dt_proj's weight and bias,
    A (E, N) and D (E,), requiring gradients. Some Δ pre-activations above softplus's threshold 20 (channel 0) and far
    below 0 (the last), some gates and convolution inputs far from 0 (the float32 exp's clamp)."""
    xz = torch.randn(batch, length, 2 * channels, dtype=dtype)
    xz[:, ::5, 0] = 30.0
    xz[:, 1::5, 1 % channels] = -30.0
    xz[:, 2::6, channels] = 95.0
    xz[:, 3::6, channels] = -95.0
    conv_weight = torch.randn(channels, 1, taps, dtype=dtype) / taps
    conv_bias = torch.randn(channels, dtype=dtype) if bias else None
    x_proj_weight = torch.randn(rank + 2 * n, channels, dtype=dtype) / channels**0.5
    dt_proj_weight = torch.randn(channels, rank, dtype=dtype) / (4 * rank)
    dt_bias = torch.randn(channels, dtype=dtype) - 2
    dt_bias[0], dt_bias[-1] = 25.0, -30.0  # Δ = x above 20, as torch's softplus; Δ ≈ 1e-13: a state that barely decays
    a = -decay * n * torch.rand(channels, n, dtype=dtype).clamp_min(1e-3)
    d = torch.randn(channels, dtype=dtype)
    tensors = [xz, conv_weight, conv_bias, x_proj_weight, dt_proj_weight, dt_bias, a, d]
    return [t.requires_grad_() if t is not None else None for t in tensors]


def outputs_and_gradients(fn, inputs) -> tuple[torch.Tensor, ...]:
    out = fn(*inputs)
    weights = torch.randn(out.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(1)).to(out.dtype)
    return (out, *torch.autograd.grad((out * weights).sum(), [x for x in inputs if x is not None]))


def compiled(*inputs: torch.Tensor) -> torch.Tensor:
    return compiled_fma_mixer(*inputs)[0]


def reference(*inputs: torch.Tensor) -> torch.Tensor:
    return fma_reference(*inputs, selective_scan)


def names(inputs) -> list[str]:
    return ["out"] + [name for name, x in zip(NAMES[1:], inputs) if x is not None]


# channels: 5 all one by one, 16 one block, 21 a block and 5, 40 two blocks and 8
@pytest.mark.parametrize("length,channels,n,rank,taps,bias,decay", [
    (1, 5, 4, 1, 4, True, 1.0), (13, 21, 16, 2, 4, True, 1.0), (37, 40, 16, 4, 3, False, 1.0),
    (9, 16, 3, 3, 1, True, 50.0)])
def test_it_equals_the_pytorch_maps_around_the_recurrent_scan_with_every_gradient(length, channels, n, rank, taps,
                                                                                   bias, decay):
    """float64 to 1e-10 of each result's scale; float32 to 1e-5 of it (its own exp and log1p, fused steps; the
    largest seen here 4e-6)."""
    torch.manual_seed(0)
    inputs = fma_inputs(3, length, channels, n, rank, taps, bias=bias, decay=decay)
    fast, slow = outputs_and_gradients(compiled, inputs), outputs_and_gradients(reference, inputs)
    for name, one, other in zip(names(inputs), fast, slow):
        torch.testing.assert_close(one, other, rtol=1e-10, atol=1e-10 * other.abs().max().item(), msg=name)
    single = [x.detach().float().requires_grad_() if x is not None else None for x in inputs]
    for name, one, other in zip(names(inputs), outputs_and_gradients(compiled, single), slow):
        assert one.dtype == torch.float32 and torch.isfinite(one).all(), name
        torch.testing.assert_close(one.double(), other, rtol=1e-5, atol=1e-5 * other.abs().max().item(), msg=name)


def test_its_mean_step_is_softplus_of_the_steps_mean():
    torch.manual_seed(0)
    xz, conv_weight, conv_bias, x_proj_weight, dt_proj_weight, dt_bias, a, d = fma_inputs(3, 9, 4, 2, 2, 4)
    _, mean = compiled_fma_mixer(xz, conv_weight, conv_bias, x_proj_weight, dt_proj_weight, dt_bias, a, d)
    u = primacy_mamba.compiled_fma.F.silu(primacy_mamba.compiled_fma.causal_depthwise(
        xz.chunk(2, dim=-1)[0], conv_weight, conv_bias)[0])
    low = (u @ x_proj_weight.T)[..., :2]
    expected = torch.nn.functional.softplus(low @ dt_proj_weight.T + dt_bias).mean((0, 1))
    torch.testing.assert_close(mean, expected, rtol=0, atol=1e-12)
    assert not mean.requires_grad


def test_its_backward_is_its_forwards_derivative():
    torch.manual_seed(0)
    inputs = fma_inputs(2, 6, 3, 3, 2, 4)
    with torch.no_grad():
        inputs[0][:, :, 0] = torch.randn(2, 6, dtype=torch.float64)  # gradcheck's steps must not cross thresholds
        inputs[5][0] = 0.5
    assert torch.autograd.gradcheck(compiled, inputs)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_its_loops_give_the_same_bits_however_the_batch_is_split_across_threads(dtype, monkeypatch):
    """The compiled loops split the batch across torch's threads; here 1, 2 and 3 parts on torch's one thread, since
    x_proj's products between the loops are torch's (as in_proj's and out_proj's), whose bits may follow its threads."""
    torch.manual_seed(0)
    inputs = fma_inputs(5, 11, 21, 4, 2, 4, dtype=dtype)  # a block of 16 channels and 5 one by one
    results = []
    for count in (1, 2, 3):
        monkeypatch.setattr(primacy_mamba.compiled_fma, "_parts", lambda batch, count=count: [
            (batch * i // count, batch * (i + 1) // count) for i in range(count)])
        results.append(outputs_and_gradients(compiled, inputs))
    for other in results[1:]:
        for name, one, many in zip(names(inputs), results[0], other):
            assert torch.equal(one, many), name


def test_every_build_this_cpu_runs_gives_the_same_bits():
    """AVX-512, AVX2 with FMA, and the portable build (the C library's fma): the same operations, rounded alike."""
    torch.manual_seed(0)
    inputs = fma_inputs(2, 11, 21, 16, 2, 4, dtype=torch.float32, decay=300.0)  # Δ A at the exp's clamp, too
    library = primacy_mamba.compiled.library()
    levels = [level for level in (2, 1, 0) if library.primacy_fma_use_level(level) == level]
    try:
        results = []
        for level in levels:
            library.primacy_fma_use_level(level)
            results.append(outputs_and_gradients(compiled, inputs))
    finally:
        library.primacy_fma_use_level(-1)
    assert 0 in levels
    for other in results[1:]:
        for name, one, another in zip(names(inputs), results[0], other):
            assert torch.equal(one, another), name


@pytest.mark.parametrize("width", [64, 21, 5])  # 4 blocks of 16; a block and 5; 5 one by one
def test_its_rms_norm_equals_mambapys_with_every_gradient(width):
    """float64 to 1e-12; float32 to 1e-6 of each result's scale (the largest seen here 2e-7); gradcheck; the same
    bits from every build this CPU runs."""
    torch.manual_seed(0)
    norm = RMSNorm(width, 1e-5).double()
    with torch.no_grad():
        norm.weight.copy_(torch.randn(width))
    x = torch.randn(3, 7, width, dtype=torch.float64, requires_grad=True)
    weights = torch.randn(3, 7, width, dtype=torch.float64)
    slow = (norm(x), *torch.autograd.grad((norm(x) * weights).sum(), [x, norm.weight]))
    for dtype, tolerance in ((torch.float64, 1e-12), (torch.float32, 1e-6)):
        xs, ws = x.detach().to(dtype).requires_grad_(), norm.weight.detach().to(dtype).requires_grad_()
        out = compiled_rms_norm(xs, ws, 1e-5)
        fast = (out, *torch.autograd.grad((out * weights.to(dtype)).sum(), [xs, ws]))
        for name, one, other in zip(["out", "x", "weight"], fast, slow):
            assert one.dtype == dtype, name
            torch.testing.assert_close(one.double(), other, rtol=tolerance, atol=tolerance * other.abs().max().item(),
                                       msg=name)
    assert torch.autograd.gradcheck(lambda a, b: compiled_rms_norm(a, b, 1e-5), (x[:2, :3].detach().requires_grad_(),
                                                                                  norm.weight.detach().requires_grad_()))
    library = primacy_mamba.compiled.library()
    xs, ws = x.detach().float().requires_grad_(), norm.weight.detach().float().requires_grad_()
    results = []
    try:
        for level in [level for level in (2, 1, 0) if library.primacy_fma_use_level(level) == level]:
            library.primacy_fma_use_level(level)
            out = compiled_rms_norm(xs, ws, 1e-5)
            results.append((out, *torch.autograd.grad((out * weights.float()).sum(), [xs, ws])))
    finally:
        library.primacy_fma_use_level(-1)
    for other in results[1:]:
        assert all(torch.equal(one, another) for one, another in zip(results[0], other))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_backward_on_the_kept_workspace_has_fresh_memorys_bits_returns_none_of_it(dtype, monkeypatch):
    """The backward's temporaries live in a buffer each thread keeps between calls (_workspace): a backward on what
    another one left there (here NaN, and a larger call's leftovers) gives the bits of one on fresh memory, and no
    gradient it returns is a view of that buffer (the next backward would overwrite it)."""
    torch.manual_seed(0)
    inputs = fma_inputs(3, 11, 21, 4, 2, 4, dtype=dtype)
    monkeypatch.setattr(primacy_mamba.compiled_fma, "WORKSPACE_BYTES", 0)  # nothing kept: fresh memory each call
    monkeypatch.setattr(primacy_mamba.compiled_fma._kept, "buffer", None, raising=False)
    fresh = outputs_and_gradients(compiled, inputs)
    monkeypatch.setattr(primacy_mamba.compiled_fma, "WORKSPACE_BYTES", 2**30)
    primacy_mamba.compiled_fma._kept.buffer = torch.full((2**16,), float("nan"), dtype=dtype)
    kept = outputs_and_gradients(compiled, inputs)
    outputs_and_gradients(compiled, fma_inputs(4, 30, 40, 16, 4, 4, dtype=dtype))  # a larger call's leftovers
    again = outputs_and_gradients(compiled, inputs)
    buffer = primacy_mamba.compiled_fma._kept.buffer
    start, end = buffer.data_ptr(), buffer.data_ptr() + buffer.numel() * buffer.element_size()
    for name, one, other, third in zip(names(inputs), fresh, kept, again):
        assert torch.equal(one, other) and torch.equal(one, third), name
        assert not start <= third.data_ptr() < end, name


def test_a_view_of_in_projs_output_gives_the_bits_of_its_copy():
    torch.manual_seed(0)
    inputs = [x.detach().float() if x is not None else None for x in fma_inputs(2, 9, 13, 4, 2, 4)]
    wide = torch.randn(2, 9, 2 * 13 + 3)
    wide[..., :26] = inputs[0]
    view = wide[..., :26]  # rows contiguous, 29 apart
    assert torch.equal(compiled(view, *inputs[1:]), compiled(inputs[0], *inputs[1:]))


def test_it_refuses_other_dtypes_in_one_line():
    inputs = [x.detach() if x is not None else None for x in fma_inputs(1, 3, 2, 2, 1, 4)]
    with pytest.raises(primacy_mamba.compiled.UsageError, match=r"^scan='compiled' runs on float32 or float64 CPU"):
        compiled_fma_mixer(inputs[0].half(), *inputs[1:])


def test_contract():
    check_backbone(MambaBackbone, scan="compiled_fma")
