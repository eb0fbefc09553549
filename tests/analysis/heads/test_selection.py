"""Δ by token (primacy.analysis.heads.selection): which tokens repeat an earlier one, and the selection step on new
and repeated tokens compared at the same positions."""

import math

import numpy as np
import pytest
import torch

from primacy.analysis.heads.selection import dt_by_role, seen_before, token_dt
from primacy.backbones.s4d import S4DBackbone
from primacy.models.language import LanguageModel


def test_a_token_is_seen_before_where_it_occurred_earlier_in_its_own_sequence():
    tokens = torch.tensor([[5, 6, 5, 7, 6], [1, 2, 3, 2, 9]])
    assert seen_before(tokens).tolist() == [[False, False, True, False, True], [False, False, False, True, False]]


def test_the_contrast_compares_new_and_repeated_tokens_at_the_same_positions():
    """Two channels, Δ 10x larger at repeats (one decade); positions 3 and 4 have both kinds across the sequences,
    position 2 only repeats, positions 0 and 1 only new tokens."""
    tokens = torch.tensor([[1, 2, 1, 3, 2], [4, 5, 4, 4, 6]])
    repeat = seen_before(tokens)
    dt = torch.where(repeat, 0.1, 0.01)[..., None].expand(-1, -1, 2).clone()  # B T C
    dt[:, :, 1] *= 2  # the channels' median: the geometric mean of the two
    found = dt_by_role({"layer0": dt}, tokens)
    assert found.layers == ["layer0"] and found.positions == 2
    assert found.contrast[0] == pytest.approx(1.0)
    offset = math.log10(2) / 2
    assert np.allclose(found.new[0, :2], -2 + offset) and math.isnan(found.new[0, 2])
    assert np.allclose(found.repeat[0, 2:], -1 + offset) and np.isnan(found.repeat[0, :2]).all()


def test_a_fixed_dt_is_the_same_on_every_token_and_prompts_without_both_kinds_have_no_contrast():
    model = LanguageModel(S4DBackbone(d_model=8, d_state=4), vocab_size=16)
    tokens = torch.arange(8).repeat(2, 2)  # B 16: the second half repeats the first, as an induction prompt
    dt = token_dt(model, tokens)
    found = dt_by_role(dt, tokens)
    fixed = np.median(np.log10(next(iter(model.backbone.dt().values())).double().numpy()))
    assert np.allclose(found.new[:, :8], fixed) and np.allclose(found.repeat[:, 8:], fixed)
    assert found.positions == 0 and np.isnan(found.contrast).all()
    assert model.training, "the model's mode is restored"
