"""The faster subclasses XLSTMBackbone makes of xlstm's modules (the causal convolution, the headwise projections, the
multi-head norm, the gated feed-forward layer, the mLSTM and sLSTM layers) are xlstm's maps: outputs and gradients
(of the input and of every parameter) agree with xlstm's own modules in float64 to 1e-10, with the same state dict;
so does the whole backbone, its influence and its ablation."""

import copy
from collections.abc import Callable

import pytest
import torch
from xlstm import FeedForwardConfig, mLSTMLayerConfig, sLSTMLayerConfig
from xlstm.blocks.mlstm.cell import mLSTMCell
from xlstm.blocks.mlstm.layer import mLSTMLayer
from xlstm.blocks.slstm.cell import sLSTMCell_vanilla
from xlstm.blocks.slstm.layer import sLSTMLayer
from xlstm.components.conv import CausalConv1d, CausalConv1dConfig
from xlstm.components.feedforward import GatedFeedForward
from xlstm.components.linear_headwise import LinearHeadwiseExpand, LinearHeadwiseExpandConfig
from xlstm.components.ln import MultiHeadLayerNorm

from primacy_xlstm import XLSTMBackbone
from primacy_xlstm.backbone import (
    DenseHeadwiseExpand,
    FastCausalConv1d,
    FastGatedFeedForward,
    FastMultiHeadLayerNorm,
)
from primacy_xlstm.mlstm import CHUNK, ChunkwisemLSTMCell, FastmLSTMLayer
from primacy_xlstm.slstm import FastsLSTMCell, FastsLSTMLayer

ATOL = 1e-10
XLSTMS = {FastCausalConv1d: CausalConv1d, DenseHeadwiseExpand: LinearHeadwiseExpand,
          FastMultiHeadLayerNorm: MultiHeadLayerNorm, FastGatedFeedForward: GatedFeedForward,
          ChunkwisemLSTMCell: mLSTMCell, FastmLSTMLayer: mLSTMLayer, FastsLSTMCell: sLSTMCell_vanilla,
          FastsLSTMLayer: sLSTMLayer}
OURS = {theirs: ours for ours, theirs in XLSTMS.items()}


def shaken(module: torch.nn.Module) -> torch.nn.Module:
    """module in float64 with every parameter moved at random (xlstm starts some at zero or at structured values),
    so that every term of its map is used."""
    torch.manual_seed(0)
    module = module.double()
    with torch.no_grad():
        for p in module.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return module


def with_classes(module: torch.nn.Module, classes: dict[type, type]) -> torch.nn.Module:
    """A copy of module whose submodules of a class in ``classes`` are made the class it maps to (in place, as
    XLSTMBackbone does), parameters and buffers untouched."""
    module = copy.deepcopy(module)
    for sub in module.modules():
        if type(sub) in classes:
            sub.__class__ = classes[type(sub)]
    return module


def output_and_gradients(module: torch.nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """module(x) and the gradients of a loss weighing every output entry differently w.r.t. x and every parameter."""
    x = x.clone().requires_grad_()
    out = module(x)
    weights = torch.linspace(-1.0, 2.0, out.numel(), dtype=out.dtype).view_as(out)
    return out, list(torch.autograd.grad((weights * out).sum(), [x, *module.parameters()]))


def assert_same_map(ours: torch.nn.Module, theirs: torch.nn.Module, x: torch.Tensor) -> None:
    """Same state dict keys, outputs and every gradient within ATOL (none of xlstm's gradients all zero)."""
    assert ours.state_dict().keys() == theirs.state_dict().keys()
    out, grads = output_and_gradients(ours, x)
    reference, reference_grads = output_and_gradients(theirs, x)
    assert out.shape == reference.shape
    torch.testing.assert_close(out, reference, rtol=0, atol=ATOL)
    assert len(grads) == len(reference_grads)
    for i, (mine, expected) in enumerate(zip(grads, reference_grads)):
        assert expected.abs().max() > 0, i
        torch.testing.assert_close(mine, expected, rtol=0, atol=ATOL, msg=lambda text, i=i: f"gradient {i}: {text}")


COMPONENTS: dict[str, tuple[Callable[[], torch.nn.Module], tuple[int, ...]]] = {
    "conv-4": (lambda: CausalConv1d(CausalConv1dConfig(feature_dim=6, kernel_size=4)), (3, 9, 6)),
    "conv-5-longer-than-the-input": (lambda: CausalConv1d(CausalConv1dConfig(feature_dim=6, kernel_size=5)), (2, 3, 6)),
    "headwise": (lambda: LinearHeadwiseExpand(LinearHeadwiseExpandConfig(in_features=12, num_heads=3, bias=False)),
                 (2, 5, 12)),
    "headwise-bias-expand": (lambda: LinearHeadwiseExpand(LinearHeadwiseExpandConfig(
        in_features=12, num_heads=4, expand_factor_up=2, bias=True)), (2, 5, 12)),
    "norm": (lambda: MultiHeadLayerNorm(ndim=12, weight=True, bias=False), (2, 3, 5, 4)),
    "norm-bias": (lambda: MultiHeadLayerNorm(ndim=12, weight=True, bias=True), (2, 4, 5, 3)),
    "feedforward": (lambda: GatedFeedForward(FeedForwardConfig(proj_factor=1.3, embedding_dim=8)), (2, 5, 8)),
}


@pytest.mark.parametrize("name", COMPONENTS)
def test_each_component_is_xlstms_in_float64(name):
    """Convolution (kernel wider than the input too), headwise projection (with bias and an expansion), multi-head
    norm (with bias), gated feed-forward layer."""
    build, shape = COMPONENTS[name]
    theirs = shaken(build())
    ours = with_classes(theirs, OURS)
    assert type(ours) is OURS[type(theirs)]
    assert_same_map(ours, theirs, torch.randn(*shape, dtype=torch.float64))


def test_the_convolution_with_a_state_is_xlstms_own():
    """A window carried in, or the last inputs asked for (xlstm's own call, which the backbone does not make)."""
    theirs = shaken(CausalConv1d(CausalConv1dConfig(feature_dim=4, kernel_size=3)))
    ours = with_classes(theirs, OURS)
    x, window = torch.randn(2, 5, 4, dtype=torch.float64), torch.randn(2, 2, 4, dtype=torch.float64)
    for kwargs in ({"conv_state": window}, {"return_last_state": True}):
        for mine, expected in zip(ours(x, **kwargs), theirs(x, **kwargs)):
            torch.testing.assert_close(mine, expected, rtol=0, atol=0)


def mlstm_layer(length: int, heads: int = 4, embedding_dim: int = 16) -> mLSTMLayer:
    return shaken(mLSTMLayer(mLSTMLayerConfig(embedding_dim=embedding_dim, num_heads=heads, context_length=length)))


@pytest.mark.parametrize("heads", [4, 8, 2], ids=["4-blocks-a-head", "2-blocks-a-head", "8-blocks-a-head"])
def test_the_mlstm_layer_is_xlstms_in_float64(heads):
    """Inner width 64 (16 headwise blocks of 4) over 2, 4 or 8 heads, on two chunks and a half; the layer takes its
    per-head path. Measured: ≤ 6e-14 (outputs), ≤ 5e-11 (gradients, of size up to 1e3 here: 1e-13 relative to it,
    float64's rounding over sums of a few thousand terms, in both forms)."""
    length = 2 * CHUNK + CHUNK // 2
    theirs = mlstm_layer(length, heads)
    ours = with_classes(theirs, OURS)
    x = torch.randn(2, length, 16, dtype=torch.float64)
    assert type(ours) is FastmLSTMLayer and ours._fast_path(x)
    assert_same_map(ours, theirs, x)


def test_the_mlstm_layer_is_xlstms_where_its_blocks_cross_heads_or_its_cell_is_hooked():
    """32 heads of width 2 over blocks of 4, and a hook on the cell (which sees xlstm's q, k, v): xlstm's layer
    with the faster components."""
    length = 10
    theirs = mlstm_layer(length, heads=32)
    ours = with_classes(theirs, OURS)
    x = torch.randn(2, length, 16, dtype=torch.float64)
    assert not ours._fast_path(x)
    assert_same_map(ours, theirs, x)
    theirs, seen = mlstm_layer(length), []
    ours = with_classes(theirs, OURS)
    ours.mlstm_cell.register_forward_pre_hook(lambda _, args, kwargs: seen.append(kwargs["q"].shape), with_kwargs=True)
    assert_same_map(ours, theirs, x)
    assert seen == [(2, length, 64)]


@pytest.mark.parametrize("kernel", [4, 0], ids=["convolution", "no-convolution"])
def test_the_slstm_layer_is_xlstms_in_float64(kernel):
    """xlstm's layer feeds gate i from ``fgate`` and f from ``igate``, kept; with and without its convolution.
    Measured: ≤ 2e-15 (outputs), ≤ 1.2e-14 (gradients)."""
    config = sLSTMLayerConfig(embedding_dim=8, num_heads=2, backend="vanilla", conv1d_kernel_size=kernel)
    theirs = shaken(sLSTMLayer(config))
    ours = with_classes(theirs, OURS)
    x = torch.randn(3, 11, 8, dtype=torch.float64)
    assert type(ours) is FastsLSTMLayer and ours._fast_path(x)
    assert_same_map(ours, theirs, x)


def test_the_slstm_layer_from_a_state_is_xlstms_own():
    theirs = shaken(sLSTMLayer(sLSTMLayerConfig(embedding_dim=8, num_heads=2, backend="vanilla")))
    ours = with_classes(theirs, OURS)
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    state = torch.rand(4, 2, 8, dtype=torch.float64) + 0.1
    mine, expected = ours(x, slstm_state=state, return_last_state=True), theirs(x, slstm_state=state,
                                                                              return_last_state=True)
    torch.testing.assert_close(mine[0], expected[0], rtol=0, atol=ATOL)


def backbone_pair(length: int) -> tuple[XLSTMBackbone, XLSTMBackbone]:
    """XLSTMBackbone as built (every faster subclass) and a copy made of xlstm's own modules, float64, shaken."""
    ours = shaken(XLSTMBackbone(d_model=16, blocks=["mlstm", "slstm", "mlstm"], slstm_heads=2, backend="vanilla",
                                context_length=length))
    assert set(XLSTMS) <= {type(m) for m in ours.modules()}
    theirs = with_classes(ours, XLSTMS)
    assert not set(XLSTMS) & {type(m) for m in theirs.modules()}
    return ours, theirs


def test_the_backbone_is_xlstms_in_float64():
    """Every block type and component, two chunks and a half. Measured: ≤ 1.1e-13 (outputs), ≤ 3.2e-12
    (gradients)."""
    length = 2 * CHUNK + CHUNK // 2
    ours, theirs = backbone_pair(length)
    assert_same_map(ours, theirs, torch.randn(2, length, 16, dtype=torch.float64))


def test_the_backbones_influence_and_ablation_are_xlstms():
    """The influence records the cell's backend_fn call and the ablation hooks its outnorm: both see the per-head
    path as they see xlstm's layer."""
    ours, theirs = backbone_pair(12)
    x = torch.randn(2, 12, 16, dtype=torch.float64)
    for mine, expected in zip(ours.influence(x), theirs.influence(x), strict=True):
        for field in ("weights", "values", "output"):
            torch.testing.assert_close(getattr(mine, field), getattr(expected, field), rtol=0, atol=ATOL)
    with ours.ablate([(0, 1), (1, 3)]), theirs.ablate([(0, 1), (1, 3)]):
        ablated = ours(x)
        torch.testing.assert_close(ablated, theirs(x), rtol=0, atol=ATOL)
    assert (ablated - ours(x)).abs().max() > 1e-3
