"""What an atlas still needs, for ``primacy atlas --status``: each row's runs to go and their time, at the wall time
its finished runs took, so that a user can plan the sessions (or the cluster hours) that remain.

The count is exact where the row has chosen its value. While a row searches, its pilots are the most the bisection
can still need (``pilots_left``); its seeds are counted as if the chosen value's seeds all land inside the band (a seed
outside it sends the search on, ``primacy.workflows.atlas.knob_search.seeds_accuracy``), so the time is an estimate,
not a bound.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from primacy.workflows import launchers
from primacy.workflows.atlas.planner import RowState, mean_run_seconds, search


def pilots_left(values: tuple[Any, ...], accuracy: dict[int, float], band: tuple[float, float]) -> int:
    """The most pilots the search over ``values`` can still train before it chooses one, a pilot under way
    included: its next pilot, then the longer of the two ways on (that pilot above the band or below it)."""
    found = search(values, accuracy, band)
    if found.next is None:
        return 0
    outcomes = (band[1] + 1.0, band[0] - 1.0)  # above the band, below it
    return 1 + max(pilots_left(values, {**accuracy, found.next: outcome}, band) for outcome in outcomes)


@dataclass(frozen=True)
class ToGo:
    """A row's runs to go: ``pilots`` (at most), then ``seeds`` at the chosen value, then ``tests`` at 2L; ``elapsed``:
    the wall seconds each training run among them that is under way has run so far."""

    pilots: int
    seeds: int
    tests: int
    elapsed: tuple[float, ...] = ()

    @property
    def training(self) -> int:
        return self.pilots + self.seeds

    def describe(self) -> str:
        return ", ".join(parts(self.pilots, self.seeds, self.tests, "≤")) or "nothing"


def parts(pilots: int, seeds: int, tests: int, at_most: str) -> list[str]:
    """'<at_most> 2 pilots', '1 seed', '3 tests at 2L': the counts that are not 0, in that order."""
    def runs(count: int, kind: str) -> str:
        return f"{count} {kind}{'s' if count != 1 else ''}"
    return [part for count, part in ((pilots, f"{at_most} {runs(pilots, 'pilot')}"), (seeds, runs(seeds, "seed")),
                                     (tests, f"{runs(tests, 'test')} at 2L")) if count]


def to_go(state: RowState, values: tuple[Any, ...], band: tuple[float, float], seeds: int, extrapolate: bool
          ) -> ToGo:
    """The runs ``state``'s row still needs, for ``seeds`` seeds and (with ``extrapolate``) the test at 2L of every
    model trained, pilots too (``Planner`` tests each as soon as it is trained)."""
    training = [run for run in state.runs if not run.test]
    elapsed = tuple(launchers.run_seconds(run.dir) for run in training if state.runs[run].state == "running")
    if state.seeds:
        pilots, seeds_to_go = 0, sum(state.runs[run].state != "done" for run in state.seeds)
    else:  # searching: its pilots, then the chosen value's other seeds
        pilots, seeds_to_go = pilots_left(values, state.accuracy, band), seeds - 1
    due = sum(state.runs[run].state not in ("done", "failed") for run in state.runs if run.test)
    return ToGo(pilots, seeds_to_go, pilots + seeds_to_go + due if extrapolate else 0, elapsed)


@dataclass(frozen=True)
class Estimate:
    """Wall seconds still to spend on each row's runs, None for a row whose time is not known (no run of it or of any
    other row has finished), and the seconds of each row's chain: its pilots, one after another, then a seed and its
    test (seeds run side by side)."""

    seconds: dict[str, float | None]
    chain: dict[str, float | None]
    guessed: list[str]  # rows with no finished run, timed at the median of the others' mean run

    def total(self) -> float | None:
        known = [s for s in self.seconds.values() if s is not None]
        return sum(known) if len(known) == len(self.seconds) else None

    def wall(self, jobs: int) -> float | None:
        """The wall time on ``jobs`` slots: the runs spread over the slots, but no sooner than the longest chain."""
        total = self.total()
        if total is None:
            return None
        return max(total / jobs, max((c for c in self.chain.values() if c is not None), default=0.0))


def estimate(states: list[RowState], left: dict[str, ToGo]) -> Estimate:
    """Each row's runs to go (``left``, by label) at the mean wall time of its finished runs, tests at 2L at the mean
    of its finished tests (else of every row's); a row with none finished at the median of the other rows' means."""
    run_means = {state.row.label: mean_run_seconds(state) for state in states}
    test_means = {state.row.label: mean_run_seconds(state, tests=True) for state in states}
    known_runs = [s for s in run_means.values() if s is not None]
    known_tests = [s for s in test_means.values() if s is not None]
    fallback_run = statistics.median(known_runs) if known_runs else None
    fallback_test = statistics.mean(known_tests) if known_tests else 0.0
    seconds, chain, guessed = {}, {}, []
    for label, go in left.items():
        run = run_means[label]
        if run is None:
            run = fallback_run
            if run is not None and go.training:
                guessed.append(label)
        test = test_means[label] if test_means[label] is not None else fallback_test
        if run is None:
            seconds[label] = chain[label] = None if go.training else go.tests * test
            continue
        done_of_running = sum(min(seconds_run, run) for seconds_run in go.elapsed)  # past the mean: nothing left
        seconds[label] = go.training * run - done_of_running + go.tests * test
        chain[label] = (go.pilots + min(go.seeds, 1)) * run + min(go.tests, 1) * test
    return Estimate(seconds, chain, guessed)
