"""`primacy aggregate` over runs of the reconstruction and associative-recall tasks: the serial-position curve by
delay averaged over seeds, its figures, and runs of other tasks or delays refused."""

import json

import numpy as np
import pytest
from matplotlib.image import imread
from support.accuracy_results import DELAYS, L_ITEMS, RECALL, RECONSTRUCTION, VERIFICATION, accuracy_run
from support.cli import aggregate_fails

from primacy.errors import UsageError
from primacy.rundir import results
from primacy.workflows import aggregate as aggregate_module
from primacy.workflows.aggregate import aggregate


def per_run_curves(runs):
    """Each run's serial-position curve by delay (R, D, L) straight from its accuracy.npz counts."""
    curves = []
    for run in runs:
        with np.load(run / "results" / "accuracy.npz") as data:
            curves.append(data["delay_hits"] / data["delay_counts"])
    return np.stack(curves)


def test_the_serial_position_curve_by_delay_is_averaged_over_seeds(tmp_path):
    runs = [accuracy_run(tmp_path, name, seed) for seed, name in enumerate("abc")]
    summary = aggregate(runs, tmp_path / "agg")
    per_run = per_run_curves(runs)
    assert per_run.shape == (3, len(DELAYS), L_ITEMS) and not np.isnan(per_run).any()
    with np.load(tmp_path / "agg" / "accuracy.npz") as data:
        assert data["delays"].tolist() == list(DELAYS)
        np.testing.assert_allclose(data["serial_position_by_delay_curves"], per_run)
        np.testing.assert_allclose(data["serial_position_by_delay_mean"], per_run.mean(axis=0))
        np.testing.assert_allclose(data["serial_position_by_delay_se"], per_run.std(axis=0, ddof=1) / np.sqrt(3))
        indices = np.array([json.loads((r / "results" / "summary.json").read_text())["early_minus_late_by_delay"]
                            for r in runs])  # R D
        np.testing.assert_allclose(data["early_minus_late_by_delay_values"], indices)
        np.testing.assert_allclose(data["early_minus_late_by_delay_mean"], indices.mean(axis=0))
    assert summary["delays"] == list(DELAYS)
    np.testing.assert_allclose(summary["serial_position_by_delay"]["mean"], per_run.mean(axis=0))
    np.testing.assert_allclose(summary["serial_position_by_delay"]["se"], per_run.std(axis=0, ddof=1) / np.sqrt(3))
    np.testing.assert_allclose(summary["early_minus_late_by_delay"]["mean"], indices.mean(axis=0))
    np.testing.assert_allclose(summary["early_minus_late_by_delay"]["values"], indices)
    assert summary["settings"]["task"] == "reconstruction"
    assert summary == json.loads((tmp_path / "agg" / "summary.json").read_text())
    # the fake answers get worse with delay: the mean curves show it
    assert summary["early_minus_late_by_delay"]["mean"][0] > 0.2
    by_delay = summary["serial_position_by_delay"]["mean"]
    assert np.mean(by_delay[0]) > np.mean(by_delay[-1])


@pytest.mark.parametrize("condition", ["forward", "cued"])
def test_the_heatmap_of_forward_reconstruction_is_the_delay_figure(tmp_path, monkeypatch, condition):
    titles = []
    delay_heatmap = aggregate_module.figures.accuracy.delay_heatmap

    def recording(delays, curves, title="", se=None):
        titles.append(title)
        assert se is not None and np.asarray(curves).shape == (len(DELAYS), L_ITEMS)
        return delay_heatmap(delays, curves, title, se)

    monkeypatch.setattr(aggregate_module.figures.accuracy, "delay_heatmap", recording)
    settings = {**RECONSTRUCTION, "condition": condition,
                "data_args": {**RECONSTRUCTION["data_args"], "condition": condition}}
    runs = [accuracy_run(tmp_path, name, seed, settings) for seed, name in enumerate("ab")]
    aggregate(runs, tmp_path / "agg")
    for name in ("heatmap.png", "heatmap.pdf", "delay_heatmap.png", "delay_heatmap.pdf", "contiguity.png"):
        assert (tmp_path / "agg" / name).is_file(), name
    height, width = imread(tmp_path / "agg" / "heatmap.png").shape[:2]
    delay_height, delay_width = imread(tmp_path / "agg" / "delay_heatmap.png").shape[:2]
    if condition == "forward":  # the study x query matrix is only a diagonal: the curves by delay instead
        assert (height, width) == (delay_height, delay_width) and len(titles) == 2
    else:
        assert height == width and delay_height != delay_width and len(titles) == 1
    assert titles[0].startswith(f"S4DBackbone · reconstruction · L={L_ITEMS} · K=16 · {condition} · mean of 2 runs\n")


def test_recall_runs_aggregate_with_none_on_the_heatmap(tmp_path, monkeypatch):
    calls = []
    heatmap = aggregate_module.figures.accuracy.heatmap

    def recording(matrix, distractor, title="", **kwargs):
        calls.append((title, kwargs))
        return heatmap(matrix, distractor, title, **kwargs)

    monkeypatch.setattr(aggregate_module.figures.accuracy, "heatmap", recording)
    runs = [accuracy_run(tmp_path, name, seed, RECALL, delays=None) for seed, name in enumerate("abc")]
    summary = aggregate(runs, tmp_path / "agg")
    assert "delays" not in summary and "serial_position_by_delay" not in summary
    assert "serial_position_by_delay_mean" not in np.load(tmp_path / "agg" / "accuracy.npz").files
    assert not (tmp_path / "agg" / "delay_heatmap.png").exists()
    [(title, kwargs)] = calls
    assert kwargs == {"distractor_label": "none"}
    assert title.startswith(f"S4DBackbone · recall · L={L_ITEMS} · keys 16 · values 8 · half · mean of 3 runs\n")
    per_run = np.stack([results.read(r / "results")["distractor_accuracy_by_query"].numpy() for r in runs])
    np.testing.assert_allclose(np.load(tmp_path / "agg" / "accuracy.npz")["distractor_mean"], per_run.mean(axis=0))


def test_old_verification_summaries_without_a_task_aggregate_with_new_ones(tmp_path, monkeypatch):
    old = accuracy_run(tmp_path, "old", 0, {**VERIFICATION, "task": None}, delays=None)
    assert "task" not in json.loads((old / "results" / "summary.json").read_text())
    new = accuracy_run(tmp_path, "new", 1, VERIFICATION, delays=None)
    labels = []
    heatmap = aggregate_module.figures.accuracy.heatmap
    monkeypatch.setattr(aggregate_module.figures.accuracy, "heatmap",
                        lambda *args, **kwargs: labels.append(kwargs) or heatmap(*args, **kwargs))
    summary = aggregate([old, new], tmp_path / "agg")
    assert summary["n_runs"] == 2 and summary["settings"]["task"] == "verification" and "delays" not in summary
    assert labels == [{"distractor_label": "new"}]
    assert (tmp_path / "agg" / "heatmap.png").is_file() and not (tmp_path / "agg" / "delay_heatmap.png").exists()
    with pytest.raises(UsageError, match=r"differs from .*old in task \('verification' vs 'reconstruction'\)"):
        aggregate([old, accuracy_run(tmp_path, "recon", 2)], tmp_path / "agg2")


def test_runs_of_different_tasks_are_refused_in_one_line(tmp_path, capsys):
    recall = {**RECALL, "condition": "forward", "n_items": L_ITEMS}  # only the task differs at the top level
    runs = [accuracy_run(tmp_path, "recon", 0), accuracy_run(tmp_path, "recall", 1, recall, delays=None)]
    err = aggregate_fails(capsys, *runs, "--out", tmp_path / "agg")
    assert f"run {runs[1]} differs from {runs[0]} in task ('reconstruction' vs 'recall')" in err
    assert not (tmp_path / "agg").exists(), "nothing is written"


def test_runs_of_different_delays_are_refused_in_one_line(tmp_path, capsys):
    other = {**RECONSTRUCTION, "data_args": {**RECONSTRUCTION["data_args"], "test_delays": [0, 8]}}
    runs = [accuracy_run(tmp_path, "a", 0), accuracy_run(tmp_path, "b", 1, other, delays=(0, 8))]
    err = aggregate_fails(capsys, *runs, "--out", tmp_path / "agg")
    assert "differs from" in err and "data_args.test_delays ([0, 4, 8] vs [0, 8])" in err
    # The same, with summaries that lack the settings: the delays the runs were tested at still differ.
    for run in runs:
        (run / "results" / "summary.json").write_text('{"data_args": null}\n')
    err = aggregate_fails(capsys, *runs, "--out", tmp_path / "agg")
    assert f"run {runs[1]} was tested at delays [0, 8], {runs[0]} at delays [0, 4, 8]" in err
    # and a run tested without delays against one with them
    plain = accuracy_run(tmp_path, "plain", 2, delays=None)
    (plain / "results" / "summary.json").write_text('{"data_args": null}\n')
    err = aggregate_fails(capsys, runs[0], plain, "--out", tmp_path / "agg")
    assert f"run {plain} was tested without delays, {runs[0]} at delays [0, 4, 8]" in err
    assert not (tmp_path / "agg").exists(), "nothing is written"
