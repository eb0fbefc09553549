"""LoggedResults: the values a model logged as test/<name> (the induction task's losses and accuracies by token group,
or any model whose metric names no other kind): a run's summary.json, and over seeds the mean, standard error and
values of each, drawn one panel per value."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
import numpy as np

from primacy import figures
from primacy.errors import UsageError
from primacy.rundir.kinds.base import (
    KIND_KEY,
    ResultKind,
    missing_results,
    read_summary,
    retest,
    scalar_entry,
    write_summary,
)
from primacy.rundir.layout import RunDir

LOGGED_KEY = "logged"  # summary.json's list of the logged values' names
# What run_settings stores beside the values (and older summaries hold without naming the values).
SETTING_KEYS = ("task", "condition", "n_items", "vocab_size", "backbone", "backbone_args", "data_args", "model_args",
                KIND_KEY)


class LoggedResults(ResultKind):
    """A run's results/summary.json: every value logged as test/<name> under <name>, their names as ``logged``, and
    the run's settings. An aggregate: each value's mean, se and values over the runs, and logged.png/.pdf."""

    def collect(self, pl_module: L.LightningModule, stage: str) -> None:
        return None  # the values are logged by the model after the test epoch: ``write`` gets them as ``logged``

    def write(self, out: Path, collected: None, logged: dict[str, float], settings: dict[str, Any],
              subject: str) -> dict[str, Any]:
        return write_summary(out, {**logged, LOGGED_KEY: list(logged), **settings})

    def read(self, run: RunDir) -> dict[str, Any]:
        if not run.summary.is_file():
            raise missing_results(run, self)
        summary = read_summary(run)
        names = summary.get(LOGGED_KEY)
        if names is None:  # written before the names were: every number that is not a setting
            names = [k for k, v in summary.items() if k not in SETTING_KEYS and isinstance(v, (int, float))]
        bad = [name for name in names if not isinstance(summary.get(name), (int, float, type(None)))]
        if not isinstance(names, list) or bad:
            raise UsageError(f"{run.summary} is damaged ({LOGGED_KEY} names values it does not hold as numbers: "
                             f"{bad or names}): {retest(run)}")
        return {"summary": summary, "values": {name: np.nan if summary[name] is None else float(summary[name])
                                               for name in names}}

    def check_together(self, runs: list[RunDir], loaded: list[dict[str, Any]]) -> None:
        expected = sorted(loaded[0]["values"])
        for run, result in zip(runs[1:], loaded[1:]):
            if sorted(result["values"]) != expected:
                raise UsageError(f"run {run.path} logged {sorted(result['values'])}, {runs[0].path} {expected}: "
                                 "only runs that differ by seed aggregate")

    def aggregate(self, runs: list[RunDir], loaded: list[dict[str, Any]], settings: dict[str, Any], out: Path,
                  dpi: int) -> dict[str, Any]:
        """summary.json (each logged value's ``mean``, ``se`` and the runs' ``values``, their names as ``logged``,
        and the ``settings``) and logged.png/.pdf, one panel per value."""
        names = list(loaded[0]["values"])
        values = {name: np.array([r["values"][name] for r in loaded], dtype=float) for name in names}  # R each
        summary = {**self.aggregate_header(runs), **{name: scalar_entry(v) for name, v in values.items()},
                   LOGGED_KEY: names, "settings": settings}
        write_summary(out, summary)
        title = f"{figures.style.describe(settings)} · {len(runs)} runs (test)"
        figures.save(figures.logged.logged_values(values, title), out / "logged", dpi=dpi)
        return summary
