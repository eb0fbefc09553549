"""Kinds of result (``ResultKind``): each metric names the kind it accumulates, a run's summary.json names the kind
its test wrote, and the registry (entry-point group ``primacy.results``) maps the name to the class, plugins' kinds
included. ``for_model`` and ``for_run`` find a kind; ``primacy.callbacks.ResultsWriter``, ``primacy aggregate``,
``primacy humans`` and ``primacy reproduce`` go through it.

Modules:
    base         ResultKind: one kind of result and its registry lookups
    free_recall  FreeRecallResults: counts and recall sequences
    logged       LoggedResults: the values a model logged as test/<name>
    study_query  StudyQueryResults: the study x query accuracy matrix
"""

from __future__ import annotations

import json

import lightning as L

from primacy import registry
from primacy.errors import UsageError
from primacy.rundir.kinds.base import KIND_KEY, ResultKind, missing_results
from primacy.rundir.kinds.free_recall import FreeRecallResults
from primacy.rundir.kinds.logged import LoggedResults
from primacy.rundir.kinds.study_query import StudyQueryResults
from primacy.rundir.layout import RunDir
from primacy.tasks.free_recall import FreeRecallTask

# The tasks whose runs, tested before summaries named their kind, wrote the accuracy matrix (no task: verification).
LIST_TASKS = (None, "verification", "reconstruction", "recall")
BUILTIN = {cls.__name__: cls for cls in (StudyQueryResults, FreeRecallResults, LoggedResults)}

__all__ = ["KIND_KEY", "FreeRecallResults", "LoggedResults", "ResultKind", "StudyQueryResults", "for_model",
           "for_run", "get"]


def get(name: str) -> ResultKind:
    """The kind of result registered as ``name``; a registered class that is not a ResultKind is refused. primacy's
    own are found without the registry too (an editable install older than their entry points still writes them)."""
    cls = BUILTIN[name] if name in BUILTIN else registry.get(name, "result")
    if not issubclass(cls, ResultKind):
        raise UsageError(f"result kind {name!r} ({cls.__module__}.{cls.__qualname__}) is not a subclass of "
                         "primacy.rundir.kinds.ResultKind")
    return cls()


def for_model(pl_module: L.LightningModule) -> ResultKind:
    """The kind of result a model's test writes: the one its test metric names (``result_kind``), LoggedResults for a
    model whose metric names none or that has no ``metric(stage)``."""
    metric = pl_module.metric("test") if callable(getattr(pl_module, "metric", None)) else None
    return get(getattr(metric, "result_kind", None) or LoggedResults.__name__)


def for_run(run: RunDir) -> ResultKind:
    """The kind of result a tested run holds: the one its summary.json names; for a run tested before summaries named
    it, the one whose files its results/ holds (free_recall.npz, accuracy.npz), else the one its task wrote (the
    list tasks' accuracy matrix, else the logged values). A run without a summary is refused in one line."""
    if not run.path.is_dir():
        raise UsageError(f"run directory {run.path} does not exist: give directories that `primacy fit` made")
    if not run.summary.is_file():
        raise missing_results(run)
    try:
        summary = json.loads(run.summary.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        summary = None  # damaged: the kind's own reader says how, in one line
    name = summary.get(KIND_KEY) if isinstance(summary, dict) else None
    if isinstance(name, str):
        try:
            return get(name)
        except UsageError as err:
            raise UsageError(f"run directory {run.path} holds results of kind {name!r}, which this installation "
                             f"cannot read: {err}") from None
    for kind in (FreeRecallResults(), StudyQueryResults()):  # older runs: by their files,
        if all((run.results / file).is_file() for file in kind.files):
            return kind
    task = summary.get("task", "verification") if isinstance(summary, dict) else None  # or by their task
    if task == FreeRecallTask.name:
        return FreeRecallResults()
    return StudyQueryResults() if task in LIST_TASKS or summary is None else LoggedResults()
