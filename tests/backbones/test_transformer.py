"""TransformerBackbone: the captured attention is the attention the fused path computes, and every flag acts."""

import pytest
import torch

from primacy.backbones.transformer import TransformerBackbone, sinusoidal_positions
from primacy.errors import UsageError
from primacy.testing import check_backbone


@pytest.mark.parametrize("kwargs", [{}, {"positional": "learned", "max_length": 16}, {"n_layers": 1, "d_ff": 8},
                                    {"mlp": False, "layer_norm": False}, {"window": 3}, {"d_key": 3}])
def test_contract(kwargs):
    check_backbone(TransformerBackbone, n_heads=2, **kwargs)


@pytest.mark.parametrize("kwargs", [{}, {"positional": "learned", "max_length": 16},
                                    {"mlp": False, "layer_norm": False}, {"window": 5}, {"d_key": 2, "window": 5}])
def test_stepping_with_the_key_value_cache_is_forward_in_float64_ablated_heads_included(kwargs):
    torch.manual_seed(0)
    model = TransformerBackbone(d_model=16, n_layers=3, n_heads=4, **kwargs).double().eval()
    x = torch.randn(2, 12, 16, dtype=torch.float64)
    with model.ablate_heads([(0, 1), (2, 3)]):
        full = model(x)
        state, steps = model.initial_state(2), []
        for x_t in x.unbind(1):
            y_t, state = model.step(x_t, state)
            steps.append(y_t)
    assert torch.allclose(torch.stack(steps, 1), full, rtol=0, atol=1e-12)
    d_key = kwargs.get("d_key", 4)
    assert [(tuple(k.shape), tuple(v.shape)) for k, v in state] == [((2, 4, 12, d_key), (2, 4, 12, 4))] * 3
    assert not torch.allclose(model(x), full), "the ablation acts"
    with model.capture_attention(), pytest.raises(UsageError, match="cannot be captured"):
        model.step(x[:, 0], model.initial_state(2))


def test_a_window_hides_every_position_window_or_more_steps_back():
    """One layer of sliding-window attention: output t does not move when inputs at s ≤ t - window do, and the
    captured weights are zero there and still distributions over the window."""
    torch.manual_seed(0)
    model = TransformerBackbone(d_model=16, n_layers=1, n_heads=4, window=4).double().eval()
    x = torch.randn(2, 12, 16, dtype=torch.float64)
    moved = x.clone()
    moved[:, :3] = torch.randn(2, 3, 16, dtype=torch.float64)  # positions 0..2: out of sight from t ≥ 6
    with torch.no_grad(), model.capture_attention() as layers:
        before, after = model(x), model(moved)
    torch.testing.assert_close(before[:, 6:], after[:, 6:], rtol=0, atol=1e-12)
    assert not torch.allclose(before[:, 3:6], after[:, 3:6])
    weights = layers[0].weights  # B h T T
    lag = torch.arange(12)[:, None] - torch.arange(12)[None, :]
    assert (weights[..., (lag < 0) | (lag >= 4)] == 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 4, 12, dtype=torch.float64))


def test_captured_weights_are_causal_distributions_and_match_the_fused_output():
    torch.manual_seed(0)
    model = TransformerBackbone(d_model=16, n_layers=3, n_heads=4).eval()
    x = torch.randn(2, 10, 16)
    fused = model(x)
    with model.capture_attention() as layers:
        explicit = model(x)
    assert torch.allclose(explicit, fused, atol=1e-5)
    assert len(layers) == 3
    future = torch.ones(10, 10, dtype=torch.bool).triu(1)
    for layer in layers:
        assert layer.weights.shape == layer.scores.shape == (2, 4, 10, 10)
        assert torch.allclose(layer.weights.sum(-1), torch.ones(2, 4, 10))
        assert (layer.weights[..., future] == 0).all()
        assert torch.isneginf(layer.scores[..., future]).all() and torch.isfinite(layer.scores[..., ~future]).all()
        assert torch.allclose(layer.scores.softmax(-1), layer.weights)
    assert all(block.attn.captured is None for block in model.blocks), "capture ends with the block"
    model(x)
    assert len(layers) == 3, "nothing is recorded outside the block"


@pytest.mark.parametrize("d_key,values_from", [(None, 24), (2, 12)])  # rows [q | k | v]: v after 2 · 3 heads · d_key
def test_each_head_writes_its_attention_times_its_ov_weights(d_key, values_from):
    torch.manual_seed(0)
    backbone = TransformerBackbone(d_model=12, n_layers=1, n_heads=3, mlp=False, layer_norm=False, d_key=d_key)
    backbone = backbone.double()
    attn = backbone.blocks[0].attn
    x = torch.randn(2, 5, 12, dtype=torch.float64)
    with backbone.capture_attention() as layers:
        out = attn(x)  # B T D
    d_head = 4
    expected = attn.proj.bias.clone()
    for head in range(3):
        w_v, w_o = backbone.ov_weights(0, head)
        b_v = attn.qkv.bias[values_from + head * d_head : values_from + (head + 1) * d_head]
        expected = expected + layers[0].weights[:, head] @ (x @ w_v + b_v) @ w_o  # B T D
    torch.testing.assert_close(out, expected)
    with pytest.raises(UsageError, match="head"):
        backbone.ov_weights(0, 3)


def test_sinusoidal_positions_alternate_sine_and_cosine():
    pe = sinusoidal_positions(5, 6)
    assert torch.allclose(pe[:, 0], torch.sin(torch.arange(5.0)))
    assert torch.allclose(pe[:, 1], torch.cos(torch.arange(5.0)))
    assert torch.allclose(pe[0, 1::2], torch.ones(3))
    assert sinusoidal_positions(4, 5).shape == (4, 5), "odd widths work"


def test_positions_make_the_model_order_aware():
    torch.manual_seed(0)
    model = TransformerBackbone(d_model=8, n_heads=2).eval()
    x = torch.randn(1, 6, 8)
    swapped = x[:, [1, 0, 2, 3, 4, 5]]
    assert not torch.allclose(model(x)[:, -1], model(swapped)[:, -1], atol=1e-4)


def test_learned_positions_are_parameters_and_bounded_by_max_length():
    model = TransformerBackbone(d_model=8, n_heads=2, positional="learned", max_length=6)
    assert model.position.weight.shape == (6, 8) and model.position.weight.requires_grad
    with pytest.raises(UsageError, match="input length 7 exceeds max_length=6"):
        model(torch.randn(1, 7, 8))


def test_dropout_acts_in_training_only():
    torch.manual_seed(0)
    model = TransformerBackbone(d_model=8, n_heads=2, dropout=0.5)
    x = torch.randn(2, 6, 8)
    assert not torch.allclose(model(x), model(x))
    model.eval()
    assert torch.equal(model(x), model(x))


def test_d_ff_sets_the_feed_forward_width():
    assert TransformerBackbone(d_model=8, n_heads=2, d_ff=24).blocks[0].mlp[0].out_features == 24
    assert TransformerBackbone(d_model=8, n_heads=2).blocks[0].mlp[0].out_features == 32


def test_d_key_narrows_queries_and_keys_only():
    """A narrower key shrinks the fused projection's q and k rows, not the values or the output; the default keeps
    the layout (3·D rows) that checkpoints saved before d_key existed hold."""
    assert TransformerBackbone(d_model=8, n_heads=2).blocks[0].attn.qkv.out_features == 3 * 8
    narrow = TransformerBackbone(d_model=8, n_heads=2, d_key=1)
    assert narrow.blocks[0].attn.qkv.out_features == 2 * 2 * 1 + 8
    assert narrow(torch.randn(2, 5, 8)).shape == (2, 5, 8)


def test_attention_only_has_no_mlp_and_no_layer_norm():
    model = TransformerBackbone(d_model=8, n_heads=2, n_layers=2, mlp=False, layer_norm=False)
    names = {name for name, _ in model.named_parameters()}
    assert not any("mlp" in n or "norm" in n for n in names)
    assert names == {f"blocks.{i}.attn.{p}.{w}" for i in range(2) for p in ("qkv", "proj") for w in ("weight", "bias")}
    with_norm = TransformerBackbone(d_model=8, n_heads=2, n_layers=2, mlp=False)
    assert any("norm" in n for n, _ in with_norm.named_parameters())
    assert not any("mlp" in n for n, _ in with_norm.named_parameters())


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"d_model": 10, "n_heads": 4}, "d_model=10 is invalid with n_heads=4"),
        ({"n_layers": 0}, "n_layers=0"),
        ({"n_heads": 0}, "n_heads=0"),
        ({"d_ff": 0}, "d_ff=0"),
        ({"dropout": 1.0}, "dropout=1.0"),
        ({"positional": "rope"}, "positional='rope' is unknown"),
        ({"positional": "learned"}, "max_length=None is invalid for learned positions"),
        ({"max_length": 64}, "max_length=64 is only used by positional='learned'"),
        ({"mlp": False, "d_ff": 32}, "d_ff=32 is only used with mlp=True"),
        ({"window": 0}, "window=0 is invalid: it must be at least 1"),
        ({"d_key": 0}, "d_key=0 is invalid"),
    ],
)
def test_bad_settings_are_rejected(kwargs, message):
    with pytest.raises(UsageError, match=message):
        TransformerBackbone(**kwargs)
