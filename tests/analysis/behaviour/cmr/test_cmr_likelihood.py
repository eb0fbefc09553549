"""CMR's likelihood of whole free-recall sequences equals cymr's (Morton & Polyn's CMR, a test dependency) for the
people of psifr's Morton2013 and PEERS datasets, loaded as primacy loads them; it is a probability (every step's
choices, the stop included, sum to 1, and so do all the sequences of a short list); intrusions and repetitions cost
nothing; an event the model all but rules out costs cymr's floor; bad input is one line naming the argument."""

import itertools
import math
from dataclasses import asdict

import numpy as np
import pytest
from conftest import extra_module

from primacy.analysis.behaviour.cmr.likelihood import (
    MIN_PROBABILITY,
    PARAMETER_NAMES,
    CMRParameters,
    cmr_choice_probabilities,
    cmr_list_log_likelihoods,
    cmr_log_likelihood,
    cmr_log_likelihoods,
    cmr_person_log_likelihood,
)
from primacy.errors import UsageError
from primacy.workflows.humans import people

TYPICAL = asdict(CMRParameters())  # B_enc 0.6, B_rec 0.8, P1 2, P2 1, T 0.1, X1 0.001, X2 0.5, L 0.15, D 0.85
PARAMETER_SETS = {
    "typical": TYPICAL,
    "slow-drift": dict(B_enc=0.3, B_start=0.4, B_rec=0.5, Afc=0.1, Dfc=0.7, Acf=0.05, Dcf=0.6, Lfc=0.3, Lcf=0.4,
                       P1=5.0, P2=0.3, T=0.3, X1=0.02, X2=0.2),
    "fast-drift": dict(B_enc=0.9, B_start=0.1, B_rec=0.2, Afc=0.0, Dfc=1.0, Acf=0.2, Dcf=1.0, Lfc=0.7, Lcf=0.9,
                       P1=0.5, P2=2.5, T=0.03, X1=0.0001, X2=0.9),
}
# Totals are about -1e3 per person; ours and cymr's differ by rounding only (about 1e-12 seen). Absolute tolerance.
ATOL = 1e-8


@pytest.fixture(scope="module")
def fr():
    return extra_module("psifr.fr")


@pytest.fixture(scope="module")
def cmr():
    return extra_module("cymr.cmr")


def cymr_log_likelihoods(cmr, raw, list_length: int, params: dict) -> dict:
    """cymr's log-likelihood of each subject of a psifr raw table, with localist items (config_loc_cmr): each
    study event's item_index is its serial position, so item i of every list has pattern i."""
    param_def, patterns = cmr.config_loc_cmr(list_length)
    data = raw.copy()
    data["item_index"] = np.where(data["trial_type"] == "study", data["position"] - 1, np.nan)
    logl = cmr.CMR().likelihood(data, params, param_def=param_def, patterns=patterns)["logl"]
    return {subject: float(value) for subject, value in logl.items()}


def check_people(fr, cmr, name: str, n_subjects: int | None, params: dict) -> float:
    """The first ``n_subjects`` people of ``name`` by id (all with None): ours equal cymr's; the largest difference."""
    dataset = people.DATASETS[name]
    raw = fr.sample_data(dataset.psifr_name)
    if n_subjects is not None:
        raw = raw[raw["subject"].isin(sorted(raw["subject"].unique())[:n_subjects])]
    theirs = cymr_log_likelihoods(cmr, raw, dataset.list_length, params)
    persons = people.people(raw, dataset.list_length)  # how primacy loads them (people.load on the whole table)
    assert sorted(p.subject for p in persons) == sorted(theirs)
    worst = 0.0
    for person in persons:
        ours = cmr_person_log_likelihood(params, person.study, person.recalls)
        assert ours == pytest.approx(theirs[person.subject], rel=0, abs=ATOL), person.subject
        worst = max(worst, abs(ours - theirs[person.subject]))
    return worst


@pytest.mark.parametrize("params", PARAMETER_SETS.values(), ids=PARAMETER_SETS.keys())
@pytest.mark.parametrize("name", sorted(people.DATASETS))
def test_two_peoples_log_likelihoods_equal_cymrs(fr, cmr, name, params):
    check_people(fr, cmr, name, 2, params)


@pytest.mark.slow
@pytest.mark.parametrize("params", PARAMETER_SETS.values(), ids=PARAMETER_SETS.keys())
@pytest.mark.parametrize("name", sorted(people.DATASETS))
def test_every_persons_log_likelihood_equals_cymrs(fr, cmr, name, params):
    """docs/humans.md: within 4e-12 for each of the 166 people at each of the three sets."""
    assert check_people(fr, cmr, name, None, params) < 4e-12


def psifr_table(pd, recalls: list[list[int]], list_length: int):
    """A psifr raw table of one subject: list k studies items w0..w(L-1) in order and recalls ``recalls[k]``
    (serial positions; -1 an intrusion, of an item no list studied)."""
    rows = []
    for k, sequence in enumerate(recalls, start=1):
        rows += [dict(subject=1, list=k, trial_type="study", position=i + 1, item=f"w{i}") for i in range(list_length)]
        rows += [dict(subject=1, list=k, trial_type="recall", position=r + 1, item=f"w{i}" if i >= 0 else "x")
                 for r, i in enumerate(sequence)]
    return pd.DataFrame(rows)


def padded(recalls: list[list[int]]) -> np.ndarray:
    """Serial positions (B, R), -2 after each list's last output."""
    width = max(1, max(len(r) for r in recalls))
    return np.array([r + [-2] * (width - len(r)) for r in recalls])


def test_intrusions_and_repetitions_are_dropped_as_cymr_drops_them(cmr):
    pd = extra_module("pandas")
    n, params = 6, PARAMETER_SETS["slow-drift"]
    with_errors = [[3, -1, 4, 3, 5, -1], [-1, -1], [0, 0, 0, 1], []]
    clean = [[3, 4, 5], [], [0, 1], []]
    ours = cmr_list_log_likelihoods(params, padded(with_errors), n)
    np.testing.assert_allclose(ours, cmr_list_log_likelihoods(params, padded(clean), n), rtol=0, atol=1e-13)
    theirs = cymr_log_likelihoods(cmr, psifr_table(pd, with_errors, n), n, params)[1]
    assert ours.sum() == pytest.approx(theirs, rel=0, abs=ATOL)


def test_cymr_over_a_word_pool_equals_ours_only_while_afc_is_0(cmr):
    """Ours is cymr set up per list (``cymr_log_likelihoods``: config_loc_cmr(L), item_index the serial position).
    cymr set up over a word pool (config_loc_cmr(pool), item_index a word's place in it, as in cymr's sample data)
    has a context unit per pool word: Afc reaches all of them, not only the list's, so it differs once Afc > 0."""
    pd = extra_module("pandas")
    n, pool, recalls = 6, 60, [[5, 4, 0, 1], [2, 3], [5, -1, 0]]
    data = psifr_table(pd, recalls, n)
    data["item_index"] = np.where(data["trial_type"] == "study", (data["list"] - 1) * 20 + data["position"] - 1,
                                  np.nan)  # list k studies pool words 20(k-1) .. 20(k-1)+5
    param_def, patterns = cmr.config_loc_cmr(pool)
    differences = []
    for afc in (0.0, 0.02):
        params = {**TYPICAL, "Afc": afc}
        over_pool = cmr.CMR().likelihood(data, params, param_def=param_def, patterns=patterns)["logl"].iloc[0]
        differences.append(float(over_pool) - cmr_log_likelihood(params, padded(recalls), n))
    assert differences[0] == pytest.approx(0.0, abs=ATOL)
    assert differences[1] > 0.1  # 0.42 seen


def test_morton2013_subject_11_per_list_and_over_the_pool_as_docs_humans_says(fr, cmr):
    """docs/humans.md's example: subject 11 at CMRParameters() with Afc = 0.02 has -2,234.0 here and in cymr per list,
    -4,137.7 in cymr over Morton2013's pool of 768 words (item_index = item_number - 1, as in cymr's sample data)."""
    raw = fr.sample_data(people.DATASETS["Morton2013"].psifr_name)
    raw = raw[raw["subject"] == 11]
    params = {**TYPICAL, "Afc": 0.02}
    (person,) = people.people(raw, 24)
    ours = cmr_person_log_likelihood(params, person.study, person.recalls)
    assert cymr_log_likelihoods(cmr, raw, 24, params)[11] == pytest.approx(ours, rel=0, abs=ATOL)
    over_pool = raw.assign(item_index=raw["item_number"] - 1)
    param_def, patterns = cmr.config_loc_cmr(768)
    theirs = cmr.CMR().likelihood(over_pool, params, param_def=param_def, patterns=patterns)["logl"].iloc[0]
    assert (round(ours, 1), round(float(theirs), 1)) == (-2234.0, -4137.7)


def test_an_all_but_impossible_event_costs_cymrs_floor(cmr):
    """X1 = 0 makes stopping at once 10⁻⁶ (cymr's least p_stop); a sharp choice rule (T = 0.01) makes recalling the
    items backwards about e^-100 per choice; each such event costs log 10⁻⁵, as in cymr."""
    pd = extra_module("pandas")
    n = 5
    params = {**TYPICAL, "X1": 0.0, "T": 0.01}
    recalls = [[], [4, 3, 2, 1, 0]]
    ours = cmr_list_log_likelihoods(params, padded(recalls), n)
    assert ours[0] == pytest.approx(math.log(MIN_PROBABILITY), rel=1e-12)
    assert 5 * math.log(MIN_PROBABILITY) <= ours[1] < 3 * math.log(MIN_PROBABILITY)  # floored, at most 5 times
    assert ours.sum() == pytest.approx(cymr_log_likelihoods(cmr, psifr_table(pd, recalls, n), n, params)[1],
                                       rel=0, abs=ATOL)


def test_where_cymrs_choice_rule_overflows_ours_gives_its_limit(cmr):
    """At T = 0.001, e^(2a/T) overflows in cymr (a ≈ 1: e^2000) and its log-likelihood is NaN; ours is finite and
    approaches T = 0.001's value from T slightly above (the softmax is computed relative to its largest term)."""
    pd = extra_module("pandas")
    n, recalls = 5, [[0, 1, 2], [4, 3]]
    params = {**TYPICAL, "T": 0.001}
    assert math.isnan(cymr_log_likelihoods(cmr, psifr_table(pd, recalls, n), n, params)[1])
    ours = cmr_log_likelihood(params, padded(recalls), n)
    assert math.isfinite(ours)
    assert ours == pytest.approx(cmr_log_likelihood({**params, "T": 0.001 * (1 + 1e-9)}, padded(recalls), n),
                                 abs=1e-5)


@pytest.mark.parametrize("params", PARAMETER_SETS.values(), ids=PARAMETER_SETS.keys())
def test_every_sequence_of_a_short_list_adds_up_to_one(params):
    """All 16 recall sequences of a 3-item list (every order of every subset, each ended by a stop), at a choice
    rule mild enough that no event falls below cymr's floor (which would add probability)."""
    params = {**params, "X1": 0.05, "T": max(params["T"], 0.5)}
    sequences = [list(s) for k in range(4) for s in itertools.permutations(range(3), k)]
    choices = cmr_choice_probabilities(params, padded(sequences), 3)  # B S L+1
    events = [choices[b, s, i] for b, seq in enumerate(sequences) for s, i in enumerate([*seq, 3])]
    assert len(sequences) == 16 and min(events) > MIN_PROBABILITY
    likelihood = np.exp(cmr_list_log_likelihoods(params, padded(sequences), 3))
    assert likelihood.sum() == pytest.approx(1.0, abs=1e-12)


def test_each_steps_choices_sum_to_one_and_give_the_likelihood():
    recalls = [[2, 0, 1, 3], [1], [], [3, -1, 2]]
    n, params = 4, PARAMETER_SETS["slow-drift"]
    choices = cmr_choice_probabilities(params, padded(recalls), n)  # B S L+1
    assert choices.shape == (4, 5, n + 1)
    steps = np.array([5, 2, 1, 3])  # correct recalls + the stop
    exists = np.arange(5) < steps[:, None]
    np.testing.assert_allclose(choices[exists].sum(-1), 1.0, rtol=0, atol=1e-14)
    assert np.isnan(choices[~exists]).all()
    assert (choices[0, 1, 2] == 0) and (choices[0, 4, :n] == 0).all() and choices[0, 4, n] == 1  # no item twice
    events = [[choices[b, s, i] for s, i in enumerate([*(r for r in seq if r >= 0), n])]
              for b, seq in enumerate(recalls)]
    np.testing.assert_allclose(cmr_list_log_likelihoods(params, padded(recalls), n),
                               [np.log(np.maximum(e, MIN_PROBABILITY)).sum() for e in events], rtol=1e-13)


def test_a_dataclass_and_a_dict_of_cymrs_names_are_the_same_parameters():
    positions = padded([[0, 1, 2], [5, 4]])
    assert cmr_log_likelihood(CMRParameters(**TYPICAL), positions, 6) == cmr_log_likelihood(TYPICAL, positions, 6)


def test_many_parameter_sets_at_once_equal_one_at_a_time():
    """A table (P, 14) or a list of sets: each total equals that set's own call (the lists and sets share one loop)."""
    positions = padded([[2, 0, 1, 3, 5, 4], [1, -1, 1], [], [3, 2], [5]])
    sets = list(PARAMETER_SETS.values())
    one_at_a_time = [cmr_log_likelihood(p, positions, 6) for p in sets]
    table = np.array([[p[name] for name in PARAMETER_NAMES] for p in sets])
    np.testing.assert_allclose(cmr_log_likelihoods(sets, positions, 6), one_at_a_time, rtol=1e-13)
    np.testing.assert_allclose(cmr_log_likelihoods(table, positions, 6), one_at_a_time, rtol=1e-13)


def one_line(error: pytest.ExceptionInfo, *names: str) -> None:
    message = str(error.value)
    assert "\n" not in message and all(name in message for name in names), message


def test_bad_input_is_one_line_naming_the_argument():
    ok = padded([[0, 1]])
    with pytest.raises(UsageError) as error:
        cmr_person_log_likelihood(TYPICAL, np.arange(8).reshape(2, 4), np.array([[0, 1, -1]]))
    one_line(error, "study", "recalls")
    with pytest.raises(UsageError) as error:
        cmr_log_likelihood(TYPICAL, padded([[0, 4]]), 4)
    one_line(error, "positions", "n_items")
    with pytest.raises(UsageError) as error:
        cmr_log_likelihood(TYPICAL, np.array([[0, -3]]), 4)
    one_line(error, "positions")
    with pytest.raises(UsageError) as error:
        cmr_log_likelihood(TYPICAL, np.array([[0, -2, 1]]), 4)
    one_line(error, "positions", "padding")
    with pytest.raises(UsageError) as error:
        cmr_log_likelihood(TYPICAL, np.array([0.0, 1.0]), 4)
    one_line(error, "positions")
    with pytest.raises(UsageError) as error:
        cmr_log_likelihood(TYPICAL, ok, 0)
    one_line(error, "n_items")
    with pytest.raises(UsageError) as error:
        cmr_log_likelihood({**TYPICAL, "B_enc": 1.5}, ok, 4)
    one_line(error, "B_enc")
    with pytest.raises(UsageError) as error:
        cmr_log_likelihood({**TYPICAL, "T": 0.0}, ok, 4)
    one_line(error, "T=")
    bad_names = {k: v for k, v in TYPICAL.items() if k != "P2"} | {"Aff": 0.0}
    with pytest.raises(UsageError) as error:
        cmr_log_likelihood(bad_names, ok, 4)
    one_line(error, "params", "P2", "Aff")
    table = np.array([[TYPICAL[name] for name in PARAMETER_NAMES]] * 3)
    table[2, PARAMETER_NAMES.index("B_rec")] = -0.1
    with pytest.raises(UsageError) as error:
        cmr_log_likelihoods(table, ok, 4)
    one_line(error, "param_sets[2]", "B_rec")
    with pytest.raises(UsageError) as error:
        cmr_log_likelihoods(table[:, :-1], ok, 4)
    one_line(error, "param_sets", "X2")
