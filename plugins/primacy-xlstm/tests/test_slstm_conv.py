"""slstm_loop='compiled_conv': compiled_gates with the sLSTM layer's causal convolution and its SiLU compiled too
(primacy_xlstm.mlstm_compiled.conv_silu_compiled, tested against PyTorch's in test_mlstm_conv) equals xlstm's sLSTM
layer and the backbone on the other loops in float64 with every gradient; was auto's choice where the compiler works
in primacy-xlstm 0.5 (compiled_block since 0.6: test_slstm_block); is recorded, with the checkpoints of the other
loops resuming on theirs; refuses what it cannot run in one line."""

import pytest
import torch
from primacy.errors import UsageError
from test_fast_components import OURS, assert_same_map, shaken, with_classes
from test_slstm_compiled import loops, no_compiler, small  # noqa: F401 (no_compiler: a fixture)
from xlstm import sLSTMLayerConfig
from xlstm.blocks.slstm.layer import sLSTMLayer

import primacy_xlstm.mlstm_compiled
from primacy_xlstm import XLSTMBackbone
from primacy_xlstm.slstm import FastsLSTMLayer


@pytest.mark.parametrize("kernel", [4, 0], ids=["convolution", "no-convolution"])
def test_the_slstm_layer_on_it_is_xlstms_in_float64(kernel):
    config = sLSTMLayerConfig(embedding_dim=12, num_heads=3, backend="vanilla", conv1d_kernel_size=kernel)
    theirs = shaken(sLSTMLayer(config))
    ours = with_classes(theirs, OURS)
    ours.slstm_cell.slstm_loop = "compiled_conv"
    x = torch.randn(3, 9, 12, dtype=torch.float64)
    assert type(ours) is FastsLSTMLayer and ours._fast_path(x)
    assert not kernel or ours._conv_compiled()
    assert_same_map(ours, theirs, x)


def test_the_backbone_on_it_equals_it_on_the_gates_path_and_the_pytorch_loop():
    """Output and the gradients of the input and every parameter in float64 within 1e-10."""
    torch.manual_seed(0)
    models = {loop: XLSTMBackbone(d_model=8, blocks=["slstm", "mlstm", "slstm"], slstm_heads=2, backend="vanilla",
                                  slstm_loop=loop, mlstm_loop="pytorch").double()
              for loop in ("compiled_conv", "compiled_gates", "pytorch")}
    for model in models.values():
        model.load_state_dict(models["pytorch"].state_dict())
    assert loops(models["compiled_conv"]) == {"compiled_conv"}
    results = []
    for model in models.values():
        x = torch.randn(2, 7, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(1), requires_grad=True)
        out = model(x)
        weights = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)
        results.append((out, *torch.autograd.grad((out * weights).sum(), [x, *model.parameters()])))
    for other in results[1:]:
        for mine, expected in zip(results[0], other):
            torch.testing.assert_close(mine, expected, rtol=0, atol=1e-10)


def test_checkpoints_resume_on_their_loops_with_their_bits():
    """A state dict of compiled_gates (0.4's default) or compiled (0.2-0.3's) resumes under auto on it; one of
    compiled_conv on it."""
    x = torch.randn(2, 5, 8)
    for loop in ("compiled", "compiled_gates", "compiled_conv"):
        trained = small(slstm_loop=loop)
        resumed = small()
        resumed.load_state_dict(trained.state_dict())
        assert loops(resumed) == {loop} and torch.equal(resumed(x), trained(x))


def test_refusals_in_one_line(no_compiler):  # noqa: F811 (the fixture)
    primacy_xlstm.mlstm_compiled._library.cache_clear()
    try:
        with pytest.raises(UsageError, match=r"^slstm_loop='compiled_conv' needs a C\+\+ compiler and "
                                             r"'no-such-c\+\+' \(CXX\) is not one on PATH: install one \(g\+\+ or "
                                             r"clang\+\+\) or use slstm_loop='pytorch'$"):
            small(slstm_loop="compiled_conv")
        state = small(slstm_loop="pytorch").state_dict()
        state["_extra_state"] = {"slstm_loop": "compiled_conv"}
        with pytest.raises(UsageError, match=r"^this checkpoint was trained with slstm_loop='compiled_conv', which "
                                             r"cannot run here"):
            small().load_state_dict(state)
    finally:
        primacy_xlstm.mlstm_compiled._library.cache_clear()


def test_bad_values_and_inputs_it_cannot_take_are_refused_in_one_line():
    with pytest.raises(UsageError, match=r"^slstm_loop='compiled_convolution' is unknown: choose one of 'auto', "
                                         r"'pytorch', 'compiled', 'compiled_gates', 'compiled_conv', "
                                         r"'compiled_block'$"):
        small(slstm_loop="compiled_convolution")
    model = XLSTMBackbone(d_model=8, blocks=["slstm"], slstm_heads=2, backend="vanilla",
                          slstm_loop="compiled_conv").bfloat16()
    with pytest.raises(UsageError, match=r"^slstm_loop='compiled_conv' runs on float32 or float64 CPU tensors of one "
                                         r"dtype, not torch.bfloat16 on cpu: use slstm_loop='pytorch'$"):
        model(torch.randn(2, 5, 8, dtype=torch.bfloat16))
