"""TokenDtTracker records the Δt each position of fixed validation sequences takes over training: for S4D, a fixed
Δt at every position (the control; Mamba's selective step is tested in its plugin), kept through a resume."""

import json
import signal

import numpy as np
import pytest
from conftest import ROOT

from primacy.cli import main
from primacy.models.lists import SequenceModel

TINY = ["--data.init_args.n_items", "4", "--data.init_args.vocab_size", "32", "--data.init_args.batch_size", "8",
        "--data.init_args.num_held_out", "8", "--data.init_args.num_test_sets", "2", "--data.init_args.num_val_sets",
        "2", "--model.init_args.warmup_steps", "2", "--trainer.max_steps", "7", "--trainer.val_check_interval", "7",
        "--trainer.num_sanity_val_steps", "0", "--test_after_fit", "false",
        "--model.init_args.backbone.init_args.d_model", "8", "--model.init_args.lr", "0.05",
        "--trainer.callbacks=TokenDtTracker", "--trainer.callbacks.every_n_steps", "3",
        "--trainer.callbacks.sequences", "3"]


def fit(run, *extra: str) -> None:
    main(["fit", "--config", str(ROOT / "configs" / "quickstart.yaml"), "--trainer.logger", "false",
          "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
          "--trainer.default_root_dir", str(run), *TINY, *extra])


def history(run) -> dict[str, np.ndarray]:
    with np.load(run / "results" / "token_dt.npz") as f:
        return dict(f)


@pytest.fixture(scope="module")
def tracked(tmp_path_factory):
    run = tmp_path_factory.mktemp("token-dt") / "run"
    fit(run)
    return run


def test_a_fixed_dt_is_the_same_at_every_position_and_the_last_row_is_the_trained_models(tracked):
    h = history(tracked)
    assert h["steps"].tolist() == [0, 3, 6, 7]
    assert h["dt"].shape == (4, 8, 8) and h["tokens"].shape == (3, 8)  # 4 study + 4 query tokens, 8 channels
    assert h["layers"].tolist() == ["ssm"] and h["channels"].tolist() == [8]
    assert (h["dt"] == h["dt"][:, :1]).all(), "S4D's Δt does not depend on the position"
    model = SequenceModel.load_from_checkpoint(tracked / "checkpoints" / "last.ckpt", map_location="cpu")
    np.testing.assert_allclose(h["dt"][-1, 0], model.backbone.dt()["ssm"].numpy(), rtol=1e-6)
    assert (tracked / "results" / "token_dt.png").is_file()


def test_a_resumed_run_has_the_history_of_an_uninterrupted_one(tracked, tmp_path):
    resumed = tmp_path / "resumed"
    stop = {"class_path": "signals.SignalAt", "init_args": {"step": 4, "signum": int(signal.SIGINT)}}
    with pytest.raises(SystemExit):
        fit(resumed, f"--trainer.callbacks+={json.dumps(stop)}")
    fit(resumed)
    expected, got = history(tracked), history(resumed)
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        np.testing.assert_array_equal(got[key], value, err_msg=key)


def test_a_backbone_without_dt_is_a_one_line_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as stopped:
        fit(tmp_path / "run", "--model.init_args.backbone", "LSTMBackbone")
    err = capsys.readouterr().err.strip()
    assert stopped.value.code == 2 and len(err.splitlines()) == 1, err
    assert ("TokenDtTracker: backbone LSTMBackbone has no Δt: it needs an SSM (S4, S4D, or Mamba's selection step)"
            in err)
