"""mlstm_loop='compiled_qkv': the compiled mLSTM cell forming q, k, v itself from the layer's rows
(primacy_xlstm.mlstm_compiled.mlstm_layer_compiled) equals the projections per head followed by the compiled cell,
and xlstm's mLSTM layer, in float64 with every gradient; passes gradcheck; gives the same bits on any number of
threads; rounds within a stated bound in float32; refuses inputs it cannot take in one line (its checkpoints and
refusals without a compiler: test_paths)."""

import pytest
import torch
from primacy.errors import UsageError
from test_fast_components import OURS, assert_same_map, shaken, with_classes
from xlstm import mLSTMLayerConfig
from xlstm.blocks.mlstm.layer import mLSTMLayer

from primacy_xlstm import XLSTMBackbone
from primacy_xlstm.mlstm import FastmLSTMLayer, head_blocks, per_head
from primacy_xlstm.mlstm_compiled import mlstm_compiled, mlstm_layer_compiled


def inputs(batch=3, length=7, heads=2, d=8, bs=4, dtype=torch.float64, scale=1.0, seed=0):
    """xc, xm (B, T, E), wq, wk, wv (E / bs, bs, bs), gates (B, T, 2H), all requiring gradients."""
    generator = torch.Generator().manual_seed(seed)
    width = heads * d
    xc, xm = (torch.randn(batch, length, width, dtype=dtype, generator=generator) for _ in range(2))
    ws = [torch.randn(width // bs, bs, bs, dtype=dtype, generator=generator) / bs**0.5 for _ in range(3)]
    gates = scale * torch.randn(batch, length, 2 * heads, dtype=dtype, generator=generator)
    return [x.requires_grad_() for x in (xc, xm, *ws, gates)]


def per_head_reference(xc, xm, wq, wk, wv, gates, heads):
    """The path of mlstm_loop='compiled': q, k, v projected per head, then the compiled cell; h̃ as (B, T, E)."""
    batch, length, width = xc.shape
    conv, mlstm = per_head(xc, heads), per_head(xm, heads)
    q, k, v = conv @ head_blocks(wq, heads), conv @ head_blocks(wk, heads), mlstm @ head_blocks(wv, heads)
    gates = gates.transpose(-1, -2)[..., None]  # B 2H T 1
    h = mlstm_compiled(q, k, v, gates[:, :heads], gates[:, heads:])  # B H T d
    return h.transpose(1, 2).reshape(batch, length, width)


def outputs_and_gradients(function, args, heads):
    out = function(*args, heads)
    weights = torch.linspace(-1.0, 2.0, out.numel(), dtype=out.dtype).view_as(out)
    return (out, *torch.autograd.grad((weights * out).sum(), args))


@pytest.mark.parametrize("heads,d,bs", [(2, 8, 4), (4, 32, 4), (1, 6, 2), (3, 4, 4)])
@pytest.mark.parametrize("scale", [1.0, 30.0])
def test_it_equals_the_projections_per_head_and_the_compiled_cell_in_float64(heads, d, bs, scale):
    """Output and the gradients of both inputs, the three projections' weights and the gates; scale 30 saturates the
    gates."""
    args = inputs(heads=heads, d=d, bs=bs, scale=scale)
    ours = outputs_and_gradients(mlstm_layer_compiled, args, heads)
    reference = outputs_and_gradients(per_head_reference, args, heads)
    for mine, expected in zip(ours, reference):
        assert expected.abs().max() > 0
        torch.testing.assert_close(mine, expected, rtol=0, atol=1e-10 * max(1.0, expected.abs().max().item()))


def test_gradcheck():
    args = inputs(batch=2, length=4, heads=2, d=4, bs=2)
    assert torch.autograd.gradcheck(lambda *a: mlstm_layer_compiled(*a, 2), args)


@pytest.mark.parametrize("bs", [4, 2])
def test_the_same_bits_on_any_number_of_threads(bs):
    threads = torch.get_num_threads()
    results = []
    try:
        for count in (1, 2, 3):
            torch.set_num_threads(count)
            args = inputs(batch=5, heads=2, d=16, bs=bs, dtype=torch.float32, seed=1)
            results.append(outputs_and_gradients(mlstm_layer_compiled, args, 2))
    finally:
        torch.set_num_threads(threads)
    for other in results[1:]:
        assert all(torch.equal(one, many) for one, many in zip(results[0], other))


def test_float32_is_within_its_bound_of_float64():
    """Measured (seeds 0-2, the atlas's sizes per head): within 1.2e-6 of the largest entry of the output and of each
    gradient; the per-head path of mlstm_loop='compiled' within 9.7e-7."""
    args = inputs(batch=8, length=64, heads=4, d=32, dtype=torch.float32)
    ours = outputs_and_gradients(mlstm_layer_compiled, args, 4)
    exact = outputs_and_gradients(per_head_reference, [x.detach().double().requires_grad_() for x in args], 4)
    for mine, expected in zip(ours, exact):
        torch.testing.assert_close(mine.double(), expected, rtol=0, atol=5e-6 * expected.abs().max().item())


def test_the_mlstm_layer_on_it_is_xlstms_in_float64():
    theirs = shaken(mLSTMLayer(mLSTMLayerConfig(embedding_dim=16, num_heads=4, context_length=9)))
    ours = with_classes(theirs, OURS)
    ours.mlstm_cell.mlstm_loop = "compiled_qkv"
    x = torch.randn(3, 9, 16, dtype=torch.float64)
    assert type(ours) is FastmLSTMLayer and ours._fast_path(x) and ours._in_the_kernel(x)
    assert_same_map(ours, theirs, x)


def test_inputs_it_cannot_take_are_refused_in_one_line():
    with pytest.raises(UsageError, match=r"^mlstm_loop='compiled_qkv' runs on float32 or float64 CPU tensors of one "
                                         r"dtype, not torch.bfloat16 on cpu: use mlstm_loop='pytorch'$"):
        mlstm_layer_compiled(*(x.detach().bfloat16() for x in inputs()), 2)
    model = XLSTMBackbone(d_model=8, blocks=["mlstm"], mlstm_heads=2, mlstm_loop="compiled_qkv").bfloat16()
    with pytest.raises(UsageError, match=r"^mlstm_loop='compiled_qkv' runs on float32 or float64"):
        model(torch.randn(2, 5, 8, dtype=torch.bfloat16))
