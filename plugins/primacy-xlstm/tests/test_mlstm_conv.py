"""mlstm_loop='compiled_conv': compiled_qkv with the mLSTM layer's causal convolution and its SiLU compiled too
(primacy_xlstm.mlstm_compiled.conv_silu_compiled) equals PyTorch's convolution and SiLU and xlstm's mLSTM layer in
float64 with every gradient (the backbone on it: test_paths); passes gradcheck; gives the same bits on any number of
threads; rounds within a stated bound in float32; refuses bad values and inputs it cannot take in one line (auto's
choice is compiled_layer, which compiles the convolution too: test_mlstm_layer; checkpoints and refusals without a
compiler: test_paths)."""

import pytest
import torch
import torch.nn.functional as F
from primacy.backbones.conv import causal_depthwise
from primacy.errors import UsageError
from test_fast_components import OURS, assert_same_map, shaken, with_classes
from test_mlstm_compiled import small
from xlstm import mLSTMLayerConfig
from xlstm.blocks.mlstm.layer import mLSTMLayer

from primacy_xlstm import XLSTMBackbone
from primacy_xlstm.mlstm import FastmLSTMLayer
from primacy_xlstm.mlstm_compiled import conv_silu_compiled


def reference(x, weight, bias):
    """PyTorch's path: the convolution (xlstm's, padded on the left: causal_depthwise), then SiLU."""
    return F.silu(causal_depthwise(x, weight, bias)[0])


def inputs(batch=3, length=9, channels=16, kernel=4, dtype=torch.float64, seed=0, bias=True):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, length, channels, dtype=dtype, generator=generator)
    weight = torch.randn(channels, 1, kernel, dtype=dtype, generator=generator) / kernel**0.5
    b = torch.randn(channels, dtype=dtype, generator=generator) if bias else None
    return [t.requires_grad_() if t is not None else None for t in (x, weight, b)]


def outputs_and_gradients(function, args):
    out = function(*args)
    weights = torch.linspace(-1.0, 2.0, out.numel(), dtype=out.dtype).view_as(out)
    given = [a for a in args if a is not None]
    return (out, *torch.autograd.grad((weights * out).sum(), given))


@pytest.mark.parametrize("length", [1, 2, 3, 5, 40])
@pytest.mark.parametrize("kernel", [2, 4])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
def test_it_equals_the_convolution_and_silu_in_float64(length, kernel, bias):
    """Output and the gradients of x, the weight and the bias within 1e-10 (measured ≤ 1.1e-14); lengths shorter
    than the kernel included."""
    args = inputs(length=length, kernel=kernel, bias=bias)
    for mine, expected in zip(outputs_and_gradients(conv_silu_compiled, args),
                              outputs_and_gradients(reference, args)):
        assert expected.abs().max() > 0
        torch.testing.assert_close(mine, expected, rtol=0, atol=1e-10 * max(1.0, expected.abs().max().item()))


def test_gradcheck():
    args = inputs(batch=2, length=5, channels=3, kernel=3)
    assert torch.autograd.gradcheck(conv_silu_compiled, args)


def test_the_same_bits_on_any_number_of_threads():
    threads = torch.get_num_threads()
    results = []
    try:
        for count in (1, 2, 3):
            torch.set_num_threads(count)
            results.append(outputs_and_gradients(conv_silu_compiled, inputs(batch=5, dtype=torch.float32, seed=1)))
    finally:
        torch.set_num_threads(threads)
    for other in results[1:]:
        assert all(torch.equal(one, many) for one, many in zip(results[0], other))


def test_float32_is_within_its_bound_of_float64():
    """Measured (B 8, T 64, 128 channels, K 4, seeds 0-2): within 2.1e-7 of the largest entry of the output and of
    each gradient (PyTorch's float32 path: 1.9e-7); asserted 2e-6."""
    args = inputs(batch=8, length=64, channels=128, dtype=torch.float32)
    ours = outputs_and_gradients(conv_silu_compiled, args)
    exact = outputs_and_gradients(reference, [a.detach().double().requires_grad_() for a in args])
    for mine, expected in zip(ours, exact):
        torch.testing.assert_close(mine.double(), expected, rtol=0, atol=2e-6 * expected.abs().max().item())


def test_the_mlstm_layer_on_it_is_xlstms_in_float64():
    theirs = shaken(mLSTMLayer(mLSTMLayerConfig(embedding_dim=16, num_heads=4, context_length=9)))
    ours = with_classes(theirs, OURS)
    ours.mlstm_cell.mlstm_loop = "compiled_conv"
    x = torch.randn(3, 9, 16, dtype=torch.float64)
    assert type(ours) is FastmLSTMLayer and ours._fast_path(x) and ours._in_the_kernel(x)
    assert ours._conv_in_the_kernel(x)
    assert_same_map(ours, theirs, x)


def test_bad_values_and_inputs_it_cannot_take_are_refused_in_one_line():
    with pytest.raises(UsageError, match=r"^mlstm_loop='compiled_convolution' is unknown: choose one of 'auto', "
                                         r"'pytorch', 'compiled', 'compiled_qkv', 'compiled_conv', 'compiled_layer'$"):
        small(mlstm_loop="compiled_convolution")
    with pytest.raises(UsageError, match=r"^mlstm_loop='compiled_conv' runs on float32 or float64 CPU tensors of one "
                                         r"dtype, not torch.bfloat16 on cpu: use mlstm_loop='pytorch'$"):
        conv_silu_compiled(*(a.detach().bfloat16() for a in inputs()))
    model = XLSTMBackbone(d_model=8, blocks=["mlstm"], mlstm_heads=2, mlstm_loop="compiled_conv").bfloat16()
    with pytest.raises(UsageError, match=r"^mlstm_loop='compiled_conv' runs on float32 or float64"):
        model(torch.randn(2, 5, 8, dtype=torch.bfloat16))
