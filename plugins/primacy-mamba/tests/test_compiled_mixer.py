"""scan='compiled_mixer': the compiled scan with softplus(Δ + bias), D·u and the SiLU(z) gate in its loops equals
the same maps in PyTorch around the other scans, outputs and every gradient, in float64 (and in float32 to its
rounding), on any number of threads; the backbone on it equals the recurrent scan's."""

import pytest
import torch
import torch.nn.functional as F
from primacy.testing import check_backbone

import primacy_mamba.compiled
from primacy_mamba import MambaBackbone
from primacy_mamba.compiled_mixer import compiled_mixer_scan, mixer_reference
from primacy_mamba.scan import selective_scan

NAMES = ["out", "u", "dt_raw", "bias", "a", "b", "c", "d", "z"]


def mixer_inputs(batch: int, length: int, channels: int, n: int, dtype: torch.dtype = torch.float64,
                 decay: float = 1.0) -> list[torch.Tensor]:
    """u, Δ before bias and softplus (B, T, E), its bias (E,), A (E, N), B, C (B, T, N), D (E,), z (B, T, E),
    requiring gradients. Some Δ pre-activations above softplus's threshold 20 and some far below 0, some gates far
    from 0."""
    u, dt_raw, z = (torch.randn(batch, length, channels, dtype=dtype) for _ in range(3))
    dt_raw = 3 * dt_raw - 2
    dt_raw[:, ::7, 0] = 25.0  # softplus(x) = x above 20, as torch's
    dt_raw[:, 1::5, -1] = -30.0  # Δ ≈ 1e-13: a state that barely decays
    z[:, 2::6, 0] = 95.0  # the gate's exp(-z) at the float32 exp's clamp, both ends
    z[:, 3::6, 0] = -95.0
    bias = torch.randn(channels, dtype=dtype)
    a = -decay * n * torch.rand(channels, n, dtype=dtype).clamp_min(1e-3)
    b, c = (torch.randn(batch, length, n, dtype=dtype) for _ in range(2))
    d = torch.randn(channels, dtype=dtype)
    return [t.requires_grad_() for t in (u, dt_raw, bias, a, b, c, d, z)]


def outputs_and_gradients(fn, inputs: list[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    out = fn(*inputs)
    weights = torch.randn(out.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(1)).to(out.dtype)
    return (out, *torch.autograd.grad((out * weights).sum(), inputs))


def compiled(*inputs: torch.Tensor) -> torch.Tensor:
    return compiled_mixer_scan(*inputs)[0]


def reference(*inputs: torch.Tensor) -> torch.Tensor:
    return mixer_reference(selective_scan, *inputs)


@pytest.mark.parametrize("length,decay,channels", [(1, 1.0, 5), (13, 1.0, 13), (64, 1.0, 5), (37, 50.0, 21)])
def test_it_equals_softplus_the_recurrent_scan_and_the_gate_with_every_gradient(length, decay, channels):
    """float64 to 1e-10; float32 to 1e-5 of each result's scale (its own exp and log1p). The backward takes channels
    in blocks of 8 and the rest one by one: 5 channels are all the rest, 13 and 21 both."""
    torch.manual_seed(0)
    inputs = mixer_inputs(3, length, channels, 16, decay=decay)
    fast, slow = outputs_and_gradients(compiled, inputs), outputs_and_gradients(reference, inputs)
    for name, one, other in zip(NAMES, fast, slow):
        torch.testing.assert_close(one, other, rtol=1e-10, atol=1e-10, msg=name)
    single = [x.detach().float().requires_grad_() for x in inputs]
    for name, one, other in zip(NAMES, outputs_and_gradients(compiled, single), slow):
        assert one.dtype == torch.float32 and torch.isfinite(one).all(), name
        torch.testing.assert_close(one.double(), other, rtol=1e-5, atol=1e-5 * other.abs().max().item(), msg=name)


def test_its_mean_step_is_softplus_of_the_steps_mean():
    torch.manual_seed(0)
    inputs = mixer_inputs(3, 9, 4, 2)
    _, mean = compiled_mixer_scan(*inputs)
    torch.testing.assert_close(mean, F.softplus(inputs[1] + inputs[2]).mean((0, 1)), rtol=0, atol=1e-14)
    assert not mean.requires_grad


def test_its_backward_is_its_forwards_derivative():
    torch.manual_seed(0)
    inputs = mixer_inputs(2, 7, 3, 5)
    with torch.no_grad():
        inputs[1][:, ::7, 0] = 0.5  # gradcheck's steps must not cross softplus's threshold
    assert torch.autograd.gradcheck(compiled, inputs)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_it_gives_the_same_bits_on_any_number_of_threads(dtype):
    torch.manual_seed(0)
    inputs = mixer_inputs(5, 11, 13, 4, dtype=dtype)  # a block of 8 channels and 5 one by one
    threads = torch.get_num_threads()
    try:
        results = []
        for count in (1, 2, 3):
            torch.set_num_threads(count)
            results.append(outputs_and_gradients(compiled, inputs))
    finally:
        torch.set_num_threads(threads)
    for other in results[1:]:
        for name, one, many in zip(NAMES, results[0], other):
            assert torch.equal(one, many), name


# compiled_conv: compiled_mixer + the convolution; compiled_fma: all of it, dt_proj too, multiply-adds fused
@pytest.mark.parametrize("scan", ["compiled_mixer", "compiled_conv", "compiled_fma"])
def test_the_backbone_on_it_equals_the_recurrent_scans_with_every_gradient_in_float64(scan):
    torch.manual_seed(0)
    fast = MambaBackbone(d_model=8, n_layers=2, scan=scan).double()
    slow = MambaBackbone(d_model=8, n_layers=2, scan="recurrent").double()
    slow.load_state_dict(fast.state_dict())
    x = torch.randn(3, 13, 8, dtype=torch.float64)
    weights = torch.randn(3, 13, 8, dtype=torch.float64)
    grads = [torch.autograd.grad((model(x) * weights).sum(), list(model.parameters())) for model in (fast, slow)]
    torch.testing.assert_close(fast(x), slow(x), rtol=0, atol=1e-10)
    for name, g_fast, g_slow in zip(dict(fast.named_parameters()), *grads):
        torch.testing.assert_close(g_fast, g_slow, rtol=0, atol=1e-10, msg=name)
    for name, dt in fast.dt().items():
        torch.testing.assert_close(dt, slow.dt()[name], rtol=0, atol=1e-12, msg=name)


def test_it_refuses_other_dtypes_in_one_line():
    inputs = [x.detach() for x in mixer_inputs(1, 3, 2, 2)]
    inputs[-1] = inputs[-1].float()
    with pytest.raises(primacy_mamba.compiled.UsageError, match=r"^scan='compiled' runs on float32 or float64 CPU"):
        compiled_mixer_scan(*inputs)


def test_contract():
    check_backbone(MambaBackbone, scan="compiled_mixer")
