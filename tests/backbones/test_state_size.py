"""Backbone.state_size: the real numbers a step-by-step reading keeps per sequence after ``length`` tokens (the
comparison table's recurrent state size), fixed for recurrences, growing with the window for attention."""

import pytest
import torch

from primacy.backbones.base import Backbone
from primacy.backbones.deltanet import DeltaNetBackbone
from primacy.backbones.gla import GLABackbone
from primacy.backbones.hybrid import HybridBackbone
from primacy.backbones.linear_attention import LinearAttentionBackbone
from primacy.backbones.lstm import LSTMBackbone
from primacy.backbones.retnet import RetNetBackbone
from primacy.backbones.s4d import S4DBackbone
from primacy.backbones.transformer import TransformerBackbone
from primacy.errors import UsageError


def test_s4d_keeps_its_complex_state_whatever_the_length():
    model = S4DBackbone(d_model=8, d_state=16)
    # N/2 = 8 complex conjugate pairs per channel (the state is (B, D, N/2) complex), 2 reals each: D·N reals
    assert model.state_size(10) == model.state_size(3) == 8 * (16 // 2) * 2 == 8 * 16


def test_lstm_keeps_hidden_and_cell_per_layer():
    assert LSTMBackbone(d_model=8, n_layers=2).state_size(5) == 2 * 2 * 8  # layers × (h, c) × D


# per layer, heads H = 2, key width K = 4, value width V = 2 (d_model 8):
# S (H, K, V) for all; linear attention also its normaliser z (H, K); with a convolution (DeltaNet's default
# conv_kernel 4, or given) the last kernel - 1 projections of q, k, v, H·(2K + V) channels. The position counter t is an
# integer, not memory.
@pytest.mark.parametrize("cls,kwargs,per_layer", [
    (LinearAttentionBackbone, {}, 2 * 4 * 2 + 2 * 4),
    (RetNetBackbone, {}, 2 * 4 * 2),
    (GLABackbone, {"conv_kernel": 3}, 2 * 4 * 2 + 2 * (2 * 4 + 2) * 2),
    (DeltaNetBackbone, {}, 2 * 4 * 2 + 2 * (2 * 4 + 2) * 3),
])
def test_matrix_memories_keep_their_matrices_and_convolution_window(cls, kwargs, per_layer):
    model = cls(d_model=8, n_layers=2, n_heads=2, d_key=4, d_value=2, **kwargs)
    assert model.state_size(1) == model.state_size(7) == 2 * per_layer


@pytest.mark.parametrize("length", [3, 9])
def test_a_transformer_keeps_every_key_and_value(length):
    model = TransformerBackbone(d_model=8, n_layers=2, n_heads=2)
    assert model.state_size(length) == 2 * 2 * 8 * length  # layers × (keys, values) × D × positions
    assert model.state_size(length) == Backbone.state_size(model, length), "what step's cache holds"


@pytest.mark.parametrize("length", [2, 6])
def test_a_narrower_key_keeps_narrower_keys(length):
    model = TransformerBackbone(d_model=8, n_layers=2, n_heads=2, d_key=1)
    assert model.state_size(length) == 2 * (2 * 1 + 8) * length  # layers × (heads × d_key keys + D values) × positions
    assert model.state_size(length) == Backbone.state_size(model, length)


@pytest.mark.parametrize("length", [1, 3, 4, 5, 12])
def test_a_sliding_window_keeps_only_the_window(length):
    model = TransformerBackbone(d_model=8, n_layers=2, n_heads=2, window=4)
    assert model.state_size(length) == 2 * 2 * 8 * min(length, 4)
    if length <= 4:  # step's cache keeps every key, so it agrees only until the window is full
        assert model.state_size(length) == Backbone.state_size(model, length)


@pytest.mark.parametrize("length", [2, 4, 10])
def test_a_hybrid_adds_its_ssm_state_to_its_window(length):
    model = HybridBackbone(d_model=8, pattern=["ssm", "attention"], window=4, n_heads=2, d_state=4)
    assert model.state_size(length) == 8 * 4 + 2 * 8 * min(length, 4)  # S4D's D·N, then keys and values
    if length <= 4:
        assert model.state_size(length) == Backbone.state_size(model, length)


@pytest.mark.parametrize("length", [0, -2])
def test_a_length_below_one_is_a_usage_error(length):
    with pytest.raises(UsageError, match=f"length={length} is invalid"):
        LSTMBackbone(d_model=8).state_size(length)
    with pytest.raises(UsageError, match=f"length={length} is invalid"):
        TransformerBackbone(d_model=8, n_heads=2).state_size(length)


def test_a_backbone_without_step_has_no_state_to_measure():
    class Identity(Backbone):
        d_model = 8

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x

    with pytest.raises(UsageError, match="Identity has no step\\(\\)") as error:
        Identity().state_size(4)
    assert "\n" not in str(error.value)
