"""StudyQueryAccuracy and the serial-position summaries, against hand-computed examples."""

import math

import pytest
import torch

from primacy.analysis.behaviour.serial_position import delay_curve, early_query_decay, position_indices, summarize
from primacy.metrics import StudyQueryAccuracy, contiguity_pairs, old_new_correct
from primacy.tasks.verification import CyclicDesign, held_out_sets


def test_hand_computed_example():
    metric = StudyQueryAccuracy(n_items=2)
    # trial 1: query 0 asks study item 1 (answered old: correct), query 1 is new (answered old: wrong)
    # trial 2: query 0 is new (answered new: correct), query 1 asks study item 0 (answered new: wrong)
    logits = torch.tensor([[2.0, 0.5], [-1.0, -3.0]])
    targets = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    study_pos = torch.tensor([[1, -1], [-1, 0]])
    metric.update(old_new_correct(logits, targets), study_pos)
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
    # delay d = j + L - i - 1: cell (1, 0) has d = 0, cell (0, 1) has d = 2, nothing at d = 1
    delay = out["delay_curve"]
    assert delay[0] == 1.0 and math.isnan(delay[1]) and delay[2] == 0.0


def test_two_updates_sum_like_one():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(40, 6, generator=gen)
    study_pos = torch.where(torch.rand(40, 6, generator=gen) < 0.5, -1, torch.randint(0, 6, (40, 6), generator=gen))
    targets = (study_pos >= 0).float()
    whole, parts = StudyQueryAccuracy(6), StudyQueryAccuracy(6)
    whole.update(old_new_correct(logits, targets), study_pos)
    parts.update(old_new_correct(logits[:15], targets[:15]), study_pos[:15])
    parts.update(old_new_correct(logits[15:], targets[15:]), study_pos[15:])
    a, b = whole.compute(), parts.compute()
    for key in ("hits", "counts", "distractor_hits", "distractor_counts", "contiguity_hits", "contiguity_counts",
                "contiguity_expected"):
        assert torch.equal(a[key], b[key])
    assert a["overall_accuracy"] == b["overall_accuracy"]


def test_position_indices_follow_the_definitions():
    # L = 8, q = 2: early = mean(curve[:2]), middle = mean(curve[2:6]), late = mean(curve[6:])
    curve = torch.tensor([0.9, 0.7, 0.6, 0.6, 0.5, 0.5, 0.4, 0.2], dtype=torch.float64)
    out = position_indices(curve)
    assert out["primacy_index"] == pytest.approx(0.8 - 0.55)
    assert out["recency_index"] == pytest.approx(0.3 - 0.55)
    assert out["early_minus_late"] == pytest.approx(0.5)


def test_early_query_decay_is_the_first_items_first_queries_minus_their_last_queries():
    """L = 8, q = 2: study items 0 and 1 at 0.9 when queried at positions 0-1 and 0.6 at 6-7 (one cell never asked);
    every other cell, the late items included, at 0.2 so that only the first rows count."""
    hits = torch.full((8, 8), 2)
    hits[:2, :2], hits[:2, 6:] = 9, 6
    counts = torch.full((8, 8), 10)
    counts[1, 7] = 0  # no trials: skipped, not a zero
    hits[1, 7] = 0
    out = summarize(hits, counts, torch.zeros(8), torch.ones(8))
    assert out["early_query_decay"] == pytest.approx(0.9 - 0.6)
    assert early_query_decay(torch.full((4, 4), 0.5)) == 0.0, "a flat row does not decay"
    forward = torch.full((4, 4), float("nan")).fill_diagonal_(1.0)  # reconstruction's forward design: the diagonal
    assert math.isnan(early_query_decay(forward)), "no trials of the first item at the last query: undefined"


def test_delay_curve_averages_cells_by_the_tokens_between_item_and_query():
    matrix = torch.arange(9, dtype=torch.float64).view(3, 3)  # L = 3, delays 0..4
    # d = j + 3 - i - 1: d=0 <- (2,0); d=1 <- (1,0),(2,1); d=2 <- (0,0),(1,1),(2,2); d=3 <- (0,1),(1,2); d=4 <- (0,2)
    assert delay_curve(matrix).tolist() == [6.0, 5.0, 4.0, 3.0, 2.0]


def test_rejects_trials_of_the_wrong_length():
    with pytest.raises(ValueError, match="n_items=4"):
        StudyQueryAccuracy(4).update(torch.zeros(2, 3, dtype=torch.bool), torch.zeros(2, 3, dtype=torch.long))


def random_trials(n_trials: int, n_items: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Logits, targets and study_pos (each query a distinct study item or, with probability 1/2, a distractor)."""
    gen = torch.Generator().manual_seed(seed)
    order = torch.rand(n_trials, n_items, generator=gen).argsort(dim=1)
    study_pos = torch.where(torch.rand(n_trials, n_items, generator=gen) < 0.5, -1, order)
    return torch.randn(n_trials, n_items, generator=gen), (study_pos >= 0).float(), study_pos


def reference_contiguity(logits, targets, study_pos):
    """Slow, obvious version: walk each trial, remembering the last old query's study position."""
    n = study_pos.shape[1]
    hits, counts = [0] * (2 * n - 1), [0] * (2 * n - 1)
    for row_logits, row_targets, row_pos in zip(logits.tolist(), targets.tolist(), study_pos.tolist()):
        previous = None
        for logit, target, pos in zip(row_logits, row_targets, row_pos):
            if pos < 0:
                continue  # a distractor: the pair skips it
            if previous is not None:
                counts[pos - previous + n - 1] += 1
                hits[pos - previous + n - 1] += int((logit > 0) == bool(target))
            previous = pos
    return torch.tensor(hits), torch.tensor(counts)


def test_contiguity_pairs_docstring_example():
    eligible, lag = contiguity_pairs(torch.tensor([[2, -1, 3, 0]]))
    assert eligible.tolist() == [[False, False, True, True]]
    assert lag.tolist() == [[0, 0, 1, -3]]


@pytest.mark.parametrize("n_items", [2, 5, 8])
def test_contiguity_matches_the_slow_reference(n_items):
    logits, targets, study_pos = random_trials(50, n_items, seed=n_items)
    metric = StudyQueryAccuracy(n_items)
    metric.update(old_new_correct(logits, targets), study_pos)
    out = metric.compute()
    hits, counts = reference_contiguity(logits, targets, study_pos)
    assert torch.equal(out["contiguity_hits"], hits) and torch.equal(out["contiguity_counts"], counts)
    old = (study_pos >= 0).sum(dim=1)
    pairs = int((old - 1).clamp(min=0).sum())  # every old query but a trial's first has a partner
    assert int(out["contiguity_counts"].sum()) == pairs
    assert out["contiguity_lags"].tolist() == list(range(-(n_items - 1), n_items))


def test_contiguity_curve_of_a_model_right_only_at_lag_plus_one():
    # all-old trials, L = 4; lags of queries 1..3: (+1, +1, +1), (-1, -1, -1), (+2, -3, +2)
    study_pos = torch.tensor([[0, 1, 2, 3], [3, 2, 1, 0], [1, 3, 0, 2]])
    eligible, lag = contiguity_pairs(study_pos)
    logits = torch.where(lag == 1, 1.0, -1.0)  # answers "old" exactly when d = +1
    metric = StudyQueryAccuracy(4)
    metric.update(old_new_correct(logits, torch.ones(3, 4)), study_pos)
    out = metric.compute()
    #                                              d = -3 -2 -1  0  1  2  3
    assert out["contiguity_counts"].tolist() == [1, 0, 3, 0, 3, 2, 0]
    assert out["contiguity_hits"].tolist() == [0, 0, 0, 0, 3, 0, 0]
    curve = out["contiguity_curve"]
    assert curve[4] == 1.0 and curve[[0, 2, 5]].tolist() == [0.0, 0.0, 0.0]
    assert curve[[1, 3, 6]].isnan().all(), "lags without pairs are NaN"
    assert int(out["contiguity_counts"].sum()) == int(eligible.sum()) == 9


def test_contiguity_pairs_skip_distractors_in_the_half_test_design():
    """In ``half`` every other query is a distractor, so no two adjacent queries are old: each old query is
    paired with the old query two positions earlier; in ``uniform`` with the one right before it."""
    n_items, n_sets = 8, 4
    study = held_out_sets(n_sets, n_items, 64, seed=0)
    for condition, gap, pairs_per_set in (("half", 2, 2 * n_items * (n_items // 2 - 1)),
                                          ("uniform", 1, n_items * (n_items - 1))):
        design = CyclicDesign.build(study, 64, seed=0, condition=condition)
        batch = design.batch(torch.arange(len(design)))
        study_pos = batch["study_pos"]  # B L
        old = study_pos >= 0
        assert bool((old[:, 1:] & old[:, :-1]).any()) == (condition == "uniform")
        eligible, lag = contiguity_pairs(study_pos)
        assert int(eligible.sum()) == n_sets * pairs_per_set
        expected = study_pos[:, gap:] - study_pos[:, :-gap]  # B L-gap
        assert torch.equal(lag[:, gap:][eligible[:, gap:]], expected[eligible[:, gap:]])
        assert not eligible[:, :gap].any() if condition == "half" else not eligible[:, 0].any()
        metric = StudyQueryAccuracy(n_items)
        metric.update(old_new_correct(torch.randn(study_pos.shape), batch["targets"]), study_pos)
        assert int(metric.compute()["contiguity_counts"].sum()) == n_sets * pairs_per_set


def test_states_merge_across_processes_and_reset():
    """Every state is a sum: merging two processes' metrics equals one metric that saw all the trials."""
    logits, targets, study_pos = random_trials(30, 6, seed=1)
    whole, first, second = StudyQueryAccuracy(6), StudyQueryAccuracy(6), StudyQueryAccuracy(6)
    whole.update(old_new_correct(logits, targets), study_pos)
    first.update(old_new_correct(logits[:10], targets[:10]), study_pos[:10])
    second.update(old_new_correct(logits[10:], targets[10:]), study_pos[10:])
    first.merge_state(second)
    merged, expected = first.compute(), whole.compute()
    for key in ("hits", "counts", "distractor_hits", "distractor_counts", "contiguity_hits", "contiguity_counts",
                "contiguity_expected"):
        assert torch.equal(merged[key], expected[key]), key
    for key in ("contiguity_curve", "controlled_contiguity_curve"):
        torch.testing.assert_close(merged[key], expected[key], equal_nan=True, rtol=0, atol=0)
    whole.reset()
    assert int(whole.contiguity_hits.sum()) == int(whole.contiguity_counts.sum()) == 0
    assert whole.contiguity_counts.shape == (11,)


def test_summarize_without_contiguity_states_has_no_curve():
    states = {"hits": torch.ones(3, 3), "counts": torch.ones(3, 3), "distractor_hits": torch.ones(3),
              "distractor_counts": torch.ones(3)}
    assert "contiguity_curve" not in summarize(**states)
    with pytest.raises(ValueError, match=r"L=3 study positions need \(5,\)"):
        summarize(**states, contiguity_hits=torch.zeros(3), contiguity_counts=torch.zeros(3))
    with pytest.raises(ValueError, match="both or neither"):
        summarize(**states, contiguity_hits=torch.zeros(5))


def reference_expected(logits, targets, study_pos):
    """Slow, obvious version of ``contiguity_expected``: per eligible query, its own cell's final accuracy."""
    n = study_pos.shape[1]
    hits, counts = torch.zeros(n, n, dtype=torch.float64), torch.zeros(n, n, dtype=torch.float64)
    correct = ((logits > 0) == targets.bool()).tolist()
    for row_pos, row_correct in zip(study_pos.tolist(), correct):
        for q, (pos, ok) in enumerate(zip(row_pos, row_correct)):
            if pos >= 0:
                counts[pos, q] += 1
                hits[pos, q] += ok
    expected = [0.0] * (2 * n - 1)
    for row_pos in study_pos.tolist():
        previous = None
        for q, pos in enumerate(row_pos):
            if pos < 0:
                continue
            if previous is not None:
                expected[pos - previous + n - 1] += float(hits[pos, q] / counts[pos, q])
            previous = pos
    return torch.tensor(expected, dtype=torch.float64)


@pytest.mark.parametrize("n_items", [2, 5, 8])
def test_contiguity_expected_matches_the_slow_reference(n_items):
    logits, targets, study_pos = random_trials(60, n_items, seed=10 + n_items)
    metric = StudyQueryAccuracy(n_items)
    metric.update(old_new_correct(logits, targets), study_pos)
    out = metric.compute()
    torch.testing.assert_close(out["contiguity_expected"], reference_expected(logits, targets, study_pos))
    controlled = (out["contiguity_hits"] - out["contiguity_expected"]) / out["contiguity_counts"]
    torch.testing.assert_close(out["controlled_contiguity_curve"], controlled, equal_nan=True)
    assert metric.contiguity_cells.dtype == torch.int32 and metric.contiguity_cells.shape == (n_items,) * 3
    assert int(metric.contiguity_cells.sum()) == int(out["contiguity_counts"].sum())


def test_contiguity_cells_keep_counting_after_a_merge():
    """A merge sums the int32 cell counts to int64 (torch.sum promotes): later updates still add to them."""
    logits, targets, study_pos = random_trials(30, 6, seed=2)
    whole, first, second = StudyQueryAccuracy(6), StudyQueryAccuracy(6), StudyQueryAccuracy(6)
    whole.update(old_new_correct(logits, targets), study_pos)
    first.update(old_new_correct(logits[:10], targets[:10]), study_pos[:10])
    second.update(old_new_correct(logits[10:20], targets[10:20]), study_pos[10:20])
    first.merge_state(second)
    first.update(old_new_correct(logits[20:], targets[20:]), study_pos[20:])
    assert torch.equal(first.contiguity_cells.long(), whole.contiguity_cells.long())
    assert torch.equal(first.compute()["contiguity_expected"], whole.compute()["contiguity_expected"])


L_SIM = 32


def simulated_test(condition: str, contiguity: float, n_sets: int = 256, seed: int = 0) -> dict:
    """The real test design (``CyclicDesign``) answered by a simulated model with primacy and no recency: an old
    query is answered "old" with probability 0.75 - 0.4 · s / (L - 1) for study position s, plus ``contiguity`` when
    the previous old query asked for a neighbour (|lag| = 1); distractors are always rejected."""
    study = held_out_sets(n_sets, L_SIM, 256, seed=seed)
    design = CyclicDesign.build(study, 256, seed=seed, condition=condition)
    batch = design.batch(torch.arange(len(design)))
    study_pos = batch["study_pos"]  # B L
    eligible, lag = contiguity_pairs(study_pos)  # B L
    p_old = 0.75 - 0.4 * study_pos.clamp(min=0) / (L_SIM - 1) + contiguity * (eligible & (lag.abs() == 1))  # B L
    says_old = torch.rand(study_pos.shape, generator=torch.Generator().manual_seed(seed)) < p_old  # B L
    metric = StudyQueryAccuracy(L_SIM)
    metric.update(old_new_correct(torch.where((study_pos >= 0) & says_old, 1.0, -1.0), batch["targets"]), study_pos)
    return metric.compute()


@pytest.mark.parametrize("condition", ["half", "uniform"])
def test_controlled_contiguity_is_flat_for_a_model_with_primacy_and_no_contiguity(condition):
    out = simulated_test(condition, contiguity=0.0)
    lags, raw, controlled = out["contiguity_lags"], out["contiguity_curve"], out["controlled_contiguity_curve"]
    backward, forward = raw[(lags >= -16) & (lags <= -8)].mean(), raw[(lags >= 8) & (lags <= 16)].mean()
    assert backward - forward > 0.1, "the raw curve shows a spurious backward advantage: it carries primacy"
    assert (round(float(backward), 2), round(float(forward), 2)) == (0.62, 0.47)  # README.md's numbers
    assert abs(float(controlled.nanmean())) < 0.01
    backward, forward = controlled[(lags >= -16) & (lags <= -8)].mean(), controlled[(lags >= 8) & (lags <= 16)].mean()
    assert abs(float(backward - forward)) < 0.02
    assert controlled[lags == 0].isnan().all(), "no item is queried twice: lag 0 has no queries"


@pytest.mark.parametrize("condition", ["half", "uniform"])
def test_controlled_contiguity_recovers_a_built_in_contiguity_effect(condition):
    out = simulated_test(condition, contiguity=0.2)
    lags, controlled = out["contiguity_lags"], out["controlled_contiguity_curve"]
    # +0.2 at |d| = 1, less the share of it that the cell means absorb (about 2 of 31 queries a cell: ~0.013)
    assert (controlled[lags.abs() == 1] > 0.15).all() and (controlled[lags.abs() == 1] < 0.21).all()
    far = controlled[lags.abs() >= 2]
    assert abs(float(far.nanmean())) < 0.02
    assert abs(float(far[:20].mean() - far[-20:].mean())) < 0.02, "no serial-position slope is left"


# The serial-position curve by delay (tasks with a delay between study and queries: reconstruction).


def delay_batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Three trials of L = 3 at delays 0, 5, 0 (the metric counts delays 0, 2, 5); trial 2 has a query about no item."""
    correct = torch.tensor([[True, False, True], [True, True, False], [False, False, False]])
    study_pos = torch.tensor([[0, 1, 2], [2, -1, 0], [1, 0, 2]])
    return correct, study_pos, torch.tensor([0, 5, 0])


def test_delay_counts_by_delay_and_study_position_hand_computed():
    metric = StudyQueryAccuracy(3, delays=[0, 2, 5])
    metric.update(*delay_batch())
    out = metric.compute()
    # delay 0: trials 1 and 3 ask every study position once each; right on s0 and s2 in trial 1 only
    # delay 5: trial 2 asks s2 (right) and s0 (wrong); its query about no item does not count
    assert out["delay_counts"].tolist() == [[2, 2, 2], [0, 0, 0], [1, 0, 1]]
    assert out["delay_hits"].tolist() == [[1, 0, 1], [0, 0, 0], [0, 0, 1]]
    assert out["delays"].tolist() == [0, 2, 5]
    curves = out["serial_position_by_delay"]
    assert curves[0].tolist() == [0.5, 0.0, 0.5] and curves[1].isnan().all()
    assert curves[2, 0] == 0.0 and curves[2, 1].isnan() and curves[2, 2] == 1.0
    assert out["counts"].sum() == 8, "the study x query matrix counts the same answers"


def test_delay_counts_are_exact_when_split_across_updates_and_processes():
    gen = torch.Generator().manual_seed(3)
    correct = torch.rand(40, 5, generator=gen) < 0.5
    study_pos = torch.where(torch.rand(40, 5, generator=gen) < 0.2, -1, torch.rand(40, 5, generator=gen).argsort(1))
    delay = torch.tensor([0, 4, 8])[torch.randint(0, 3, (40,), generator=gen)]
    whole, first, second = (StudyQueryAccuracy(5, delays=[0, 4, 8]) for _ in range(3))
    whole.update(correct, study_pos, delay)
    first.update(correct[:7], study_pos[:7], delay[:7])
    first.update(correct[7:20], study_pos[7:20], delay[7:20])
    second.update(correct[20:], study_pos[20:], delay[20:])
    for key in ("delay_hits", "delay_counts"):
        assert torch.equal(getattr(first, key) + getattr(second, key), getattr(whole, key)), key
    first.merge_state(second)
    merged, expected = first.compute(), whole.compute()
    assert torch.equal(merged["delay_counts"], expected["delay_counts"])
    assert int(expected["delay_counts"].sum()) == int((study_pos >= 0).sum())
    torch.testing.assert_close(merged["serial_position_by_delay"], expected["serial_position_by_delay"],
                               equal_nan=True, rtol=0, atol=0)


def test_a_delay_outside_the_list_or_a_missing_delay_is_rejected():
    correct, study_pos, _ = delay_batch()
    metric = StudyQueryAccuracy(3, delays=[0, 2, 5])
    with pytest.raises(ValueError, match=r"got delays \[3\]: it counts only \[0, 2, 5\]"):
        metric.update(correct, study_pos, torch.tensor([0, 3, 5]))
    with pytest.raises(ValueError, match=r"got delays \[9\]"):
        metric.update(correct, study_pos, torch.tensor([9, 0, 0]))  # beyond the last delay
    with pytest.raises(ValueError, match=r"expects a delay in \[0, 2, 5\] per trial, got none"):
        metric.update(correct, study_pos)
    with pytest.raises(ValueError, match="expects no delay per trial, got delays"):
        StudyQueryAccuracy(3).update(correct, study_pos, torch.tensor([0, 0, 0]))
    assert int(metric.counts.sum()) == 0 and int(metric.contiguity_counts.sum()) == 0, "a rejected batch counts nothing"
    for delays in ([], [2, 1], [1, 1], [-1, 2]):
        with pytest.raises(ValueError, match="delays="):
            StudyQueryAccuracy(3, delays=delays)


def test_summarize_gives_the_serial_position_curve_by_delay():
    hits, counts = torch.tensor([[3, 1, 0, 2], [0, 0, 0, 0]]), torch.tensor([[4, 4, 2, 4], [1, 2, 3, 4]])
    states = {"hits": torch.ones(4, 4), "counts": torch.ones(4, 4), "distractor_hits": torch.zeros(4),
              "distractor_counts": torch.zeros(4)}
    out = summarize(**states, delays=torch.tensor([0, 7]), delay_hits=hits, delay_counts=counts)
    torch.testing.assert_close(out["serial_position_by_delay"], hits.double() / counts.double())
    # L = 4, q = 1: early - late = curve[0] - curve[3]
    assert out["early_minus_late_by_delay"].tolist() == pytest.approx([0.75 - 0.5, 0.0])
    assert "serial_position_by_delay" not in summarize(**states)
    with pytest.raises(ValueError, match="all three or none"):
        summarize(**states, delays=torch.tensor([0, 7]), delay_hits=hits)
    with pytest.raises(ValueError, match=r"\(delays, L\) = \(3, 4\)"):
        summarize(**states, delays=torch.tensor([0, 7, 9]), delay_hits=hits, delay_counts=counts)
