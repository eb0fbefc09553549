"""ResultKind: one kind of result (the study x query accuracy matrix, free-recall counts, a model's logged test values,
or a plugin's own), owned by the metric that accumulates it: what a tested run's results/ holds, how it is written
and read back, how runs that differ by seed aggregate, and how both are drawn.

A metric names its kind by a class attribute, ``result_kind = "StudyQueryResults"``; kinds are registered like
backbones (entry-point group ``primacy.results``, entry name == class name), so a plugin brings its own. The kind's
name is written into summary.json (``result_kind``), which is how commands that read runs back find it."""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, ClassVar

import lightning as L
import numpy as np
from matplotlib.figure import Figure

from primacy import files
from primacy.analysis.behaviour.comparison import mean_and_se
from primacy.errors import UsageError
from primacy.rundir import results
from primacy.rundir.layout import SUMMARY, RunDir

KIND_KEY = "result_kind"  # summary.json's key naming the kind of result


class ResultKind(ABC):
    """One kind of result. Subclasses set ``files`` and define ``write``, ``read`` and ``aggregate``; ``collect``,
    ``figures``, ``check_together`` and ``validation_figure`` have defaults.

    The order of a test (``primacy.callbacks.ResultsWriter``): ``collect`` on every process at the end of the test
    epoch (a metric's compute() syncs across processes there), then on process zero ``write`` into <run>/results and
    ``figures``, each saved in the writer's formats. ``primacy aggregate`` ``read``s every run, checks that their
    settings agree but for the seed and that they ``check_together``, then ``aggregate``s them into one directory.
    """

    files: ClassVar[tuple[str, ...]] = ()  # what a tested run's results/ holds beside summary.json
    headline: ClassVar[tuple[str, ...]] = ()  # the aggregate's numbers `primacy aggregate` prints; () prints all
    draws_validation: ClassVar[bool] = False  # whether ``validation_figure`` draws anything

    @property
    def name(self) -> str:
        """The registered name (the class name), written into summary.json as ``result_kind``."""
        return type(self).__name__

    def collect(self, pl_module: L.LightningModule, stage: str) -> Any:
        """What ``write`` needs from a model after ``stage`` (val or test); called on every process. By default the
        computed metric of ``stage`` (``pl_module.metric(stage).compute()``), None for a model without one."""
        metric = getattr(pl_module, "metric", None)
        return metric(stage).compute() if callable(metric) else None

    @abstractmethod
    def write(self, out: Path, collected: Any, logged: dict[str, float], settings: dict[str, Any],
              subject: str) -> dict[str, Any]:
        """Write the kind's files and summary.json into ``out`` (a run's results/) and return the summary, which holds
        ``settings`` (the run's settings, ``result_kind`` among them). ``collected`` is ``collect``'s, ``logged``
        the values the model logged as test/<name>, ``subject`` the run directory's name."""

    def figures(self, collected: Any, summary: dict[str, Any], settings: dict[str, Any]) -> dict[str, Figure]:
        """A tested run's figures by file stem (saved in results/ in every format the writer asks for); none by
        default."""
        return {}

    def validation_figure(self, collected: Any, settings: dict[str, Any], caption: str) -> Figure | None:
        """The figure redrawn after each validation (results/val_heatmap.png), when ``draws_validation``."""
        return None

    @abstractmethod
    def read(self, run: RunDir) -> dict[str, Any]:
        """A tested run's results: ``summary`` (summary.json's object) and whatever ``aggregate`` needs. A damaged,
        truncated or missing file is a UsageError that names it and says how to write it again."""

    def check_together(self, runs: list[RunDir], loaded: list[dict[str, Any]]) -> None:
        """Refuses, in one line, runs whose settings agree but whose results still do not stack (``read``'s
        dicts, in the order of ``runs``); every pair is fine by default."""

    def aggregate_header(self, runs: list[RunDir]) -> dict[str, Any]:
        """The entries every aggregate summary starts with: its kind, how many runs and which."""
        return {KIND_KEY: self.name, "n_runs": len(runs), "runs": [str(run.path) for run in runs]}

    @abstractmethod
    def aggregate(self, runs: list[RunDir], loaded: list[dict[str, Any]], settings: dict[str, Any], out: Path,
                  dpi: int) -> dict[str, Any]:
        """Write the aggregate of runs that differ only by seed into ``out`` (summary.json, holding ``n_runs``,
        ``runs`` and ``settings``, and the kind's arrays and figures); returns the summary."""


def retest(run: RunDir) -> str:
    """What to do about a run's damaged result file: test the run again, which rewrites every one of them."""
    return results.retest_hint(run.results)


def read_summary(run: RunDir) -> dict[str, Any]:
    """A tested run's summary.json; a missing, damaged or foreign file is a UsageError naming it and the remedy."""
    return results.read_summary(run.summary, retest(run))


def read_arrays(run: RunDir, name: str, keys: tuple[str, ...], optional: tuple[str, ...] = ()) -> dict[str, np.ndarray]:
    """The arrays ``keys`` (and those of ``optional`` that are present) of <run>/results/<name>, an .npz, read in full:
    a missing, truncated or damaged file, or one without a key, is a UsageError naming it and the remedy."""
    return results.read_npz(run.results / name, keys, optional, retest(run))


def scalar_entry(values: np.ndarray) -> dict[str, Any]:
    """A scalar's aggregate summary entry from its value in each run (R,): mean, se and the values, null for NaN."""
    mean, se = mean_and_se(values)
    return {"mean": files.plain(mean), "se": files.plain(se), "values": [files.plain(v) for v in values]}


def curve_entry(mean: np.ndarray, se: np.ndarray) -> dict[str, Any]:
    """A curve's aggregate summary entry: its mean and se by position, null for NaN."""
    return {"mean": [files.plain(v) for v in mean], "se": [files.plain(v) for v in se]}




def write_summary(out: Path, content: dict[str, Any]) -> dict[str, Any]:
    """``content`` as <out>/summary.json (NaN as null); returns it."""
    out.mkdir(parents=True, exist_ok=True)
    files.write_json(out / SUMMARY, content)
    return content


def missing_results(run: RunDir, kind: ResultKind | None = None) -> UsageError:
    """The error for a run whose results/ lacks its summary.json (and what ``kind`` writes beside it)."""
    wanted = ", ".join([SUMMARY, *(kind.files if kind is not None else ())])
    return UsageError(f"run directory {run.path} has no results/{wanted}: test it first "
                      f"(`primacy {' '.join(run.test_args())}`)")
