"""slstm_loop='compiled_gates': the compiled sLSTM loop forming each head's gate pre-activations from its own units
(primacy_xlstm.compiled.compiled_gates_sequence) equals the dense gate product followed by the compiled loop, and
xlstm's sLSTM layer, in float64 with every gradient; passes gradcheck; gives the same bits on any number of threads;
rounds within a stated bound in float32; refuses inputs it cannot take in one line (its checkpoints and refusals
without a compiler: test_paths)."""

import pytest
import torch
from primacy.errors import UsageError
from test_fast_components import OURS, assert_same_map, shaken, with_classes
from torch.nn.functional import linear
from xlstm import sLSTMLayerConfig
from xlstm.blocks.slstm.layer import sLSTMLayer

from primacy_xlstm.compiled import compiled_gates_sequence, compiled_sequence
from primacy_xlstm.slstm import FastsLSTMLayer, gate_matrix


def inputs(length=6, batch=3, heads=2, dh=3, dtype=torch.float64, scale=1.0, seed=0):
    """rows (T, B, 2D) = (x_conv | x), w_in (NH, 4dh, dh), bias (4D, head-major), R (NH, 4dh, dh), requiring grads."""
    generator = torch.Generator().manual_seed(seed)
    width = heads * dh
    rows = scale * torch.randn(length, batch, 2 * width, dtype=dtype, generator=generator)
    w_in = torch.randn(heads, 4 * dh, dh, dtype=dtype, generator=generator) / dh**0.5
    bias = torch.randn(4 * width, dtype=dtype, generator=generator)
    R = torch.randn(heads, 4 * dh, dh, dtype=dtype, generator=generator) / dh**0.5
    return [x.requires_grad_() for x in (rows, w_in, bias, R)]


def dense(rows, w_in, bias, R):
    """The previous path: the four gates' blocks as one dense (4D, 2D) matrix, then the compiled loop."""
    length, batch, _ = rows.shape
    heads, _, dh = R.shape
    weights = list(w_in.view(heads, 4, dh, dh).unbind(1))
    xb = linear(rows, gate_matrix(weights), bias)
    return compiled_sequence(xb, rows.new_zeros(4, batch, heads * dh), R, True)


def outputs_and_gradients(sequence, *args):
    out = sequence(*args)
    weights = torch.linspace(-1.0, 2.0, out.numel(), dtype=out.dtype).view_as(out)
    return (out, *torch.autograd.grad((weights * out).sum(), args))


@pytest.mark.parametrize("heads,dh", [(2, 3), (3, 5), (4, 16), (1, 8), (1, 70)])
@pytest.mark.parametrize("scale", [1.0, 20.0])
def test_the_gates_path_equals_the_dense_product_and_the_compiled_loop_in_float64(heads, dh, scale):
    """Output and the gradients of rows, w_in, bias and R; widths compiled as constants (8, 16), any other (3, 5) and
    one beyond the kernel's arrays (70); scale 20 saturates the gates."""
    args = inputs(heads=heads, dh=dh, scale=scale, length=7 if dh < 70 else 3)
    ours = outputs_and_gradients(compiled_gates_sequence, *args)
    reference = outputs_and_gradients(dense, *args)
    for mine, expected in zip(ours, reference):
        assert expected.abs().max() > 0
        torch.testing.assert_close(mine, expected, rtol=0, atol=1e-10 * max(1.0, expected.abs().max().item()))


def test_gradcheck():
    args = inputs(length=4, batch=2, heads=2, dh=2)
    assert torch.autograd.gradcheck(compiled_gates_sequence, args)


def test_the_same_bits_on_any_number_of_threads():
    threads = torch.get_num_threads()
    results = []
    try:
        for count in (1, 2, 3):
            torch.set_num_threads(count)
            results.append(outputs_and_gradients(compiled_gates_sequence, *inputs(batch=5, heads=2, dh=16,
                                                                                 dtype=torch.float32, seed=1)))
    finally:
        torch.set_num_threads(threads)
    for other in results[1:]:
        assert all(torch.equal(one, many) for one, many in zip(results[0], other))


def test_float32_is_within_its_bound_of_float64():
    """Measured (seeds 0-2): output and every gradient within 4.8e-7 of its largest entry, as the dense path's."""
    args = inputs(length=64, batch=8, heads=4, dh=16, dtype=torch.float32)
    ours = outputs_and_gradients(compiled_gates_sequence, *args)
    exact = outputs_and_gradients(dense, *(x.detach().double().requires_grad_() for x in args))
    for mine, expected in zip(ours, exact):
        torch.testing.assert_close(mine.double(), expected, rtol=0, atol=2e-6 * expected.abs().max().item())


@pytest.mark.parametrize("kernel", [4, 0], ids=["convolution", "no-convolution"])
def test_the_slstm_layer_on_the_gates_path_is_xlstms_in_float64(kernel):
    config = sLSTMLayerConfig(embedding_dim=12, num_heads=3, backend="vanilla", conv1d_kernel_size=kernel)
    theirs = shaken(sLSTMLayer(config))
    ours = with_classes(theirs, OURS)
    ours.slstm_cell.slstm_loop = "compiled_gates"
    x = torch.randn(3, 9, 12, dtype=torch.float64)
    assert type(ours) is FastsLSTMLayer and ours._fast_path(x)
    assert_same_map(ours, theirs, x)


def test_inputs_it_cannot_take_are_refused_in_one_line():
    with pytest.raises(UsageError, match=r"^slstm_loop='compiled_gates' runs on float32 or float64 CPU tensors of "
                                         r"one dtype, not torch.bfloat16 on cpu: use slstm_loop='pytorch'$"):
        compiled_gates_sequence(*(x.detach().bfloat16() for x in inputs()))
    with pytest.raises(UsageError, match=r"^slstm_loop='compiled_gates' is a CPU loop of the PyTorch cell and the "
                                         r"CUDA cell was built"):
        from primacy_xlstm.backends import resolve_loop

        resolve_loop("compiled_gates", "cuda")
