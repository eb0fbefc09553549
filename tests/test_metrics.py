"""StudyQueryAccuracy and the serial-position summaries, against hand-computed examples."""

import math

import pytest
import torch

from primacy.analysis.serial_position import lag_curve, position_indices
from primacy.metrics import StudyQueryAccuracy


def test_hand_computed_example():
    metric = StudyQueryAccuracy(n_items=2)
    # trial 1: query 0 asks study item 1 (answered old: correct), query 1 is new (answered old: wrong)
    # trial 2: query 0 is new (answered new: correct), query 1 asks study item 0 (answered new: wrong)
    logits = torch.tensor([[2.0, 0.5], [-1.0, -3.0]])
    targets = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    study_pos = torch.tensor([[1, -1], [-1, 0]])
    metric.update(logits, targets, study_pos)
    out = metric.compute()
    assert out["counts"].tolist() == [[0, 1], [1, 0]]
    assert out["hits"].tolist() == [[0, 0], [1, 0]]
    assert out["distractor_counts"].tolist() == [1, 1]
    assert out["distractor_hits"].tolist() == [1, 0]
    assert out["overall_accuracy"] == 0.5
    assert out["target_accuracy"] == 0.5
    assert out["distractor_accuracy"] == 0.5
    assert out["serial_position_curve"].tolist() == [0.0, 1.0]
    assert out["query_position_curve"].tolist() == [1.0, 0.0]
    # lag d = j + L - i - 1: cell (1, 0) has d = 0, cell (0, 1) has d = 2, nothing at d = 1
    lag = out["lag_curve"]
    assert lag[0] == 1.0 and math.isnan(lag[1]) and lag[2] == 0.0


def test_two_updates_sum_like_one():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(40, 6, generator=gen)
    study_pos = torch.where(torch.rand(40, 6, generator=gen) < 0.5, -1, torch.randint(0, 6, (40, 6), generator=gen))
    targets = (study_pos >= 0).float()
    whole, parts = StudyQueryAccuracy(6), StudyQueryAccuracy(6)
    whole.update(logits, targets, study_pos)
    parts.update(logits[:15], targets[:15], study_pos[:15])
    parts.update(logits[15:], targets[15:], study_pos[15:])
    a, b = whole.compute(), parts.compute()
    for key in ("hits", "counts", "distractor_hits", "distractor_counts"):
        assert torch.equal(a[key], b[key])
    assert a["overall_accuracy"] == b["overall_accuracy"]


def test_position_indices_follow_the_definitions():
    # L = 8, q = 2: early = mean(curve[:2]), middle = mean(curve[2:6]), late = mean(curve[6:])
    curve = torch.tensor([0.9, 0.7, 0.6, 0.6, 0.5, 0.5, 0.4, 0.2], dtype=torch.float64)
    out = position_indices(curve)
    assert out["primacy_index"] == pytest.approx(0.8 - 0.55)
    assert out["recency_index"] == pytest.approx(0.3 - 0.55)
    assert out["early_minus_late"] == pytest.approx(0.5)


def test_lag_curve_averages_cells_by_delay():
    matrix = torch.arange(9, dtype=torch.float64).view(3, 3)  # L = 3, lags 0..4
    # d = j + 3 - i - 1: d=0 <- (2,0); d=1 <- (1,0),(2,1); d=2 <- (0,0),(1,1),(2,2); d=3 <- (0,1),(1,2); d=4 <- (0,2)
    assert lag_curve(matrix).tolist() == [6.0, 5.0, 4.0, 3.0, 2.0]


def test_rejects_trials_of_the_wrong_length():
    with pytest.raises(ValueError, match="n_items=4"):
        StudyQueryAccuracy(4).update(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(2, 3, dtype=torch.long))
