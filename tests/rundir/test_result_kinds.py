"""Kinds of result (primacy.rundir.kinds) as contracts: every built-in model's test writes the kind its metric names
and says so in summary.json; commands find a run's kind from it (older runs from their files); a kind of result that
is not primacy's is written by the test and aggregated by `primacy aggregate` without any change to primacy; the
induction task's logged values aggregate over seeds."""

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from primacy import registry
from primacy.backbones.base import Backbone
from primacy.cli.main import main
from primacy.errors import UsageError
from primacy.metrics import FreeRecallStats, StudyQueryAccuracy, TokenGroupMetrics
from primacy.models.lists import SequenceModel
from primacy.rundir import kinds
from primacy.rundir.kinds import FreeRecallResults, LoggedResults, ResultKind, StudyQueryResults
from primacy.rundir.layout import RunDir
from primacy.testing import tiny_fit
from primacy.workflows.aggregate import aggregate
from primacy.workflows.paper.figure_files import AGGREGATES
from primacy.workflows.paper.pages import FigureSpec, Panel
from primacy.workflows.paper.reproduce import draw
from primacy.workflows.runs import Run


def test_each_metric_names_its_kind_of_result():
    assert StudyQueryAccuracy.result_kind == StudyQueryResults.__name__
    assert FreeRecallStats.result_kind == FreeRecallResults.__name__
    assert TokenGroupMetrics.result_kind == LoggedResults.__name__
    for name in ("StudyQueryResults", "FreeRecallResults", "LoggedResults"):
        assert type(kinds.get(name)).__name__ == name
    assert set(registry.names("result")) >= {"StudyQueryResults", "FreeRecallResults", "LoggedResults"}


def test_an_unknown_kind_is_one_line(tmp_path):
    run = RunDir(tmp_path / "run")
    run.results.mkdir(parents=True)
    run.summary.write_text(json.dumps({"result_kind": "NoSuchResults"}))
    with pytest.raises(UsageError, match=r"holds results of kind 'NoSuchResults', which this installation cannot "
                                         r"read: result 'NoSuchResults' is not registered"):
        kinds.for_run(run)


@pytest.mark.parametrize(("files", "task", "expected"), [
    (("accuracy.npz",), "verification", StudyQueryResults),
    (("free_recall.npz", "free_recall.csv"), "free_recall", FreeRecallResults),
    ((), "induction", LoggedResults),
    ((), None, StudyQueryResults),  # a verification run from before there were other tasks, its npz lost
    ((), "reconstruction", StudyQueryResults),
])
def test_a_run_tested_before_summaries_named_their_kind_is_known_by_its_files_or_task(tmp_path, files, task, expected):
    run = RunDir(tmp_path / "run")
    run.results.mkdir(parents=True)
    run.summary.write_text(json.dumps({} if task is None else {"task": task}))
    for name in files:
        (run.results / name).write_bytes(b"")
    assert type(kinds.for_run(run)) is expected


def test_induction_runs_aggregate_their_logged_values(tmp_path):
    runs = [tiny_fit(tmp_path / f"seed{seed}", "LanguageModel", "InductionTask", "TransformerBackbone", seed=seed,
                     backbone_settings={"d_model": 16, "n_layers": 1, "n_heads": 2}) for seed in (0, 1)]
    summaries = [json.loads(RunDir(run).summary.read_text()) for run in runs]
    assert all(s["result_kind"] == "LoggedResults" for s in summaries)
    names = summaries[0]["logged"]
    assert {"loss", "repeat_accuracy", "other_accuracy", "repeat_tokens"} <= set(names)

    summary = aggregate(runs, tmp_path / "mean")
    assert summary["result_kind"] == "LoggedResults" and summary["n_runs"] == 2 and summary["logged"] == names
    for name in names:
        values = [s[name] for s in summaries]
        assert summary[name]["values"] == values
        assert summary[name]["mean"] == pytest.approx(np.mean(values), abs=1e-12)
    assert summary["settings"]["task"] == "induction"
    assert (tmp_path / "mean" / "logged.png").is_file()
    assert json.loads((tmp_path / "mean" / "summary.json").read_text()) == summary


def test_a_run_without_the_files_of_its_kind_is_refused_in_one_line(tmp_path):
    a, b = RunDir(tmp_path / "a"), RunDir(tmp_path / "b")
    for run in (a, b):
        run.results.mkdir(parents=True)
    a.summary.write_text(json.dumps({"task": "custom", "result_kind": "LoggedResults", "loss": 1.0,
                                     "logged": ["loss"]}))
    b.summary.write_text(json.dumps({"task": "custom", "result_kind": "StudyQueryResults"}))
    with pytest.raises(UsageError, match=rf"^run directory {b.path} has no results/summary.json, accuracy.npz: test it "
                                         "first"):
        aggregate([a.path, b.path], tmp_path / "mean")
    with pytest.raises(UsageError, match="does not exist"):
        aggregate([a.path, tmp_path / "missing"], tmp_path / "mean")
    assert not (tmp_path / "mean").exists(), "nothing is written"


class CountResults(ResultKind):
    """A kind of result that is not primacy's: the number of test answers and a per-position count vector."""

    files = ("counts.npz",)

    def collect(self, pl_module, stage: str) -> Any:
        return pl_module.metric(stage).compute()

    def write(self, out: Path, collected, logged, settings, subject) -> dict[str, Any]:
        np.savez(out / "counts.npz", hits=collected["hits"].numpy())
        summary = {"answers": int(collected["counts"].sum()), **settings}
        (out / "summary.json").write_text(json.dumps(summary))
        return summary

    def read(self, run: RunDir) -> dict[str, Any]:
        with np.load(run.results / "counts.npz") as arrays:
            return {"summary": json.loads(run.summary.read_text()), "hits": arrays["hits"]}

    def aggregate(self, runs, loaded, settings, out: Path, dpi: int) -> dict[str, Any]:
        summary = {**self.aggregate_header(runs), "hits": np.sum([r["hits"] for r in loaded], axis=0).tolist(),
                   "settings": settings}
        (out / "summary.json").write_text(json.dumps(summary))
        return summary


class CountedAccuracy(StudyQueryAccuracy):
    result_kind = "CountResults"


class CountedModel(SequenceModel):
    """SequenceModel whose metrics name CountResults: a model plugin's, as far as primacy can tell."""

    def __init__(self, backbone: Backbone, vocab_size: int = 512, n_items: int = 32, **optimiser: Any) -> None:
        super().__init__(backbone, vocab_size, n_items, **optimiser)
        self.val_accuracy, self.test_accuracy = CountedAccuracy(n_items), CountedAccuracy(n_items)


def test_a_kind_of_result_from_a_plugin_is_written_and_aggregated_without_changing_primacy(tmp_path, monkeypatch):
    """The kind is found as a plugin's would be (an entry point of group primacy.results, faked here: the distribution
    test of docs/plugins.md installs a real one), and the model's metric names it."""
    real = registry._entry_points

    class EntryPoint:
        name, value, dist = "CountResults", f"{__name__}:CountResults", None

        def load(self):
            return CountResults

    monkeypatch.setattr(registry, "_entry_points", lambda kind="backbone": (
        {**real(kind), "CountResults": EntryPoint()} if kind == "result" else real(kind)))
    runs = [tiny_fit(tmp_path / f"seed{seed}", f"{__name__}.CountedModel", seed=seed) for seed in (0, 1)]
    summaries = [json.loads(RunDir(run).summary.read_text()) for run in runs]
    assert [s["result_kind"] for s in summaries] == ["CountResults"] * 2
    assert all(s["answers"] > 0 for s in summaries)
    assert not (RunDir(runs[0]).results / "accuracy.npz").exists()

    main(["aggregate", *map(str, runs), "--out", str(tmp_path / "mean")])
    summary = json.loads((tmp_path / "mean" / "summary.json").read_text())
    assert summary["result_kind"] == "CountResults" and summary["n_runs"] == 2
    with np.load(RunDir(runs[0]).results / "counts.npz") as a, np.load(RunDir(runs[1]).results / "counts.npz") as b:
        assert summary["hits"] == (a["hits"] + b["hits"]).tolist()

    # primacy reproduce's figure of one's own draws it too: the panel's aggregate and the table of its runs
    spec = FigureSpec("mine", "mine", (Panel("A", "counted", ("counted", "counted")),), AGGREGATES)
    made = [Run("counted", seed, run, run / "config.yaml", ()) for seed, run in enumerate(runs)]
    written = draw(spec, "cpu", tmp_path / "figure", made)
    assert json.loads((tmp_path / "figure" / "counted" / "mean" / "summary.json").read_text()) == summary
    assert [path.name for path in written] == ["mine.csv", "mine.md"]
    assert "| A counted | 2 |" in (tmp_path / "figure" / "mine.md").read_text()
