"""scan='compiled_conv': the mixer's causal depthwise convolution and its SiLU compiled equal the PyTorch convolution
and SiLU, output and every gradient, in float64 (and in float32 to its rounding), read from a view of in_proj's
output as from a contiguous tensor, on any number of threads; the backbone on it equals the recurrent scan's."""

import pytest
import torch
from primacy.testing import check_backbone

from primacy_mamba import MambaBackbone
from primacy_mamba.compiled_conv import compiled_conv_silu, conv_reference

NAMES = ["u", "x", "weight", "bias"]


def conv_inputs(batch: int, length: int, channels: int, taps: int, dtype: torch.dtype = torch.float64,
                bias: bool = True) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """in_proj's output (B, T, 2 E), whose first half the convolution reads, the weight (E, 1, K) and bias (E,) of
    nn.Conv1d(E, E, K, groups=E), requiring gradients; a few pre-activations far from 0 (the SiLU's exp clamps)."""
    both = torch.randn(batch, length, 2 * channels, dtype=dtype)
    both[:, ::5, 0] = 200.0
    both[:, 1::5, 0] = -200.0
    weight = torch.randn(channels, 1, taps, dtype=dtype)
    tensors = [both, weight] + ([torch.randn(channels, dtype=dtype)] if bias else [])
    for tensor in tensors:
        tensor.requires_grad_()
    return both, weight, tensors[2] if bias else None


def outputs_and_gradients(fn, both, weight, bias) -> tuple[torch.Tensor, ...]:
    out = fn(both.chunk(2, dim=-1)[0], weight, bias)
    weights = torch.randn(out.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(1)).to(out.dtype)
    inputs = [both, weight] + ([bias] if bias is not None else [])
    return (out, *torch.autograd.grad((out * weights).sum(), inputs))


@pytest.mark.parametrize("length,channels,taps,bias", [(1, 5, 4, True), (3, 13, 4, True), (37, 21, 4, True),
                                                       (9, 8, 1, True), (7, 3, 3, False)])
def test_it_equals_the_convolution_and_silu_with_every_gradient(length, channels, taps, bias):
    """float64 to 1e-10; float32 to 1e-5 of each result's scale (its own exp)."""
    torch.manual_seed(0)
    inputs = conv_inputs(3, length, channels, taps, bias=bias)
    fast, slow = outputs_and_gradients(compiled_conv_silu, *inputs), outputs_and_gradients(conv_reference, *inputs)
    for name, one, other in zip(NAMES, fast, slow):
        torch.testing.assert_close(one, other, rtol=1e-10, atol=1e-10, msg=name)
    single = [x.detach().float().requires_grad_() if x is not None else None for x in inputs]
    for name, one, other in zip(NAMES, outputs_and_gradients(compiled_conv_silu, *single), slow):
        assert one.dtype == torch.float32 and torch.isfinite(one).all(), name
        torch.testing.assert_close(one.double(), other, rtol=1e-5, atol=1e-5 * other.abs().max().item(), msg=name)


def test_a_view_gives_the_bits_of_its_contiguous_copy():
    torch.manual_seed(0)
    both, weight, bias = (x.detach().float() for x in conv_inputs(2, 9, 13, 4))
    view = both.chunk(2, dim=-1)[0]
    assert torch.equal(compiled_conv_silu(view, weight, bias), compiled_conv_silu(view.contiguous(), weight, bias))


def test_its_backward_is_its_forwards_derivative():
    torch.manual_seed(0)
    both, weight, bias = conv_inputs(2, 6, 3, 4)
    with torch.no_grad():
        both[:, :, 0] = torch.randn(2, 6, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda x, w, b: compiled_conv_silu(x.chunk(2, dim=-1)[0], w, b),
                                    (both, weight, bias))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_it_gives_the_same_bits_on_any_number_of_threads(dtype):
    torch.manual_seed(0)
    inputs = conv_inputs(5, 11, 13, 4, dtype=dtype)
    threads = torch.get_num_threads()
    try:
        results = []
        for count in (1, 2, 3):
            torch.set_num_threads(count)
            results.append(outputs_and_gradients(compiled_conv_silu, *inputs))
    finally:
        torch.set_num_threads(threads)
    for other in results[1:]:
        for name, one, many in zip(NAMES, results[0], other):
            assert torch.equal(one, many), name


def test_contract():
    check_backbone(MambaBackbone, scan="compiled_conv")
