"""A short run learns above chance, writes consistent result files, and `test` from its checkpoint
reproduces them exactly."""

import csv
import json

import numpy as np
import pytest
from conftest import ROOT

from primacy.cli import main

SMALL = ["--data.init_args.n_items", "8", "--data.init_args.vocab_size", "64", "--data.init_args.batch_size", "32",
         "--data.init_args.num_held_out", "128", "--data.init_args.num_test_sets", "64",
         "--data.init_args.num_val_sets", "8", "--model.init_args.backbone.init_args.d_model", "32",
         "--model.init_args.lr", "0.003", "--model.init_args.warmup_steps", "50",
         "--trainer.max_steps", "400", "--trainer.val_check_interval", "200", "--results.formats", "[png]"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    run = tmp_path_factory.mktemp("e2e") / "run"
    quiet = ["--trainer.logger", "false", "--trainer.enable_progress_bar", "false",
             "--trainer.enable_model_summary", "false", "--trainer.default_root_dir", str(run)]
    main(["fit", "--config", str(ROOT / "configs" / "quickstart.yaml"), *quiet, *SMALL])
    return run, quiet


def test_short_run_learns_above_chance(trained):
    run, _ = trained
    summary = json.loads((run / "results" / "summary.json").read_text())
    assert summary["overall_accuracy"] > 0.6
    assert summary["backbone"] == "S4DBackbone" and summary["n_items"] == 8 and summary["condition"] == "half"


def test_result_files_agree_with_each_other(trained):
    run, _ = trained
    out = run / "results"
    summary = json.loads((out / "summary.json").read_text())
    data = np.load(out / "accuracy.npz")
    hits, counts = data["hits"], data["counts"]
    assert (counts == 64).all() and summary["n_sets"] == 64, "every cell is tested once per held-out set"
    assert (data["distractor_counts"] == 64 * 8).all()
    np.testing.assert_allclose((hits / counts).mean(axis=1), summary["serial_position_curve"])
    np.testing.assert_allclose((hits / counts).mean(axis=0), summary["query_position_curve"])
    total = (hits.sum() + data["distractor_hits"].sum()) / (counts.sum() + data["distractor_counts"].sum())
    assert summary["overall_accuracy"] == pytest.approx(total)
    rows = list(csv.DictReader((out / "verification.csv").open()))
    assert len(rows) == 8 * 8 + 8
    assert sum(r["study_pos"] == "-1" for r in rows) == 8
    cell = next(r for r in rows if r["study_pos"] == "2" and r["query_pos"] == "5")
    assert float(cell["accuracy"]) == pytest.approx(hits[2, 5] / counts[2, 5]) and int(cell["n"]) == 64
    for name in ("heatmap.png", "summary.json", "accuracy.npz", "verification.csv"):
        assert (out / name).is_file()
    assert (run / "config.yaml").is_file() and (run / "checkpoints" / "last.ckpt").is_file()


def test_run_writes_the_recognition_contiguity_curve(trained):
    run, _ = trained
    out = run / "results"
    summary = json.loads((out / "summary.json").read_text())
    data = np.load(out / "accuracy.npz")
    hits, counts = data["contiguity_hits"], data["contiguity_counts"]
    assert summary["contiguity_lags"] == list(range(-7, 8)) and hits.shape == counts.shape == (15,)
    # half: 64 sets x 8 shifts x 2 variants, 4 old queries a trial -> 3 pairs (each with the old query 2 back)
    assert counts.sum() == 64 * 16 * 3 and counts[7] == 0, "no item is queried twice, so d = 0 never occurs"
    expected = [h / c if c else None for h, c in zip(hits, counts)]
    assert summary["contiguity_curve"] == pytest.approx(expected)
    rows = list(csv.DictReader((out / "contiguity.csv").open()))
    assert [int(r["lag"]) for r in rows] == list(range(-7, 8)) and [int(r["n"]) for r in rows] == counts.tolist()
    # The control: the first old query of a trial (query position 0 or 1 in half) has no partner; every other
    # cell's 64 queries are all paired, so the expected hits over all lags are the hits of query positions 2..7.
    predicted = data["contiguity_expected"]
    assert predicted.sum() == pytest.approx(data["hits"][:, 2:].sum(), rel=1e-12)
    controlled = [(h - e) / c if c else None for h, e, c in zip(hits, predicted, counts)]
    assert summary["controlled_contiguity_curve"] == pytest.approx(controlled)
    assert [float(r["controlled"]) if r["controlled"] else None for r in rows] == pytest.approx(controlled, abs=1e-5)
    assert (out / "contiguity.png").is_file()


def test_test_from_checkpoint_reproduces_the_results(trained):
    run, _ = trained
    before = dict(np.load(run / "results" / "accuracy.npz"))
    (run / "results" / "accuracy.npz").unlink()
    main(["test", "--config", str(run / "config.yaml"), "--ckpt_path", str(run / "checkpoints" / "last.ckpt"),
          "--trainer.enable_progress_bar", "false"])
    after = np.load(run / "results" / "accuracy.npz")
    for key, value in before.items():
        np.testing.assert_array_equal(after[key], value)


def test_resuming_gives_the_same_model_as_training_straight_through(tmp_path):
    """Data, optimiser and schedule all continue where they stopped: 6 steps == 3 steps + resume to 6."""
    import torch

    common = ["--config", str(ROOT / "configs" / "quickstart.yaml"), "--trainer.logger", "false",
              "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
              "--data.init_args.n_items", "4", "--data.init_args.vocab_size", "32", "--data.init_args.batch_size", "8",
              "--data.init_args.num_held_out", "8", "--data.init_args.num_test_sets", "2",
              "--data.init_args.num_val_sets", "2", "--model.init_args.warmup_steps", "2",
              "--model.init_args.backbone.init_args.d_model", "8", "--trainer.val_check_interval", "3",
              "--trainer.num_sanity_val_steps", "0", "--test_after_fit", "false", "--trainer.max_steps", "6"]
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    main(["fit", *common, "--trainer.default_root_dir", str(straight),
          "--checkpoint.every_n_train_steps", "3", "--checkpoint.save_top_k", "-1"])
    main(["fit", *common, "--trainer.default_root_dir", str(resumed),
          "--ckpt_path", str(straight / "checkpoints" / "epoch=0-step=3.ckpt")])
    a = torch.load(straight / "checkpoints" / "last.ckpt", weights_only=False)
    b = torch.load(resumed / "checkpoints" / "last.ckpt", weights_only=False)
    assert a["global_step"] == b["global_step"] == 6
    for key, value in a["state_dict"].items():
        assert torch.equal(value, b["state_dict"][key]), key


def test_uniform_condition_tests_every_pair_with_all_old_and_all_new_trials(trained, tmp_path):
    run, _ = trained
    out = tmp_path / "uniform"
    main(["test", "--config", str(run / "config.yaml"), "--ckpt_path", str(run / "checkpoints" / "last.ckpt"),
          "--trainer.enable_progress_bar", "false", "--trainer.default_root_dir", str(out),
          "--data.init_args.condition", "uniform"])
    data = np.load(out / "results" / "accuracy.npz")
    assert (data["counts"] == 64).all() and (data["distractor_counts"] == 64 * 8).all()
    rows = list(csv.DictReader((out / "results" / "verification.csv").open()))
    assert {r["condition"] for r in rows} == {"uniform"}
    assert json.loads((out / "results" / "summary.json").read_text())["condition"] == "uniform"
