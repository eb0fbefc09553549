"""`primacy aggregate` (mean and SE over seeds, refuses mixed settings) and `primacy kernels` (Fig. 1)."""

import json
import re

import numpy as np
import pytest
import torch
from support.cli import aggregate_fails

from primacy.cli import main
from primacy.errors import UsageError
from primacy.rundir import results
from primacy.ssm.dense import impulse_responses
from primacy.ssm.hippo import hippo
from primacy.workflows.aggregate import aggregate

SETTINGS = {"condition": "half", "n_items": 3, "vocab_size": 16, "backbone": "S4DBackbone",
            "backbone_args": {"d_model": 8}, "data_args": {"n_items": 3, "seed": 0}, "model_args": {"lr": 0.001}}


CONTIGUITY_COUNTS = (4, 8, 0, 8, 4)  # lags -2 .. 2; d = 0 never occurs (no item is queried twice)


def fake_run(root, name, seed, hits_scale, settings=SETTINGS, contiguity_counts=CONTIGUITY_COUNTS, controlled=True):
    """A results directory as a test writes it; ``contiguity_counts=None`` gives one written before the
    recognition-contiguity curve existed, ``controlled=False`` one written before its control existed. The
    controlled curve is [0.25, 0.25, -, -0.25, 0.5] x ``hits_scale``."""
    counts = torch.full((3, 3), 10)
    hits = (counts * torch.tensor([[0.9, 0.8, 0.7], [0.6, 0.5, 0.4], [0.3, 0.2, 0.1]]) * hits_scale).round().long()
    states = {"hits": hits, "counts": counts, "distractor_hits": torch.tensor([25, 20, 15]),
              "distractor_counts": torch.tensor([30, 30, 30])}
    if contiguity_counts is not None:
        c = torch.tensor(contiguity_counts)
        states["contiguity_counts"] = c
        states["contiguity_hits"] = (c * torch.tensor([0.5, 0.75, 0.0, 0.25, 1.0]) * hits_scale).round().long()
        if controlled:
            share = torch.tensor([0.25, 0.5, 0.0, 0.5, 0.5], dtype=torch.float64)  # expected hits / counts
            states["contiguity_expected"] = c * share * hits_scale
    from primacy.analysis.behaviour.serial_position import summarize

    run = root / name
    settings = {**settings, "data_args": {**settings["data_args"], "seed": seed}}
    results.write(run / "results", {**summarize(**states), **states}, settings)
    dt = np.array([[0.01, 0.1], [0.005, 0.08]])
    results.write_dt_history(run / "results" / "dt_history.npz", np.array([0, 10]), dt, ["ssm"], [2])
    return run


def test_mean_and_standard_error_over_seeds(tmp_path):
    runs = [fake_run(tmp_path, "a", 0, 1.0), fake_run(tmp_path, "b", 1, 0.5)]
    summary = aggregate(runs, tmp_path / "agg")
    data = np.load(tmp_path / "agg" / "accuracy.npz")
    assert data["matrices"].shape == (2, 3, 3)
    per_run = np.stack([np.load(r / "results" / "accuracy.npz")["hits"] / 10 for r in runs])  # 10 trials a cell
    np.testing.assert_allclose(data["matrix_mean"], per_run.mean(axis=0))
    np.testing.assert_allclose(data["matrix_se"], per_run.std(axis=0, ddof=1) / np.sqrt(2))
    assert summary["n_runs"] == 2 and len(summary["overall_accuracy"]["values"]) == 2
    assert summary == json.loads((tmp_path / "agg" / "summary.json").read_text())
    for name in ("heatmap.png", "heatmap.pdf", "dt_histograms.png"):
        assert (tmp_path / "agg" / name).is_file()


def test_contiguity_curve_is_averaged_over_seeds(tmp_path):
    runs = [fake_run(tmp_path, "a", 0, 1.0), fake_run(tmp_path, "b", 1, 0.5)]
    summary = aggregate(runs, tmp_path / "agg")
    assert summary["contiguity_lags"] == [-2, -1, 0, 1, 2]
    # run a: [0.5, 0.75, -, 0.25, 1.0], run b: [0.25, 0.375, -, 0.125, 0.5]; lag 0 has no pairs (null)
    assert summary["contiguity_curve"]["mean"] == pytest.approx([0.375, 0.5625, None, 0.1875, 0.75])
    assert summary["contiguity_curve"]["se"][1] == pytest.approx(0.1875)  # |0.75 - 0.375| / 2
    data = np.load(tmp_path / "agg" / "accuracy.npz")
    assert data["contiguity_curves"].shape == (2, 5)
    np.testing.assert_allclose(data["contiguity_mean"], [0.375, 0.5625, np.nan, 0.1875, 0.75])
    per_run = [json.loads((r / "results" / "summary.json").read_text()) for r in runs]
    assert per_run[0]["contiguity_curve"] == [0.5, 0.75, None, 0.25, 1.0]
    assert per_run[0]["contiguity_lags"] == [-2, -1, 0, 1, 2]
    rows = (runs[0] / "results" / "contiguity.csv").read_text().splitlines()
    assert rows[0] == "condition,lag,accuracy,controlled,n" and rows[1] == "half,-2,0.5,0.25,4"
    assert rows[3] == "half,0,,,0" and rows[4] == "half,1,0.25,-0.25,8"


def test_controlled_contiguity_curve_is_written_and_averaged_over_seeds(tmp_path):
    runs = [fake_run(tmp_path, "a", 0, 1.0), fake_run(tmp_path, "b", 1, 0.5)]
    per_run = json.loads((runs[0] / "results" / "summary.json").read_text())
    assert per_run["controlled_contiguity_curve"] == [0.25, 0.25, None, -0.25, 0.5]
    np.testing.assert_allclose(np.load(runs[0] / "results" / "accuracy.npz")["contiguity_expected"], [1, 4, 0, 4, 2])
    summary = aggregate(runs, tmp_path / "agg")
    assert summary["controlled_contiguity_curve"]["mean"] == pytest.approx([0.1875, 0.1875, None, -0.1875, 0.375])
    assert summary["controlled_contiguity_curve"]["se"][0] == pytest.approx(0.0625)  # |0.25 - 0.125| / 2
    data = np.load(tmp_path / "agg" / "accuracy.npz")
    assert data["controlled_contiguity_curves"].shape == (2, 5)
    np.testing.assert_allclose(data["controlled_contiguity_mean"], [0.1875, 0.1875, np.nan, -0.1875, 0.375])
    for name in ("contiguity.png", "contiguity.pdf"):
        assert (tmp_path / "agg" / name).is_file()


def test_runs_written_before_the_controlled_curve_read_and_aggregate_without_it(tmp_path):
    old = fake_run(tmp_path, "old", 0, 1.0, controlled=False)
    loaded = results.read(old / "results")
    assert "contiguity_expected" not in loaded and "controlled_contiguity_curve" not in loaded
    assert "controlled_contiguity_curve" not in loaded["summary"] and "contiguity_curve" in loaded
    rows = (old / "results" / "contiguity.csv").read_text().splitlines()
    assert rows[0] == "condition,lag,accuracy,controlled,n" and rows[1] == "half,-2,0.5,,4"
    summary = aggregate([old, fake_run(tmp_path, "new", 1, 0.5)], tmp_path / "agg")
    assert "controlled_contiguity_curve" not in summary and "contiguity_curve" in summary
    assert "controlled_contiguity_mean" not in np.load(tmp_path / "agg" / "accuracy.npz").files
    assert (tmp_path / "agg" / "contiguity.png").is_file(), "the raw curve is still drawn"


def test_expected_contiguity_without_the_contiguity_counts_is_refused(tmp_path):
    run = fake_run(tmp_path, "a", 0, 1.0)
    path = run / "results" / "accuracy.npz"
    arrays = dict(np.load(path))
    del arrays["contiguity_hits"], arrays["contiguity_counts"]
    np.savez(path, **arrays)
    with pytest.raises(UsageError, match="contiguity_expected without contiguity_hits and contiguity_counts"):
        results.read(run / "results")


def test_a_summary_written_with_lag_curve_reads_it_as_delay_curve(tmp_path):
    runs = [fake_run(tmp_path, "a", 0, 1.0), fake_run(tmp_path, "b", 1, 0.5)]
    path = runs[0] / "results" / "summary.json"
    content = json.loads(path.read_text())
    delay = content.pop("delay_curve")
    path.write_text(json.dumps({**content, "lag_curve": delay}))  # as runs wrote it before the rename
    loaded = results.read(runs[0] / "results")
    assert loaded["summary"]["delay_curve"] == delay and "lag_curve" not in loaded["summary"]
    assert loaded["delay_curve"].tolist() == pytest.approx(delay)
    summary = aggregate(runs, tmp_path / "agg")
    assert "delay_curve" in summary and "lag_curve" not in summary


def test_a_lag_one_seed_never_tested_is_averaged_over_the_others(tmp_path):
    runs = [fake_run(tmp_path, "a", 0, 1.0), fake_run(tmp_path, "b", 1, 0.5, contiguity_counts=(0, 8, 0, 8, 4))]
    summary = aggregate(runs, tmp_path / "agg")
    assert summary["contiguity_curve"]["mean"][0] == 0.5 and summary["contiguity_curve"]["se"][0] is None


def test_runs_written_before_the_contiguity_curve_still_read_and_aggregate(tmp_path):
    old = fake_run(tmp_path, "old", 0, 1.0, contiguity_counts=None)
    assert not (old / "results" / "contiguity.csv").exists()
    loaded = results.read(old / "results")
    for key in ("contiguity_hits", "contiguity_counts", "contiguity_curve", "contiguity_lags"):
        assert key not in loaded and key not in loaded["summary"]
    assert loaded["delay_curve"].shape == (5,)
    new = fake_run(tmp_path, "new", 1, 0.5)
    summary = aggregate([old, new], tmp_path / "agg")  # mixed: the curve is left out, the rest aggregates
    assert "contiguity_curve" not in summary and summary["n_runs"] == 2
    assert "contiguity_mean" not in np.load(tmp_path / "agg" / "accuracy.npz").files


def test_half_written_contiguity_states_are_refused(tmp_path):
    run = fake_run(tmp_path, "a", 0, 1.0)
    path = run / "results" / "accuracy.npz"
    arrays = dict(np.load(path))
    del arrays["contiguity_hits"]
    np.savez(path, **arrays)
    with pytest.raises(UsageError, match="contiguity_counts without its partner"):
        results.read(run / "results")


def test_runs_with_different_settings_are_refused(tmp_path):
    other = {**SETTINGS, "model_args": {"lr": 0.003}}
    runs = [fake_run(tmp_path, "a", 0, 1.0), fake_run(tmp_path, "b", 1, 1.0, other)]
    with pytest.raises(UsageError, match=r"differs from .* in model_args.lr \(0.001 vs 0.003\)"):
        aggregate(runs, tmp_path / "agg")


def test_missing_results_are_named(tmp_path):
    (tmp_path / "untested").mkdir()
    with pytest.raises(UsageError, match="has no results"):
        aggregate([tmp_path / "untested"], tmp_path / "agg")


def test_bilinear_follows_the_continuous_kernel_at_small_dt_only():
    a, b = hippo("legs", 16)
    def error(dt):
        continuous, discrete = impulse_responses(a, b, dt, 64)
        return float((continuous - discrete).abs().max() / continuous.abs().max())
    errors = [error(dt) for dt in (1e-5, 1e-4, 1e-3, 1e-2, 1e-1)]
    assert errors[0] < 2e-3, "bilinear converges to the continuous kernel"
    assert errors == sorted(errors) and errors[-1] > 0.5, "and drifts away from it as Δt grows (Fig. 1)"


def test_kernels_command_writes_the_figure(tmp_path, capsys):
    out = tmp_path / "fig1.png"
    main(["kernels", "--measure", "legs", "--dt", "0.01", "1.0", "--length", "32", "--degrees", "2", "7",
          "--state_size", "8", "--out", str(out)])
    assert out.is_file()
    with pytest.raises(SystemExit):
        main(["kernels", "--degrees", "64", "--state-size", "64", "--out", str(out)])
    assert "degrees=[64] are out of range" in capsys.readouterr().err


def truncate(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def drop_counts(path):
    np.savez(path, hits=np.load(path)["hits"])


def shrink_counts(path):
    np.savez(path, **{**dict(np.load(path)), "counts": np.ones((2, 2))})


DAMAGE = {  # what happens to a run's result file -> (file, what the error says about it)
    "truncated accuracy.npz": ("accuracy.npz", truncate, "not a valid .npz"),
    "empty accuracy.npz": ("accuracy.npz", lambda p: p.write_bytes(b""), "the file is empty"),
    "accuracy.npz lacking keys": ("accuracy.npz", drop_counts, "lacks counts, distractor_hits, distractor_counts"),
    "accuracy.npz of the wrong shape": ("accuracy.npz", shrink_counts, r"counts of shape \(2, 2\), expected \(3, 3\)"),
    "empty summary.json": ("summary.json", lambda p: p.write_text(""), "the file is empty"),
    "invalid summary.json": ("summary.json", truncate, "invalid JSON"),
    "summary.json holding a list": ("summary.json", lambda p: p.write_text("[0.5, 0.7]\n"), "JSON list"),
}


@pytest.mark.parametrize("case", DAMAGE)
def test_a_damaged_result_file_is_named_with_what_to_do(tmp_path, case):
    name, damage, what = DAMAGE[case]
    run = fake_run(tmp_path, "a", 0, 1.0)
    damage(run / "results" / name)
    with pytest.raises(UsageError, match=rf"^{re.escape(str(run / 'results' / name))} .*{what}.*primacy test --config"):
        results.read(run / "results")


@pytest.mark.parametrize("case", ["truncated accuracy.npz", "invalid summary.json"])
def test_aggregate_over_a_damaged_run_prints_one_line(tmp_path, capsys, case):
    name, damage, _ = DAMAGE[case]
    runs = [fake_run(tmp_path, "a", 0, 1.0), fake_run(tmp_path, "b", 1, 0.5)]
    damage(runs[1] / "results" / name)
    err = aggregate_fails(capsys, *runs, "--out", tmp_path / "agg")
    assert str(runs[1] / "results" / name) in err
    assert not (tmp_path / "agg").exists(), "nothing is written"


def test_a_damaged_dt_history_fails_before_anything_is_written(tmp_path, capsys):
    runs = [fake_run(tmp_path, "a", 0, 1.0), fake_run(tmp_path, "b", 1, 0.5)]
    truncate(runs[0] / "results" / "dt_history.npz")
    err = aggregate_fails(capsys, *runs, "--out", tmp_path / "agg")
    assert f"{runs[0] / 'results' / 'dt_history.npz'} is damaged" in err and "primacy fit" in err
    assert not (tmp_path / "agg").exists()


def test_a_missing_run_directory_prints_one_line(tmp_path, capsys):
    err = aggregate_fails(capsys, tmp_path / "nothing", "--out", tmp_path / "agg")
    assert f"run directory {tmp_path / 'nothing'} does not exist" in err


@pytest.mark.parametrize("below", [False, True])
def test_an_out_that_is_a_file_is_refused_before_any_work(tmp_path, capsys, below):
    existing = tmp_path / "agg"
    existing.write_text("keep me\n")
    out = existing / "sub" if below else existing
    # the run does not exist either: the --out error coming first shows nothing else was looked at
    err = aggregate_fails(capsys, tmp_path / "nothing", "--out", out)
    assert f"out={out}" in err and "existing file" in err
    assert existing.read_text() == "keep me\n"


def test_runs_whose_summary_lacks_the_settings_still_aggregate(tmp_path, capsys):
    runs = [fake_run(tmp_path, "a", 0, 1.0), fake_run(tmp_path, "b", 1, 0.5)]
    for run in runs:
        (run / "results" / "summary.json").write_text('{"data_args": null}\n')
    main(["aggregate", *map(str, runs), "--out", str(tmp_path / "agg")])
    summary = json.loads((tmp_path / "agg" / "summary.json").read_text())
    assert summary["n_runs"] == 2 and summary["settings"]["backbone"] is None
    assert (tmp_path / "agg" / "heatmap.png").is_file() and "2 runs ->" in capsys.readouterr().out


def test_runs_of_different_lengths_are_refused_without_n_items_in_their_summary(tmp_path):
    from primacy.analysis.behaviour.serial_position import summarize

    short = fake_run(tmp_path, "short", 0, 1.0, contiguity_counts=None)
    (short / "results" / "summary.json").write_text('{"condition": "half"}\n')
    states = {"hits": torch.full((4, 4), 5), "counts": torch.full((4, 4), 10),
              "distractor_hits": torch.full((4,), 5), "distractor_counts": torch.full((4,), 10)}
    results.write(tmp_path / "long" / "results", {**summarize(**states), **states}, {"condition": "half"})
    with pytest.raises(UsageError, match=r"has a \(4, 4\) accuracy matrix, .*short a \(3, 3\) one"):
        aggregate([short, tmp_path / "long"], tmp_path / "agg")
