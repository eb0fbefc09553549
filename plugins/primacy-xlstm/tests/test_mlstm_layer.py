"""mlstm_loop='compiled_layer': compiled_conv with the mLSTM layer's output side (the cell's per-head norm, the
learnable skip and the SiLU gate) in the cell's kernel (primacy_xlstm.mlstm_compiled.mlstm_tail_compiled) equals
mlstm_layer_compiled followed by PyTorch's output side and xlstm's mLSTM layer in float64 with every gradient (the
backbone on it: test_paths); passes gradcheck; gives the same bits on any number of threads; rounds within a stated
bound in float32; leaves a hooked norm (ablation) to PyTorch; is auto's choice where the compiler works (since
primacy-xlstm 0.5) and recorded; refuses inputs it cannot take in one line (checkpoints and refusals without a
compiler: test_paths)."""

import pytest
import torch
import torch.nn.functional as F
from primacy.errors import UsageError
from test_fast_components import OURS, assert_same_map, shaken, with_classes
from test_mlstm_compiled import cells, small
from test_mlstm_qkv import inputs as qkv_inputs
from xlstm import mLSTMLayerConfig
from xlstm.blocks.mlstm.layer import mLSTMLayer

from primacy_xlstm import XLSTMBackbone
from primacy_xlstm.mlstm import FastmLSTMLayer
from primacy_xlstm.mlstm_compiled import mlstm_layer_compiled, mlstm_tail_compiled

LN_EPS = 1e-5


def inputs(batch=3, length=7, heads=2, d=8, bs=4, dtype=torch.float64, scale=1.0, seed=0):
    """xc, xm, wq, wk, wv, gates (test_mlstm_qkv's), then z (B, T, E), skip and wln (E), all requiring gradients."""
    args = qkv_inputs(batch, length, heads, d, bs, dtype, scale, seed)
    generator = torch.Generator().manual_seed(seed + 1)
    width = heads * d
    z = torch.randn(batch, length, width, dtype=dtype, generator=generator)
    skip, wln = (1 + 0.3 * torch.randn(width, dtype=dtype, generator=generator) for _ in range(2))
    return args + [x.requires_grad_() for x in (z, skip, wln)]


def reference(xc, xm, wq, wk, wv, gates, heads, z, skip, wln, ln_eps):
    """compiled_conv's path: h̃ from the compiled layer, then PyTorch's per-head layer norm, skip and SiLU gate."""
    batch, length, width = xc.shape
    h = mlstm_layer_compiled(xc, xm, wq, wk, wv, gates, heads).view(batch, length, heads, -1)
    normed = F.layer_norm(h, (width // heads,), eps=ln_eps) * wln.view(heads, -1)
    return (normed.reshape(batch, length, width) + skip * xc) * F.silu(z)


def outputs_and_gradients(function, args, heads):
    out = function(*args[:6], heads, *args[6:], LN_EPS)
    weights = torch.linspace(-1.0, 2.0, out.numel(), dtype=out.dtype).view_as(out)
    return (out, *torch.autograd.grad((weights * out).sum(), args))


@pytest.mark.parametrize("heads,d,bs", [(2, 8, 4), (4, 32, 4), (1, 6, 2), (3, 4, 4)])
@pytest.mark.parametrize("scale", [1.0, 30.0])
def test_it_equals_the_compiled_layer_and_pytorchs_output_side_in_float64(heads, d, bs, scale):
    """Output and the gradients of both inputs, the three projections' weights, the gates, z, the skip and the norm's
    weight (measured ≤ 2e-14 of scale); scale 30 saturates the gates."""
    args = inputs(heads=heads, d=d, bs=bs, scale=scale)
    ours = outputs_and_gradients(mlstm_tail_compiled, args, heads)
    expected = outputs_and_gradients(reference, args, heads)
    for mine, theirs in zip(ours, expected):
        assert theirs.abs().max() > 0
        torch.testing.assert_close(mine, theirs, rtol=0, atol=1e-10 * max(1.0, theirs.abs().max().item()))


def test_gradcheck():
    args = inputs(batch=2, length=4, heads=2, d=4, bs=2)
    assert torch.autograd.gradcheck(lambda *a: mlstm_tail_compiled(*a[:6], 2, *a[6:], LN_EPS), args)


def test_the_same_bits_on_any_number_of_threads():
    threads = torch.get_num_threads()
    results = []
    try:
        for count in (1, 2, 3):
            torch.set_num_threads(count)
            args = inputs(batch=5, heads=2, d=16, dtype=torch.float32, seed=1)
            results.append(outputs_and_gradients(mlstm_tail_compiled, args, 2))
    finally:
        torch.set_num_threads(threads)
    for other in results[1:]:
        assert all(torch.equal(one, many) for one, many in zip(results[0], other))


def test_float32_is_within_its_bound_of_float64():
    """Measured (seeds 0-2, the atlas's sizes per head, B 8, T 64): the output within 4.2e-6 of its largest entry,
    each gradient within 4.2e-5 of its own (xc's and wq's; z's 4.5e-6, wln's 1.4e-6), as compiled_conv's path
    (PyTorch's output side) to two digits; asserted 1e-4."""
    args = inputs(batch=8, length=64, heads=4, d=32, dtype=torch.float32)
    ours = outputs_and_gradients(mlstm_tail_compiled, args, 4)
    exact = outputs_and_gradients(reference, [x.detach().double().requires_grad_() for x in args], 4)
    for mine, expected in zip(ours, exact):
        torch.testing.assert_close(mine.double(), expected, rtol=0, atol=1e-4 * expected.abs().max().item())


def test_the_mlstm_layer_on_it_is_xlstms_in_float64():
    theirs = shaken(mLSTMLayer(mLSTMLayerConfig(embedding_dim=16, num_heads=4, context_length=9)))
    ours = with_classes(theirs, OURS)
    ours.mlstm_cell.mlstm_loop = "compiled_layer"
    # a fixed input: the per-head norm of a row of small variance multiplies rounding by its 1 / σ, so some random
    # inputs take every path (compiled_conv's too) to a few 1e-10 of xlstm's largest gradient (measured 2e-13 to 5e-12
    # of 70-150 on eight seeds, both paths alike)
    x = torch.randn(3, 9, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(100))
    assert type(ours) is FastmLSTMLayer and ours._tail_in_the_kernel(x) and ours._conv_in_the_kernel(x)
    assert_same_map(ours, theirs, x)


def test_ablation_hooks_the_norm_so_the_output_side_runs_in_pytorch():
    """ablate() hooks each cell's outnorm; the ablated model on compiled_layer equals it on compiled_conv."""
    models = [small(mlstm_loop=loop) for loop in ("compiled_layer", "compiled_conv")]
    x = torch.randn(2, 6, 8)
    outputs = []
    for model in models:
        with model.ablate([(0, 1)]):
            layer = model.stack.blocks[0].xlstm
            assert not layer._tail_in_the_kernel(x)
            outputs.append(model(x))
    torch.testing.assert_close(outputs[0], outputs[1], rtol=0, atol=1e-6)


def test_auto_is_compiled_layer_said_once_and_recorded(caplog):
    """compiled_layer since primacy-xlstm 0.5 (the checkpoints of the earlier defaults resume on theirs: test_paths)."""
    with caplog.at_level("INFO", logger="primacy_xlstm"):
        model = small()
    assert cells(model) == {"compiled_layer"}
    assert model.state_dict()["_extra_state"]["mlstm_loop"] == "compiled_layer"
    assert ("XLSTMBackbone runs the compiled_layer mLSTM cell (mlstm_loop='auto' and the machine's C++ compiler "
            "built the compiled cell)") in caplog.text


def test_inputs_it_cannot_take_are_refused_in_one_line():
    with pytest.raises(UsageError, match=r"^mlstm_loop='compiled_layer' runs on float32 or float64 CPU tensors of "
                                         r"one dtype, not torch.bfloat16 on cpu: use mlstm_loop='pytorch'$"):
        args = [x.detach().bfloat16() for x in inputs()]
        mlstm_tail_compiled(*args[:6], 2, *args[6:], LN_EPS)
    model = XLSTMBackbone(d_model=8, blocks=["mlstm"], mlstm_heads=2, mlstm_loop="compiled_layer").bfloat16()
    with pytest.raises(UsageError, match=r"^mlstm_loop='compiled_(layer|conv)' runs on float32 or float64"):
        model(torch.randn(2, 5, 8, dtype=torch.bfloat16))
