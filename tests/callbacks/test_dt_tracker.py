"""DtTracker records Δt over training into the run directory, and keeps quiet for models without Δt."""

import numpy as np
import pytest
from conftest import ROOT

from primacy.cli import main
from primacy.models.lists import SequenceModel

TINY = ["--data.init_args.n_items", "4", "--data.init_args.vocab_size", "32", "--data.init_args.batch_size", "8",
        "--data.init_args.num_held_out", "8", "--data.init_args.num_test_sets", "2", "--data.init_args.num_val_sets",
        "2", "--model.init_args.warmup_steps", "2", "--trainer.max_steps", "7", "--trainer.val_check_interval", "7",
        "--trainer.num_sanity_val_steps", "0", "--test_after_fit", "false"]


def test_history_has_the_initial_and_final_values_of_every_channel(quiet, tmp_path):
    main(["fit", "--config", str(ROOT / "configs" / "quickstart.yaml"), *quiet, *TINY,
          "--model.init_args.backbone.init_args.d_model", "8", "--model.init_args.lr", "0.05",
          "--trainer.callbacks.every_n_steps", "3"])
    out = tmp_path / "run" / "results"
    history = np.load(out / "dt_history.npz")
    assert history["steps"].tolist() == [0, 3, 6, 7]
    assert history["dt"].shape == (4, 8) and (history["dt"] > 0).all()
    assert history["layers"].tolist() == ["ssm"] and history["channels"].tolist() == [8]
    assert not np.allclose(history["dt"][0], history["dt"][-1]), "Δt is trained, so it moves"
    model = SequenceModel.load_from_checkpoint(tmp_path / "run" / "checkpoints" / "last.ckpt", map_location="cpu")
    np.testing.assert_allclose(history["dt"][-1], model.backbone.dt()["ssm"].detach().numpy(), rtol=1e-6,
                               err_msg="the last row is the Δt of the trained model")
    assert (out / "dt_trajectory.png").is_file() and (out / "dt_histogram.png").is_file()


def test_backbones_without_dt_write_nothing(quiet, tmp_path):
    main(["fit", "--config", str(ROOT / "configs" / "quickstart-lstm.yaml"), *quiet, *TINY,
          "--model.init_args.backbone.init_args.d_model", "8", "--trainer.callbacks+=DtTracker"])
    assert not (tmp_path / "run" / "results" / "dt_history.npz").exists()


def test_figures_come_in_the_formats_asked_for_and_not_at_all_for_none(quiet, tmp_path):
    for formats, written in (("[pdf, svg]", {"dt_trajectory.pdf", "dt_trajectory.svg", "dt_histogram.pdf",
                                              "dt_histogram.svg"}), ("[]", set())):
        run = tmp_path / formats
        main(["fit", "--config", str(ROOT / "configs" / "quickstart.yaml"), *quiet, *TINY,
              "--model.init_args.backbone.init_args.d_model", "8", "--trainer.callbacks.formats", formats,
              "--results.formats", "[]", "--trainer.default_root_dir", str(run)])
        out = run / "results"
        assert (out / "dt_history.npz").is_file()
        assert {p.name for p in out.iterdir() if p.name.startswith("dt_") and p.suffix != ".npz"} == written


def test_an_unknown_format_is_one_line(quiet, tmp_path, capsys):
    with pytest.raises(SystemExit) as refused:
        main(["fit", "--config", str(ROOT / "configs" / "quickstart.yaml"), *quiet, *TINY,
              "--trainer.callbacks.formats", "[xyz]"])
    assert refused.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("primacy: error: formats=['xyz'] are unknown: choose among ")
    assert not (tmp_path / "run" / "checkpoints").exists()
