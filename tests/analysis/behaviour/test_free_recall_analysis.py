"""Free-recall analyses: hand-written sequences give their known curves, random recall order gives a flat lag-CRP,
and every curve and count equals psifr's (the independent oracle) on random data with intrusions, repetitions and
early stopping."""

import math

import numpy as np
import pytest
import torch

from primacy.analysis.behaviour.cmr.fits import FREE_RECALL_FIT_LAGS, fit_cmr, fit_free_recall
from primacy.analysis.behaviour.cmr.grid import CMRGrid
from primacy.analysis.behaviour.cmr.simulate import cmr_crp
from primacy.analysis.behaviour.free_recall import (
    FreeRecallCounts,
    first_recall_counts,
    free_recall_counts,
    lag_crp_counts,
    long_format_rows,
    output_counts,
    recall_positions,
    spc_counts,
    summarize,
)
from primacy.errors import UsageError

L = 8


@pytest.fixture(scope="module")
def fr():
    try:
        from psifr import fr
    except ImportError:
        pytest.fail("psifr is the oracle of these tests and comes with the test extra: pip install -e '.[test]'")
    return fr


def curves_of(study: torch.Tensor, recalls: torch.Tensor):
    positions = recall_positions(study, recalls)
    counts = free_recall_counts(positions, study.shape[1])
    return counts, summarize(counts)


def distinct_study(n_lists: int, n_items: int, vocab: int, generator: torch.Generator) -> torch.Tensor:
    return torch.rand(n_lists, vocab, generator=generator).argsort(dim=1)[:, :n_items]  # B L, distinct ids


def at_lag(curve: torch.Tensor, lag: int) -> float:
    return float(curve[lag + (curve.shape[0] - 1) // 2])


def test_recall_positions_docstring_example():
    positions = recall_positions(torch.tensor([[5, 6, 7]]), torch.tensor([[7, 9, 7, 5, -1]]))
    assert positions.tolist() == [[2, -1, 2, 0, -2]]


def test_forward_recall_of_every_item():
    study = distinct_study(5, L, 30, torch.Generator().manual_seed(0))
    counts, curves = curves_of(study, study)
    assert curves.spc.tolist() == [1.0] * L
    assert curves.pfr.tolist() == [1.0] + [0.0] * (L - 1)
    assert at_lag(curves.lag_crp, 1) == 1.0 and int(at_lag(counts.lag_actual, 1)) == 5 * (L - 1)
    assert all(at_lag(curves.lag_crp, k) == 0.0 for k in range(2, L))
    # going forward, no earlier item is ever left to recall: backward lags are never possible, hence NaN
    assert all(math.isnan(at_lag(curves.lag_crp, k)) for k in range(-(L - 1), 1))
    assert (curves.intrusion_rate, curves.repetition_rate, curves.mean_recalled) == (0.0, 0.0, float(L))


def test_backward_recall_puts_all_mass_at_lag_minus_one():
    study = distinct_study(5, L, 30, torch.Generator().manual_seed(1))
    counts, curves = curves_of(study, study.flip(1))
    assert curves.pfr.tolist() == [0.0] * (L - 1) + [1.0]
    assert at_lag(curves.lag_crp, -1) == 1.0 and int(counts.lag_actual.sum()) == 5 * (L - 1)
    assert all(at_lag(curves.lag_crp, k) == 0.0 for k in range(-(L - 1), -1))
    assert all(math.isnan(at_lag(curves.lag_crp, k)) for k in range(L))


def test_empty_recall_counts_nothing():
    study = torch.arange(2 * L).reshape(2, L)
    counts, curves = curves_of(study, torch.full((2, 5), -1))
    assert counts.lists == 2 and counts.outputs == 0 and counts.correct == 0
    for tally in (counts.spc, counts.first_recall, counts.lag_actual, counts.lag_possible):
        assert tally.tolist() == [0] * tally.shape[0]
    assert curves.spc.tolist() == [0.0] * L and curves.mean_recalled == 0.0
    assert curves.pfr.isnan().all() and math.isnan(curves.intrusion_rate)  # no list with a correct output


def test_intrusions_and_repetitions_counted_as_written():
    study = torch.tensor([[10, 11, 12, 13]])
    recalls = torch.tensor([[99, 11, 12, 11, 98, 13, 10, -1]])
    positions = recall_positions(study, recalls)
    assert positions.tolist() == [[-1, 1, 2, 1, -1, 3, 0, -2]]
    assert [int(x) for x in output_counts(positions, 4)] == [7, 4, 2, 1]  # outputs, correct, intrusions, repetitions
    assert spc_counts(positions, 4).tolist() == [1, 1, 1, 1]
    assert first_recall_counts(positions, 4).tolist() == [0, 1, 0, 0]  # the leading intrusion is skipped
    # Transitions 11 -> 12 (lag +1; 10, 12, 13 left: lags -1, +1, +2) and 13 -> 10 (lag -3; only 10 left). 12 -> 11
    # (a repetition) and every step into or out of an intrusion do not count.
    actual, possible = lag_crp_counts(positions, 4)  # lags -3..3
    assert actual.tolist() == [1, 0, 0, 0, 1, 0, 0]
    assert possible.tolist() == [1, 0, 1, 0, 1, 1, 0]


def test_random_recall_order_gives_a_flat_lag_crp():
    # At transition t (t = 1..L-1) L - t items are left, each next with probability 1 / (L - t). Lag k is available
    # with probability (L - |k|) / L (a study position at that lag exists) x (L - t) / (L - 1) (it is not among the
    # other t - 1 outputs so far): a factor in k times one in t, so actual / possible is the same for every k:
    # sum_t (L - t) / (L - 1) / (L - t) / sum_t (L - t) / (L - 1) = (L - 1) / (L (L - 1) / 2) = 2 / L.
    g = torch.Generator().manual_seed(2)
    study = distinct_study(20000, L, 50, g)
    order = torch.rand(20000, L, generator=g).argsort(dim=1)  # B L
    _, curves = curves_of(study, study.gather(1, order))
    crp = torch.cat([curves.lag_crp[: L - 1], curves.lag_crp[L:]])  # every lag but 0
    assert math.isnan(at_lag(curves.lag_crp, 0))
    np.testing.assert_allclose(crp.numpy(), 2 / L, atol=0.02, rtol=0)


def random_recall(n_lists: int, generator: torch.Generator, vocab: int = 40, n_steps: int = 12):
    """Study lists of L items drawn from ``vocab`` (so items recur across lists) and outputs that are studied items
    (repetitions likely) three times in four, otherwise any id (intrusions, some from other lists), stopping after
    0..n_steps outputs."""
    study = distinct_study(n_lists, L, vocab, generator)
    studied = study.gather(1, torch.randint(L, (n_lists, n_steps), generator=generator))  # B R
    other = torch.randint(vocab + 10, (n_lists, n_steps), generator=generator)
    recalls = torch.where(torch.rand(n_lists, n_steps, generator=generator) < 0.75, studied, other)
    length = torch.randint(n_steps + 1, (n_lists, 1), generator=generator)
    return study, recalls.masked_fill(torch.arange(n_steps) >= length, -1)


@pytest.fixture(scope="module")
def data():
    study, recalls = random_recall(200, torch.Generator().manual_seed(3))
    positions = recall_positions(study, recalls)
    first = positions[:, 0]
    # the oracle sees every case: empty lists, intrusion-first lists that recall later, repetitions
    assert (first == -2).any() and (first == -1).any() and output_counts(positions, L).repetitions > 20
    assert ((first == -1) & (positions >= 0).any(dim=1)).any()
    return study, recalls, positions


def psifr_curves(fr, rows):
    import pandas as pd

    merged = fr.merge_free_recall(pd.DataFrame(rows), recall_keys=["study_position"])
    spc = fr.spc(merged).sort_values(["subject", "input"])
    pfr = fr.pnr(merged).query("output == 1").sort_values(["subject", "input"])
    crp = fr.lag_crp(merged).sort_values(["subject", "lag"])
    return merged, spc, pfr, crp


def assert_equal_curves(ours: FreeRecallCounts, spc, pfr, crp):
    curves = summarize(ours)
    exact = {"atol": 1e-12, "rtol": 0}
    np.testing.assert_allclose(curves.spc.numpy(), spc["recall"].to_numpy(), **exact)
    np.testing.assert_allclose(curves.pfr.numpy(), pfr["prob"].to_numpy(), **exact)
    np.testing.assert_array_equal(ours.first_recall.numpy(), pfr["actual"].to_numpy())
    np.testing.assert_array_equal(np.full(L, int(ours.first_recall.sum())), pfr["possible"].to_numpy())
    np.testing.assert_array_equal(curves.lags.numpy(), crp["lag"].to_numpy())
    np.testing.assert_array_equal(ours.lag_actual.numpy(), crp["actual"].to_numpy())
    np.testing.assert_array_equal(ours.lag_possible.numpy(), crp["possible"].to_numpy())
    np.testing.assert_allclose(curves.lag_crp.numpy(), crp["prob"].to_numpy(), **exact)


def test_pooled_curves_and_counts_equal_psifr(fr, data):
    study, recalls, positions = data
    rows = long_format_rows(study, recalls, subject="all")
    merged, spc, pfr, crp = psifr_curves(fr, rows)
    ours = free_recall_counts(positions, L)
    assert ours.lag_actual.sum() > 200  # enough transitions to compare
    assert_equal_curves(ours, spc, pfr, crp)

    # psifr repeats an intrusion's row once per earlier list that studied its item (prior-list matching): one per output
    recall_rows = merged.query("recall").drop_duplicates(["subject", "list", "output"])
    assert ours.outputs == len(recall_rows) == sum(row["trial_type"] == "recall" for row in rows)
    assert ours.correct == len(merged.query("study and recall"))
    assert ours.intrusions == int(recall_rows["intrusion"].sum())
    # psifr's repeat also marks an intrusion said again; here that output is an intrusion, not a repetition
    assert ours.repetitions == int(((recall_rows["repeat"] > 0) & ~recall_rows["intrusion"]).sum())
    scored = recall_rows.dropna(subset=["input"])
    np.testing.assert_array_equal(scored["study_position"].to_numpy(), scored["input"].to_numpy())


def test_per_subject_curves_equal_psifr_and_counts_add_up(fr, data):
    study, recalls, positions = data
    subjects = [range(40), range(40, 110), range(110, 200)]  # unequal numbers of lists
    rows = [row for s, lists in enumerate(subjects)
            for row in long_format_rows(study[lists], recalls[lists], subject=s, list_offset=1000 * s)]
    assert {row["list"] for row in rows if row["subject"] == 1} == set(range(1001, 1071))
    _, spc, pfr, crp = psifr_curves(fr, rows)
    parts = [free_recall_counts(positions[lists], L) for lists in subjects]
    for s, ours in enumerate(parts):
        assert_equal_curves(ours, spc[spc["subject"] == s], pfr[pfr["subject"] == s], crp[crp["subject"] == s])
    pooled = FreeRecallCounts(*(sum(fields) for fields in zip(*parts)))
    for summed, whole in zip(pooled, free_recall_counts(positions, L)):
        assert torch.equal(summed, whole)


def test_export_is_one_based_and_omits_padding():
    rows = long_format_rows(torch.tensor([[5, 6]]), torch.tensor([[6, 9, -1]]), subject=3, list_offset=4)
    assert rows == [
        {"subject": 3, "list": 5, "trial_type": "study", "position": 1, "item": 5, "study_position": None},
        {"subject": 3, "list": 5, "trial_type": "study", "position": 2, "item": 6, "study_position": None},
        {"subject": 3, "list": 5, "trial_type": "recall", "position": 1, "item": 6, "study_position": 2},
        {"subject": 3, "list": 5, "trial_type": "recall", "position": 2, "item": 9, "study_position": None},
    ]


@pytest.mark.parametrize(("study", "recalls", "words"), [
    (torch.zeros(2, 4, dtype=torch.long), torch.zeros(3, 4, dtype=torch.long), "lists"),
    (torch.arange(8).reshape(2, 4), torch.zeros(2, 0, dtype=torch.long), "recalls"),
    (torch.zeros(2, 0, dtype=torch.long), torch.zeros(2, 3, dtype=torch.long), "study"),
    (torch.tensor([[1, 2, 1]]), torch.tensor([[1]]), "distinct"),
    (torch.tensor([[1, 2, 3]]), torch.tensor([[1, -1, 2]]), "padding"),
    (torch.tensor([[1, 2, 3]]), torch.tensor([[1.0]]), "integer"),
])
def test_bad_input_is_a_one_line_usage_error(study, recalls, words):
    with pytest.raises(UsageError, match=words) as error:
        long_format_rows(study, recalls, subject=0)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(("positions", "n_items", "words"), [
    (torch.tensor([[0, 3]]), 3, r"\[-2, 2\]"),
    (torch.tensor([[0, -3]]), 3, r"\[-2, 2\]"),
    (torch.tensor([[0, 1]]), 0, "n_items=0"),
])
def test_bad_positions_are_a_one_line_usage_error(positions, n_items, words):
    for analysis in (spc_counts, first_recall_counts, lag_crp_counts, output_counts, free_recall_counts):
        with pytest.raises(UsageError, match=words) as error:
            analysis(positions, n_items)
        assert "\n" not in str(error.value)


@pytest.mark.parametrize("variant", ["paper", "canonical"])
def test_a_lag_crp_simulated_by_cmr_gets_its_parameters_back_from_its_variant(variant):
    lags, crp = cmr_crp(0.6, 0.5, 0.2, variant=variant, seed=5)  # another seed than the grids': fresh noise
    crp[lags == 0] = float("nan")  # as a free-recall lag-CRP has it: never possible
    fits = fit_free_recall(crp.numpy(), lags.numpy())
    assert set(fits) == {"paper", "canonical"}
    fit = fits[variant]
    assert fit.distance < 0.01 and (fit.beta_enc, fit.beta_rec, fit.gamma_ft) == pytest.approx((0.6, 0.5, 0.2))
    assert fit.fitted.shape == (10,)
    other = fits["canonical" if variant == "paper" else "paper"]
    assert other.distance > fit.distance


def test_the_fit_reads_lags_minus_five_to_five_without_zero_of_any_list_length():
    lags = np.arange(-(L * 2 - 1), L * 2)
    curve = np.exp(-np.abs(lags - 0.7)) + np.where(np.abs(lags) > 5, 10.0, 0.0)  # far lags must be ignored
    curve[lags == 0] = np.nan
    fit = fit_free_recall(curve, lags)["paper"]
    alone = fit_cmr(curve[np.isin(lags, FREE_RECALL_FIT_LAGS)], FREE_RECALL_FIT_LAGS, CMRGrid.shipped("paper"),
                    fit_lags=FREE_RECALL_FIT_LAGS)
    assert FREE_RECALL_FIT_LAGS.tolist() == [-5, -4, -3, -2, -1, 1, 2, 3, 4, 5]
    assert (fit.distance, fit.beta_enc, fit.beta_rec, fit.gamma_ft) == (
        alone.distance, alone.beta_enc, alone.beta_rec, alone.gamma_ft)
    assert np.array_equal(fit.fitted, alone.fitted)


def _lag_crp(study: torch.Tensor, recalls: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    _, curves = curves_of(study, recalls)
    return curves.lag_crp.numpy(), curves.lags.numpy()


@pytest.mark.parametrize("case", ["forward recall", "list of 5", "flat"])
def test_a_lag_crp_without_a_fit_has_none_for_each_variant(case):
    generator = torch.Generator().manual_seed(2)
    if case == "forward recall":  # no backward lag is ever possible
        study = distinct_study(5, L, 30, generator)
        curve, lags = _lag_crp(study, study)
    elif case == "list of 5":  # lags -4..4 only
        study = distinct_study(50, 5, 30, generator)
        curve, lags = _lag_crp(study, study[:, torch.randperm(5, generator=generator)])
    else:
        lags = np.arange(-7, 8)
        curve = np.where(lags == 0, np.nan, 0.25)
    assert fit_free_recall(curve, lags) == {"paper": None, "canonical": None}
