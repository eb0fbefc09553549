"""slstm_loop='compiled_block': compiled_conv with the sLSTM layer's output norm and the block's feed-forward GELU gate
compiled too (primacy_xlstm.block_compiled). Its kernels equal PyTorch's maps and the layer and feed-forward layer
equal xlstm's in float64 with every gradient (the backbone on it: test_paths); float32 stays within a
stated bound of float64; without the block's library auto is the PyTorch loop and compiled_block is refused in one
line (auto's choice where the compiler works since primacy-xlstm 0.6: test_slstm_compiled; checkpoints: test_paths)."""

import pytest
import torch
import torch.nn.functional as F
from primacy.errors import UsageError
from test_fast_components import OURS, assert_same_map, shaken, with_classes
from test_slstm_compiled import loops, small
from xlstm import FeedForwardConfig, sLSTMLayerConfig
from xlstm.blocks.slstm.layer import sLSTMLayer
from xlstm.components.feedforward import GatedFeedForward

import primacy_xlstm.block_compiled
import primacy_xlstm.compiled
import primacy_xlstm.mlstm_compiled
from primacy_xlstm import XLSTMBackbone
from primacy_xlstm.block_compiled import gelu_gate_compiled, head_norm_compiled
from primacy_xlstm.components import FastGatedFeedForward
from primacy_xlstm.slstm import FastsLSTMLayer


def gradients(function, *tensors):
    out = function(*tensors)
    weights = torch.linspace(-1.0, 2.0, out.numel(), dtype=out.dtype).view_as(out)
    return (out, *torch.autograd.grad((weights * out).sum(), tensors))


def gate_reference(up):
    half = up.shape[-1] // 2
    return F.gelu(up[..., :half]) * up[..., half:]


def norm_reference(y, weight, heads, eps):
    length, batch, width = y.shape
    out = F.layer_norm(y.view(length, batch, heads, -1), (width // heads,), eps=eps) * weight.view(heads, -1)
    return out.reshape(length, batch, width).transpose(0, 1)  # B T H


def test_the_kernels_are_pytorchs_maps_in_float64():
    """Output and every gradient within 1e-10; GELU's gate over a wide range (erf saturates), the norm with rows of
    unequal scale."""
    generator = torch.Generator().manual_seed(0)
    up = (4 * torch.randn(3, 7, 2 * 13, dtype=torch.float64, generator=generator)).requires_grad_()
    for mine, expected in zip(gradients(gelu_gate_compiled, up), gradients(gate_reference, up)):
        torch.testing.assert_close(mine, expected, rtol=0, atol=1e-10)
    y = (torch.randn(9, 3, 12, dtype=torch.float64, generator=generator) * torch.arange(1, 13)).requires_grad_()
    weight = torch.randn(12, dtype=torch.float64, generator=generator, requires_grad=True)
    ours = gradients(lambda a, b: head_norm_compiled(a, b, 3, 1e-5), y, weight)
    for mine, expected in zip(ours, gradients(lambda a, b: norm_reference(a, b, 3, 1e-5), y, weight)):
        torch.testing.assert_close(mine, expected, rtol=0, atol=1e-10)
    assert torch.autograd.gradcheck(gelu_gate_compiled, (up[:2, :3].detach().requires_grad_(),))
    assert torch.autograd.gradcheck(lambda a, b: head_norm_compiled(a, b, 3, 1e-5), (y[:3, :2], weight))


def test_float32_kernels_are_within_their_bound():
    """Against float64 on the same inputs: the GELU gate (erf by Abramowitz and Stegun's formula) within 1e-6 of the
    largest entry of its output and gradient, the norm within 1e-6."""
    generator = torch.Generator().manual_seed(1)
    up = 3 * torch.randn(8, 16, 2 * 40, dtype=torch.float64, generator=generator)
    y = torch.randn(16, 8, 32, dtype=torch.float64, generator=generator)
    weight = 1 + 0.3 * torch.randn(32, dtype=torch.float64, generator=generator)
    cases = [(gelu_gate_compiled, (up,)), (lambda a, b: head_norm_compiled(a, b, 4, 1e-5), (y, weight))]
    for function, tensors in cases:
        exact = gradients(function, *(t.clone().requires_grad_() for t in tensors))
        single = gradients(function, *(t.float().requires_grad_() for t in tensors))
        for mine, expected in zip(single, exact):
            assert (mine.double() - expected).abs().max() <= 1e-6 * expected.abs().max()


def test_a_vector_lane_rounds_as_the_scalar_code():
    """float32 units 16 at a time and the rest one by one, the same operations in the same order: the same bits."""
    generator = torch.Generator().manual_seed(3)
    up = (3 * torch.randn(2, 5, 2 * 33, generator=generator)).requires_grad_()
    grad = torch.randn(2, 5, 33, generator=generator)
    out = gelu_gate_compiled(up)
    (g_all,) = torch.autograd.grad(out, up, grad)
    for unit in (0, 17, 32):  # in the first and second vector, and the remainder
        alone = up.detach()[..., [unit, 33 + unit]].requires_grad_()  # one unit: the scalar code
        one = gelu_gate_compiled(alone)
        (g_alone,) = torch.autograd.grad(one, alone, grad[..., unit:unit + 1])
        assert torch.equal(one[..., 0], out[..., unit])
        assert torch.equal(g_alone, g_all[..., [unit, 33 + unit]])


@pytest.mark.parametrize("kernel", [4, 0], ids=["convolution", "no-convolution"])
def test_the_slstm_layer_on_it_is_xlstms_in_float64(kernel):
    config = sLSTMLayerConfig(embedding_dim=12, num_heads=3, backend="vanilla", conv1d_kernel_size=kernel)
    theirs = shaken(sLSTMLayer(config))
    ours = with_classes(theirs, OURS)
    ours.slstm_cell.slstm_loop = "compiled_block"
    x = torch.randn(3, 9, 12, dtype=torch.float64)
    assert type(ours) is FastsLSTMLayer and ours._fast_path(x) and ours._norm_compiled()
    assert not kernel or ours._conv_compiled()
    assert_same_map(ours, theirs, x)


def test_the_feed_forward_layer_on_it_is_xlstms_in_float64():
    theirs = shaken(GatedFeedForward(FeedForwardConfig(embedding_dim=12, proj_factor=1.3, act_fn="gelu")))
    ours = with_classes(theirs, OURS)
    ours.gelu_compiled = True
    assert type(ours) is FastGatedFeedForward
    assert_same_map(ours, theirs, torch.randn(3, 9, 12, dtype=torch.float64))


def test_the_same_bits_on_any_number_of_threads():
    threads = torch.get_num_threads()
    results = []
    try:
        for count in (1, 2, 3):
            torch.set_num_threads(count)
            generator = torch.Generator().manual_seed(2)
            up = torch.randn(5, 6, 2 * 9, generator=generator, requires_grad=True)
            y = torch.randn(6, 5, 8, generator=generator, requires_grad=True)
            weight = torch.randn(8, generator=generator, requires_grad=True)
            results.append([*gradients(gelu_gate_compiled, up),
                            *gradients(lambda a, b: head_norm_compiled(a, b, 2, 1e-5), y, weight)])
    finally:
        torch.set_num_threads(threads)
    for other in results[1:]:
        assert all(torch.equal(a, b) for a, b in zip(results[0], other))


@pytest.fixture
def no_block_library(tmp_path, monkeypatch):
    """An empty kernel cache and no compiler for the block's library alone (the loops' libraries stay loaded)."""
    monkeypatch.setenv("PRIMACY_KERNEL_CACHE", str(tmp_path / "kernels"))
    monkeypatch.setenv("CXX", "no-such-c++")
    primacy_xlstm.block_compiled._library.cache_clear()
    yield
    primacy_xlstm.block_compiled._library.cache_clear()


def test_without_the_block_library_alone_compiled_block_and_its_checkpoints_are_refused_in_one_line(no_block_library):
    with pytest.raises(UsageError, match=r"^slstm_loop='compiled_block' needs a C\+\+ compiler and "
                                         r"'no-such-c\+\+' \(CXX\) is not one on PATH: install one \(g\+\+ or "
                                         r"clang\+\+\) or use slstm_loop='pytorch'$"):
        small(slstm_loop="compiled_block")
    state = small(slstm_loop="pytorch").state_dict()
    state["_extra_state"] = {"slstm_loop": "compiled_block"}
    with pytest.raises(UsageError, match=r"^this checkpoint was trained with slstm_loop='compiled_block', which "
                                         r"cannot run here"):
        small().load_state_dict(state)


def test_inputs_it_cannot_take_are_refused_in_one_line():
    model = XLSTMBackbone(d_model=8, blocks=["slstm"], slstm_heads=2, backend="vanilla",
                          slstm_loop="compiled_block").bfloat16()
    with pytest.raises(UsageError, match=r"^slstm_loop='compiled_block' runs on float32 or float64 CPU tensors of "
                                         r"one dtype, not torch.bfloat16 on cpu: use slstm_loop='pytorch'$"):
        model(torch.randn(2, 5, 8, dtype=torch.bfloat16))


def test_auto_without_the_block_library_is_the_pytorch_loop(no_block_library, caplog):
    with caplog.at_level("INFO", logger="primacy_xlstm"):
        model = small()
    assert loops(model) == {"pytorch"}
    assert "slstm_loop='compiled_block' needs a C++ compiler" in caplog.text


def test_kept_memory_is_reused_only_when_nothing_holds_it():
    """The GELU gate's gradient is written in memory kept between steps; a gradient someone still holds (a hook kept
    it) is never overwritten by the next backward, which takes other memory; the kept tensors stay few, of the last
    shape asked for."""
    up = torch.randn(3, 4, 2 * 8, requires_grad=True)
    grad = torch.randn(3, 4, 8)
    held = []

    def backward_once(hook=None):
        hidden = up * 1.0  # a non-leaf, as the up-projection's output is
        if hook:
            hidden.register_hook(hook)
        gelu_gate_compiled(hidden).backward(grad)

    backward_once(lambda g: held.append(g.data_ptr()))
    backward_once(lambda g: held.append(g.data_ptr()))
    assert held[0] == held[1]  # nothing held it: the same memory again
    kept = []
    backward_once(lambda g: kept.append(g))  # held from here on
    copy = kept[0].clone()
    for _ in range(6):
        backward_once(lambda g: held.append(g.data_ptr()))
    assert torch.equal(kept[0], copy) and kept[0].data_ptr() not in held[2:]
    pools = primacy_xlstm.compiled._kept.pools
    assert all(len(pool) <= primacy_xlstm.compiled._KEPT_PER_NAME for _, pool in pools.values())
    gelu_gate_compiled(torch.randn(2, 3, 2 * 8, requires_grad=True)).sum().backward()  # another shape
    assert pools["gate_grad"][0][0] == (2, 3, 16) and len(pools["gate_grad"][1]) == 1  # the old shape's let go


def test_kept_memory_gives_the_bits_of_fresh_memory(monkeypatch):
    """The backbone on auto's paths (compiled_layer and compiled_block, both on kept memory): outputs and every
    gradient bitwise those of NaN-filled fresh memory, after a step has left its values in the kept memory."""
    torch.manual_seed(0)
    model = XLSTMBackbone(d_model=16, blocks=["mlstm", "slstm"], slstm_heads=2, backend="vanilla")
    x = torch.randn(2, 9, 16, requires_grad=True)

    def run():
        out = model(x)
        return [out, *torch.autograd.grad((out * out).sum(), [x, *model.parameters()])]

    run()  # the kept memory now holds the last step's values
    kept = run()
    fresh_memory = lambda name, shape, like: torch.full(shape, float("nan"), dtype=like.dtype)  # noqa: E731
    monkeypatch.setattr(primacy_xlstm.compiled, "kept_empty", fresh_memory)
    monkeypatch.setattr(primacy_xlstm.block_compiled, "kept_empty", fresh_memory)
    monkeypatch.setattr(primacy_xlstm.mlstm_compiled, "kept_empty", fresh_memory)  # compiled_layer's too
    assert all(torch.equal(a, b) for a, b in zip(kept, run()))
