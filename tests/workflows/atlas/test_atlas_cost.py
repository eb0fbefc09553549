"""What an atlas still needs (primacy atlas --status): the most pilots a search can still train, each row's runs to go,
and their time at the wall time its finished runs took."""

import json

import pytest

from primacy.workflows.atlas.cost import ToGo, estimate, pilots_left, to_go
from primacy.workflows.atlas.knob_search import Search, search
from primacy.workflows.atlas.planner import AtlasRun, RowState
from primacy.workflows.atlas.spec import Row
from primacy.workflows.runs import Status

BAND = (0.70, 0.80)
VALUES = tuple(range(7))


@pytest.mark.parametrize("accuracy,left", [
    ({}, 3),  # 7 values: the middle, then a half of 3, then its middle or an end
    ({3: 0.95}, 2),  # the harder half (4, 5, 6) left
    ({3: 0.95, 5: 0.60}, 1),  # only 4 between them
    ({3: 0.95, 5: 0.60, 4: 0.72}, 0),  # chosen inside the band
    ({3: 0.95, 5: 0.60, 4: 0.65}, 0),  # nothing left between: the nearest is chosen
])
def test_pilots_left_is_the_longest_path_the_bisection_can_still_take(accuracy, left):
    assert pilots_left(VALUES, accuracy, BAND) == left


def test_every_path_of_the_search_ends_within_the_pilots_it_said_were_left():
    """Whatever each pilot answers, the search chooses a value after at most pilots_left({}) pilots, and at every
    step the count falls by one or more."""
    def walk(accuracy: dict[int, float], answers: list[float]) -> None:
        left = pilots_left(VALUES, accuracy, BAND)
        found = search(VALUES, accuracy, BAND)
        if found.next is None:
            assert left == 0
            return
        assert left >= 1
        for answer in answers:
            after = {**accuracy, found.next: answer}
            assert pilots_left(VALUES, after, BAND) <= left - 1
            walk(after, answers)
    walk({}, [0.95, 0.75, 0.40])


def _row_state(tmp_path, runs: dict[tuple[int, int, bool], str], seeds: list[int], accuracy: dict[int, float],
               seconds: dict[tuple[int, int, bool], float]) -> RowState:
    """A row with runs (value, seed, test) in the given states, each with a state file of its wall seconds."""
    row = Row("S4D", {}, "data.init_args.n_items", (VALUES, VALUES))
    made = {}
    for (value, seed, test), state in runs.items():
        folder = tmp_path / f"n_items={value}" / f"seed{seed}" / ("extrapolate" if test else "")
        (folder / "logs").mkdir(parents=True, exist_ok=True)
        (folder / "logs" / "state.json").write_text(json.dumps({"state": "exited", "seconds": seconds.get(
            (value, seed, test), 0.0)}))
        made[(value, seed, test)] = AtlasRun(f"S4D/n_items={value}", seed, folder, tmp_path / "c.yaml", (),
                                             row="S4D", value=value, test=test)
    chosen = [made[(value, seed, False)] for value, seed, test in runs if not test and seed in seeds and value == 4]
    found = Search(chosen=4 if seeds else None, next=None if seeds else 2, in_band=bool(seeds))
    return RowState(row, found, {made[key]: Status(state) for key, state in runs.items()}, chosen, accuracy)


def test_a_searching_row_needs_its_pilots_then_its_other_seeds_and_every_model_tested(tmp_path):
    """Every model is tested at 2L once trained, pilots too: the finished pilot's test, then one per run to go."""
    state = _row_state(tmp_path, {(3, 0, False): "done", (3, 0, True): "missing", (5, 0, False): "running"}, [],
                       {3: 0.95}, {(3, 0, False): 600.0, (5, 0, False): 200.0})
    go = to_go(state, VALUES, BAND, seeds=3, extrapolate=True)
    assert go == ToGo(pilots=2, seeds=2, tests=1 + 2 + 2, elapsed=(200.0,))
    assert go.describe() == "≤ 2 pilots, 2 seeds, 5 tests at 2L"
    cost = estimate([state], {"S4D": go})
    # four runs of 600 s, less the 200 s the running pilot has had; tests at 2L of no row measured: not counted
    assert cost.seconds == {"S4D": 4 * 600.0 - 200.0} and cost.total() == 2200.0
    assert cost.chain == {"S4D": 3 * 600.0}  # two pilots one after another, then the seeds side by side
    assert cost.wall(1) == 2200.0 and cost.wall(4) == 1800.0  # never sooner than the row's chain


def test_a_chosen_row_needs_its_unfinished_seeds_and_tests_at_their_measured_times(tmp_path):
    runs = {(4, 0, False): "done", (4, 1, False): "done", (4, 2, False): "running", (4, 0, True): "done",
            (4, 1, True): "failed"}
    state = _row_state(tmp_path, runs, [0, 1, 2], {4: 0.75}, {(4, 0, False): 300.0, (4, 1, False): 500.0,
                                                              (4, 2, False): 900.0, (4, 0, True): 30.0})
    go = to_go(state, VALUES, BAND, seeds=3, extrapolate=True)
    assert go == ToGo(pilots=0, seeds=1, tests=1, elapsed=(900.0,))  # a failed test at 2L is not tried again
    cost = estimate([state], {"S4D": go})
    assert cost.seconds == {"S4D": 30.0}  # the running seed is past the mean (400 s): only the test is left
    assert to_go(state, VALUES, BAND, seeds=3, extrapolate=False).tests == 0
    assert go.describe() == "1 seed, 1 test at 2L" and ToGo(0, 0, 0).describe() == "nothing"


def test_a_row_with_no_finished_run_is_timed_at_the_median_of_the_others(tmp_path):
    timed = _row_state(tmp_path / "a", {(3, 0, False): "done"}, [], {3: 0.95}, {(3, 0, False): 600.0})
    new = _row_state(tmp_path / "b", {(3, 0, False): "missing"}, [], {}, {})
    new = RowState(Row("New", {}, "data.init_args.n_items", (VALUES, VALUES)), new.search, new.runs, [], {})
    left = {"S4D": to_go(timed, VALUES, BAND, 3, False), "New": to_go(new, VALUES, BAND, 3, False)}
    cost = estimate([timed, new], left)
    assert cost.guessed == ["New"] and cost.seconds["New"] == (3 + 2) * 600.0
    nothing = estimate([new], {"New": left["New"]})
    assert nothing.total() is None and nothing.wall(2) is None
