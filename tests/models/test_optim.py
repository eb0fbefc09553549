"""The learning-rate schedule is the paper's: linear warm-up to the full rate, then a cosine to 0 at the last step."""

import math

import pytest
import torch

from primacy.models.optim import warmup_cosine


def test_warmup_cosine_matches_its_closed_form_at_hand_computed_steps():
    # 4 warm-up steps of 12: 1/4, 2/4, 3/4, 1, then 0.5 (1 + cos(pi (s - 4) / 8)) down to 0 at step 12
    expected = {0: 0.25, 1: 0.5, 2: 0.75, 3: 1.0, 4: 1.0, 6: 0.5 * (1 + math.cos(math.pi / 4)), 8: 0.5,
                10: 0.5 * (1 + math.cos(3 * math.pi / 4)), 12: 0.0, 20: 0.0}
    for step, factor in expected.items():
        assert warmup_cosine(step, warmup_steps=4, total_steps=12) == pytest.approx(factor, abs=1e-12), step


def test_without_warmup_the_schedule_starts_at_the_full_rate_and_only_falls():
    factors = [warmup_cosine(step, warmup_steps=0, total_steps=100) for step in range(101)]
    assert factors[0] == 1.0 and factors[-1] == pytest.approx(0.0, abs=1e-12)
    assert all(a >= b for a, b in zip(factors, factors[1:]))


def test_torchs_scheduler_applies_the_factor_at_every_step():
    """What adamw_warmup_cosine hands to LambdaLR: the optimiser's lr after k steps is lr x factor(k)."""
    weight = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.AdamW([weight], lr=1e-3)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: warmup_cosine(s, 3, 10))
    for step in range(12):
        assert optimizer.param_groups[0]["lr"] == pytest.approx(1e-3 * warmup_cosine(step, 3, 10), abs=1e-15)
        optimizer.step()
        scheduler.step()
