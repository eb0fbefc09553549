"""`primacy aggregate` over free-recall runs: rates and curves averaged over seeds, the runs' lists pooled into one
long-format file that psifr reads as one subject per run, and a mix of tasks or two runs of one name refused."""

import json

import numpy as np
import pytest
import torch
from conftest import extra_module
from support.accuracy_results import VERIFICATION, accuracy_run
from support.cli import aggregate_fails
from support.free_recall_results import L_ITEMS, SETTINGS, VOCAB, random_free_recall_run

from primacy.cli import main
from primacy.errors import UsageError
from primacy.rundir import results
from primacy.workflows import aggregate as aggregate_module
from primacy.workflows.aggregate import FREE_RECALL_CURVES, FREE_RECALL_SCALARS, aggregate


def run_summary(run):
    return json.loads((run / "results" / "summary.json").read_text())


def values(run_summaries, key):
    """Each summary's value (R,) or curve (R, L) of ``key``, null as NaN."""
    return np.array([s[key] for s in run_summaries], dtype=float)


def test_rates_and_curves_are_averaged_over_seeds(tmp_path):
    runs = [random_free_recall_run(tmp_path, f"seed{seed}", seed) for seed in range(3)]
    per_run = [run_summary(r) for r in runs]
    summary = aggregate(runs, tmp_path / "agg")
    assert summary == json.loads((tmp_path / "agg" / "summary.json").read_text())
    assert summary["n_runs"] == 3 and summary["runs"] == [str(r) for r in runs]
    assert summary["task"] == "free_recall" and summary["subjects"] == ["seed0", "seed1", "seed2"]
    assert summary["settings"] == {"task": "free_recall", **{k: SETTINGS[k] for k in (
        "condition", "n_items", "vocab_size", "backbone", "backbone_args", "model_args")},
        "data_args": {k: v for k, v in SETTINGS["data_args"].items() if k != "seed"}}
    for key in FREE_RECALL_SCALARS:
        x = values(per_run, key)  # R
        assert x.shape == (3,) and not np.isnan(x).any(), key
        assert summary[key]["values"] == pytest.approx(x.tolist(), abs=1e-12), key
        assert summary[key]["mean"] == pytest.approx(x.mean(), abs=1e-12), key
        assert summary[key]["se"] == pytest.approx(x.std(ddof=1) / np.sqrt(3), abs=1e-12), key
    lags = np.arange(-(L_ITEMS - 1), L_ITEMS)
    assert summary["lag_crp_lags"] == lags.tolist() == per_run[0]["lag_crp_lags"]
    with np.load(tmp_path / "agg" / "free_recall.npz") as data:
        assert sorted(data.files) == sorted([f"{p}_{s}" for p in FREE_RECALL_CURVES.values()
                                             for s in ("curves", "mean", "se")] + ["lag_crp_lags"])
        np.testing.assert_array_equal(data["lag_crp_lags"], lags)
        for key, prefix in FREE_RECALL_CURVES.items():
            curves = values(per_run, key)  # R L (lag_crp: R 2L-1)
            defined = np.ones(curves.shape[1], dtype=bool)
            if key == "lag_crp":
                defined[L_ITEMS - 1] = False  # lag 0 is never possible: null in every run
            assert curves.shape == (3, len(defined)) and not np.isnan(curves[:, defined]).any(), key
            mean, se = curves.mean(axis=0), curves.std(axis=0, ddof=1) / np.sqrt(3)
            np.testing.assert_allclose(data[f"{prefix}_curves"], curves, rtol=0, atol=1e-12, err_msg=key)
            np.testing.assert_allclose(data[f"{prefix}_mean"], mean, rtol=0, atol=1e-12, err_msg=key)
            np.testing.assert_allclose(data[f"{prefix}_se"], se, rtol=0, atol=1e-12, err_msg=key)
            np.testing.assert_allclose(values([summary[key]], "mean")[0], mean, rtol=0, atol=1e-12, err_msg=key)
            np.testing.assert_allclose(values([summary[key]], "se")[0], se, rtol=0, atol=1e-12, err_msg=key)
    assert summary["lag_crp"]["mean"][L_ITEMS - 1] is None and summary["lag_crp"]["se"][L_ITEMS - 1] is None
    assert sorted(p.name for p in (tmp_path / "agg").iterdir()) == [
        "free_recall.csv", "free_recall.npz", "free_recall.pdf", "free_recall.png", "summary.json"]


def test_cmr_is_fitted_to_the_mean_lag_crp_and_to_each_run(tmp_path):
    runs = [random_free_recall_run(tmp_path, f"seed{seed}", seed, n_lists=400) for seed in range(3)]
    summary = aggregate(runs, tmp_path / "agg")
    lags = np.array(summary["lag_crp_lags"])
    mean = np.array(summary["lag_crp"]["mean"], dtype=float)
    assert summary["cmr_fit"] == results.cmr_fit_entry(mean, lags)
    assert summary["cmr_fit"]["lags"] == [-5, -4, -3, -2, -1, 1, 2, 3, 4, 5]
    for variant in ("paper", "canonical"):
        own = [run_summary(r)["cmr_fit"][variant] for r in runs]  # each run's summary fits its own lag-CRP
        assert all(fit is not None for fit in own) and summary["cmr_fit"][variant] is not None
        for key in ("distance", "beta_enc", "beta_rec", "gamma_ft", "inv_temperature"):
            entry = summary["cmr_fit_runs"][variant][key]
            assert entry["values"] == pytest.approx([fit[key] for fit in own], abs=1e-12), (variant, key)
            assert entry["mean"] == pytest.approx(np.mean(entry["values"]), abs=1e-12)


def test_the_figure_draws_the_mean_curves_with_their_bands_and_the_fits_of_the_mean(tmp_path, monkeypatch):
    calls = []
    draw = aggregate_module.figures.free_recall.free_recall

    def recording(spc, pfr, lags, lag_crp, title="", cmr=(), se=None):
        calls.append((spc, pfr, lags, lag_crp, title, cmr, se))
        return draw(spc, pfr, lags, lag_crp, title, cmr, se)

    monkeypatch.setattr(aggregate_module.figures.free_recall, "free_recall", recording)
    runs = [random_free_recall_run(tmp_path, f"seed{seed}", seed, n_lists=400) for seed in range(3)]
    summary = aggregate(runs, tmp_path / "agg")
    [(spc, pfr, lags, lag_crp, title, cmr, se)] = calls
    arrays = np.load(tmp_path / "agg" / "free_recall.npz")
    for drawn, key in ((spc, "serial_position"), (pfr, "first_recall"), (lag_crp, "lag_crp")):
        np.testing.assert_array_equal(drawn, arrays[f"{key}_mean"])
    np.testing.assert_array_equal(se["spc"], arrays["serial_position_se"])
    np.testing.assert_array_equal(se["lag_crp"], arrays["lag_crp_se"])
    assert title.startswith(f"S4DBackbone · free_recall · L={L_ITEMS} · K={VOCAB} · mean of 3 runs\n")
    assert [label.split(" (")[0] for label, _, _ in cmr] == ["CMR paper", "CMR canonical"]
    np.testing.assert_allclose(cmr[0][2], summary["cmr_fit"]["paper"]["curve"])


def test_a_lag_only_some_runs_have_is_averaged_over_those(tmp_path):
    # One output per list: no transition, so this run's lag-CRP is null at every lag, its spc defined everywhere.
    lonely = random_free_recall_run(tmp_path, "lonely", 0, recalls=lambda study: torch.cat(
        [study[:, :1], torch.full((study.shape[0], L_ITEMS - 1), -1)], dim=1))
    assert all(v is None for v in run_summary(lonely)["lag_crp"])
    runs = [lonely, random_free_recall_run(tmp_path, "a", 1), random_free_recall_run(tmp_path, "b", 2)]
    summary = aggregate(runs, tmp_path / "agg")
    crp = values([run_summary(r) for r in runs[1:]], "lag_crp")  # the two runs with transitions
    lag1 = L_ITEMS  # index of lag +1
    assert summary["lag_crp"]["mean"][lag1] == pytest.approx(crp[:, lag1].mean(), abs=1e-12)
    assert summary["lag_crp"]["se"][lag1] == pytest.approx(crp[:, lag1].std(ddof=1) / np.sqrt(2), abs=1e-12)
    with np.load(tmp_path / "agg" / "free_recall.npz") as data:
        assert np.isnan(data["lag_crp_curves"][0]).all() and not np.isnan(data["lag_crp_curves"][1:, lag1]).any()
    # the serial-position curve is defined in all three runs: over all three
    spc = values([run_summary(r) for r in runs], "serial_position_curve")
    assert summary["serial_position_curve"]["mean"] == pytest.approx(spc.mean(axis=0).tolist(), abs=1e-12)
    assert spc[0].tolist() == [1.0] + [0.0] * (L_ITEMS - 1)


def test_the_pooled_csv_is_one_subject_per_run_for_psifr(tmp_path):
    fr, pd = extra_module("psifr.fr"), extra_module("pandas")
    runs = [random_free_recall_run(tmp_path, f"seed{seed}", seed, n_lists=40 + 10 * seed) for seed in range(3)]
    aggregate(runs, tmp_path / "agg")
    pooled = (tmp_path / "agg" / "free_recall.csv").read_text().splitlines()
    own = [(r / "results" / "free_recall.csv").read_text().splitlines() for r in runs]
    assert pooled[0] == own[0][0] == "subject,list,trial_type,position,item,study_position"
    assert pooled[1:] == [row for lines in own for row in lines[1:]], "every run's rows, in the order of the runs"

    merged = fr.merge_free_recall(pd.read_csv(tmp_path / "agg" / "free_recall.csv"))
    assert sorted(merged["subject"].unique()) == ["seed0", "seed1", "seed2"]
    spc = fr.spc(merged)
    crp = fr.lag_crp(merged)
    for run in runs:
        expected = run_summary(run)
        subject = run.name
        ours = spc[spc["subject"] == subject].sort_values("input")
        np.testing.assert_allclose(ours["recall"].to_numpy(), expected["serial_position_curve"], rtol=0, atol=1e-12)
        theirs = crp[crp["subject"] == subject].sort_values("lag")
        assert theirs["lag"].tolist() == expected["lag_crp_lags"]
        np.testing.assert_allclose(theirs["prob"].to_numpy(), values([expected], "lag_crp")[0], rtol=0, atol=1e-12)


def test_two_runs_of_one_directory_name_are_refused_in_one_line(tmp_path, capsys):
    runs = [random_free_recall_run(tmp_path / sweep, "seed0", seed) for seed, sweep in enumerate(("sweep1", "sweep2"))]
    err = aggregate_fails(capsys, *runs, "--out", tmp_path / "agg")
    assert f"runs {runs[0]} and {runs[1]} have the same subject 'seed0'" in err
    assert not (tmp_path / "agg").exists(), "nothing is written"


@pytest.mark.parametrize("free_recall_first", [True, False])
def test_a_free_recall_run_with_a_verification_run_is_refused_in_one_line(tmp_path, capsys, free_recall_first):
    recall = random_free_recall_run(tmp_path, "recall", 0)
    verification = accuracy_run(tmp_path, "verification", 1, VERIFICATION, delays=None)
    runs = [recall, verification] if free_recall_first else [verification, recall]
    err = aggregate_fails(capsys, *runs, "--out", tmp_path / "agg")
    tasks = ("'free_recall'", "'verification'") if free_recall_first else ("'verification'", "'free_recall'")
    assert f"run {runs[1]} differs from {runs[0]} in task ({tasks[0]} vs {tasks[1]})" in err
    assert not (tmp_path / "agg").exists(), "nothing is written"


def test_runs_of_different_list_lengths_are_refused(tmp_path):
    runs = [random_free_recall_run(tmp_path, "a", 0), random_free_recall_run(tmp_path, "b", 1)]
    path = runs[1] / "results" / "free_recall.npz"
    arrays = dict(np.load(path))
    for key in ("spc", "first_recall"):
        arrays[key] = arrays[key][:-1]
    for key in ("lag_actual", "lag_possible"):
        arrays[key] = arrays[key][1:-1]
    np.savez(path, **arrays)
    with pytest.raises(UsageError, match=rf"run {runs[1]} has lists of {L_ITEMS - 1} items, {runs[0]} of {L_ITEMS}"):
        aggregate(runs, tmp_path / "agg")


def test_a_run_without_its_csv_pools_the_rows_its_test_wrote(tmp_path):
    """results/ keeps a seed's free_recall.npz and not its free_recall.csv: the same lists, made again from the npz's
    study lists and recalls, with the run directory's name as subject."""
    runs = [random_free_recall_run(tmp_path, f"seed{seed}", seed) for seed in range(3)]
    aggregate(runs, tmp_path / "with")
    for run in runs[1:]:
        (run / "results" / "free_recall.csv").unlink()
    assert aggregate(runs, tmp_path / "without")["subjects"] == ["seed0", "seed1", "seed2"]
    pooled = [(tmp_path / out / "free_recall.csv").read_bytes() for out in ("with", "without")]
    assert pooled[0] == pooled[1]


def _without_lists(results_dir):
    """The run's free_recall.csv removed and its free_recall.npz without the lists it is made from."""
    (results_dir / "free_recall.csv").unlink()
    arrays = dict(np.load(results_dir / "free_recall.npz"))
    np.savez(results_dir / "free_recall.npz", **{k: v for k, v in arrays.items() if k not in ("study", "recalls")})


def _lists_of_another_count(results_dir):
    arrays = dict(np.load(results_dir / "free_recall.npz"))
    np.savez(results_dir / "free_recall.npz", **{**arrays, "study": arrays["study"][:-1]})


def _an_item_twice_in_a_list(results_dir):
    (results_dir / "free_recall.csv").unlink()
    arrays = dict(np.load(results_dir / "free_recall.npz"))
    arrays["study"][0, 1] = arrays["study"][0, 0]
    np.savez(results_dir / "free_recall.npz", **arrays)


@pytest.mark.parametrize("damage, what", [
    (lambda r: (r / "free_recall.npz").write_bytes(b""), r"free_recall.npz is damaged \(the file is empty\)"),
    (_without_lists, "free_recall.csv does not exist"),
    (_lists_of_another_count, r"free_recall.npz has study of shape \(59, 6\) and dtype int64, expected integer ids "
                              r"of shape \(60 lists, steps\)"),
    (_an_item_twice_in_a_list, r"free_recall.npz is damaged \(study\[0\] .*\)"),
    (lambda r: (r / "summary.json").write_text('{"task": "recall"}\n'), "has task 'recall'"),
])
def test_a_damaged_free_recall_run_is_named_with_what_to_do(tmp_path, damage, what):
    runs = [random_free_recall_run(tmp_path, "a", 0), random_free_recall_run(tmp_path, "b", 1)]
    damage(runs[1] / "results")
    with pytest.raises(UsageError, match=rf"{what}.*primacy test --config"):
        aggregate(runs, tmp_path / "agg")
    assert not (tmp_path / "agg").exists()


def test_the_command_prints_the_mean_number_recalled(tmp_path, capsys):
    runs = [random_free_recall_run(tmp_path, f"seed{k}", k) for k in range(2)]
    main(["aggregate", *map(str, runs), "--out", str(tmp_path / "mean")])
    summary = json.loads((tmp_path / "mean" / "summary.json").read_text())
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.startswith(f"2 runs -> {tmp_path / 'mean'}: mean_recalled {summary['mean_recalled']['mean']:+.3f}")


def test_the_cmr_fit_is_drawn_without_a_line_across_lag_zero():
    lags = np.arange(-(L_ITEMS - 1), L_ITEMS)
    lag_crp = np.where(lags == 0, np.nan, np.exp(-np.abs(lags)))
    fit_lags = np.array([-2, -1, 1, 2])
    fig = aggregate_module.figures.free_recall.free_recall(np.full(L_ITEMS, 0.5), np.full(L_ITEMS, 1 / L_ITEMS),
                                                           lags, lag_crp,
                                                           cmr=[("CMR paper (d = 0.001)", fit_lags,
                                                                 np.array([0.1, 0.3, 0.5, 0.2]))])
    line = next(line for line in fig.axes[2].lines if line.get_label().startswith("CMR"))
    x, y = line.get_xdata(), line.get_ydata()
    assert np.isnan(x[2]) and np.isnan(y[2]) and x[[0, 1, 3, 4]].tolist() == [-2, -1, 1, 2]
