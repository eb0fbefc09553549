"""CMR's simulated recall sequences follow exactly the distribution its likelihood scores: at three items, the
frequencies of all 16 sequences over 100,000 simulated lists match the probabilities ``cmr_choice_probabilities``
gives, within their sampling error; lists are sequences of distinct serial positions closed by padding; a seed fixes
them; bad input is one line naming the argument."""

import itertools

import numpy as np
import pytest
from conftest import extra_module

from primacy.analysis.behaviour.cmr.generate import cmr_generate, cmr_generate_many
from primacy.analysis.behaviour.cmr.likelihood import PARAMETER_NAMES, CMRParameters, cmr_choice_probabilities
from primacy.errors import UsageError

# Mild choice rules and stop probabilities: every 3-item sequence has probability > 0.005, so each expects > 500 of
# 100,000 lists (the chi-square approximation holds).
PARAMETER_SETS = {
    "slow-drift": dict(B_enc=0.3, B_start=0.4, B_rec=0.5, Afc=0.1, Dfc=0.7, Acf=0.05, Dcf=0.6, Lfc=0.3, Lcf=0.4,
                       P1=1.0, P2=0.3, T=1.0, X1=0.05, X2=0.2),
    "fast-drift": dict(B_enc=0.8, B_start=0.0, B_rec=0.9, Afc=0.0, Dfc=0.85, Acf=0.0, Dcf=0.85, Lfc=0.15, Lcf=0.15,
                       P1=2.0, P2=1.0, T=0.3, X1=0.1, X2=0.8),
}
SEQUENCES = [list(s) for k in range(4) for s in itertools.permutations(range(3), k)]  # every order of every subset
PADDED = np.array([s + [-2] * (3 - len(s)) for s in SEQUENCES])  # 16 3


def sequence_probabilities(params: dict) -> np.ndarray:
    """Each of the 16 sequences' probability (16,): the product of its recalls' and its stop's choice probabilities."""
    choices = cmr_choice_probabilities(params, PADDED, 3)  # 16 S L+1
    return np.array([np.prod([choices[b, s, i] for s, i in enumerate([*seq, 3])]) for b, seq in enumerate(SEQUENCES)])


def test_simulated_sequences_follow_the_likelihoods_distribution():
    """Both sets simulated in one call. Chi-square goodness of fit (15 degrees of freedom) at significance 10⁻⁶, and
    every sequence's frequency within 5.5 standard errors sqrt(p (1 - p) / N) of its probability (a Bonferroni bound
    over 16 cells at about the same significance). The seed is fixed, so the test is deterministic; one standard
    error is 0.0013 at p = 0.2, and sampling at a temperature 10% off fails both checks (chi-square p < 10⁻¹⁴)."""
    chi2 = extra_module("scipy.stats").chi2
    n = 100_000
    lists = cmr_generate_many(list(PARAMETER_SETS.values()), n, 3, seed=0)  # P N 3
    codes = {tuple(row): k for k, row in enumerate(PADDED.tolist())}
    for name, params, sampled in zip(PARAMETER_SETS, PARAMETER_SETS.values(), lists):
        expected = sequence_probabilities(params)
        assert expected.sum() == pytest.approx(1.0, abs=1e-12) and expected.min() > 0.005
        rows, counts = np.unique(sampled, axis=0, return_counts=True)
        observed = np.zeros(len(SEQUENCES))
        for row, count in zip(rows.tolist(), counts):
            observed[codes[tuple(row)]] = count  # a KeyError: a sequence that is not one of the 16
        statistic = ((observed - n * expected) ** 2 / (n * expected)).sum()
        assert chi2.sf(statistic, len(SEQUENCES) - 1) > 1e-6, (name, statistic)
        z = (observed / n - expected) / np.sqrt(expected * (1 - expected) / n)
        assert np.abs(z).max() < 5.5, (name, z.round(2))


def test_lists_are_distinct_positions_then_padding():
    params = CMRParameters(T=0.3, X1=0.02, X2=0.3)
    lists = cmr_generate(params, 200, 12, seed=3)  # B L
    assert lists.shape == (200, 12) and lists.dtype == np.int64
    recalled = lists >= 0
    assert ((lists == -2) | recalled).all()
    assert (np.diff(recalled.astype(int), axis=1) <= 0).all()  # padding only after the last recall
    for row in lists:
        assert len(set(row[row >= 0])) == np.count_nonzero(row >= 0)
    assert recalled.sum(1).min() < 12 == recalled.sum(1).max()  # some lists stop early, some recall every item


def test_the_docstring_example():
    lists = cmr_generate(CMRParameters(T=0.5, X1=0.1), n_lists=3, n_items=5, seed=0)
    assert lists.tolist() == [[0, 2, 1, 3, -2], [-2, -2, -2, -2, -2], [4, 3, 0, 1, -2]]


def test_a_seed_fixes_the_lists_and_one_set_is_the_many_sets_path():
    params = PARAMETER_SETS["fast-drift"]
    first = cmr_generate(params, 50, 8, seed=7)
    np.testing.assert_array_equal(first, cmr_generate(params, 50, 8, seed=7))
    np.testing.assert_array_equal(first, cmr_generate(params, 50, 8, seed=np.random.default_rng(7)))
    assert not np.array_equal(first, cmr_generate(params, 50, 8, seed=8))
    table = np.array([[params[name] for name in PARAMETER_NAMES]])
    np.testing.assert_array_equal(first, cmr_generate_many(table, 50, 8, seed=7)[0])


def one_line(error: pytest.ExceptionInfo, *names: str) -> None:
    message = str(error.value)
    assert "\n" not in message and all(name in message for name in names), message


@pytest.mark.parametrize("arguments, names", [
    (dict(n_lists=0), ("n_lists=0",)),
    (dict(n_lists=2.5), ("n_lists=2.5",)),
    (dict(n_items=0), ("n_items=0",)),
    (dict(n_items=True), ("n_items=True",)),
    (dict(seed=-1), ("seed=-1",)),
    (dict(seed="a"), ("seed='a'",)),
    (dict(params={**PARAMETER_SETS["slow-drift"], "B_rec": 1.5}), ("B_rec=1.5",)),
    (dict(params={**PARAMETER_SETS["slow-drift"], "T": 0.0}), ("T=0",)),
    (dict(params={"B_enc": 0.5}), ("params", "B_rec")),
])
def test_bad_input_is_one_line_naming_the_argument(arguments, names):
    call = dict(params=PARAMETER_SETS["slow-drift"], n_lists=2, n_items=4, seed=0) | arguments
    with pytest.raises(UsageError) as error:
        cmr_generate(**call)
    one_line(error, *names)


def test_a_bad_table_names_its_row():
    table = np.array([[PARAMETER_SETS["slow-drift"][name] for name in PARAMETER_NAMES]] * 2)
    table[1, PARAMETER_NAMES.index("X1")] = -0.1
    with pytest.raises(UsageError) as error:
        cmr_generate_many(table, 2, 4, seed=0)
    one_line(error, "param_sets[1]", "X1")
