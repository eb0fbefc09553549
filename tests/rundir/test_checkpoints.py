"""A checkpoint is checked before use: a file that is not one, or one trained with other settings than the config
says, is refused in one line before anything is built or written."""

from pathlib import Path

import pytest
import torch
import yaml
from conftest import ROOT

from primacy.cli import main
from primacy.errors import UsageError
from primacy.rundir.checkpoints import checkpoint_difference, read_checkpoint

QUIET = ["--trainer.logger", "false", "--trainer.enable_progress_bar", "false",
         "--trainer.enable_model_summary", "false"]
TINY = ["--config", str(ROOT / "configs" / "quickstart.yaml"), *QUIET, "--data.init_args.n_items", "4",
        "--data.init_args.vocab_size", "32", "--data.init_args.batch_size", "8", "--data.init_args.num_held_out", "8",
        "--data.init_args.num_test_sets", "2", "--data.init_args.num_val_sets", "2",
        "--model.init_args.warmup_steps", "2", "--trainer.max_steps", "2", "--trainer.num_sanity_val_steps", "0",
        "--results.formats", "[png]", "--model.init_args.backbone.init_args.d_model", "8"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two tiny verification runs: S4D (tested after fitting, so it has results) and LSTM."""
    root = tmp_path_factory.mktemp("checkpoints")
    main(["fit", *TINY, "--trainer.default_root_dir", str(root / "s4d")])
    main(["fit", *TINY, "--model.init_args.backbone", "LSTMBackbone", "--model.init_args.backbone.init_args.d_model",
          "8", "--test_after_fit", "false", "--trainer.default_root_dir", str(root / "lstm")])
    return root / "s4d", root / "lstm"


def ckpt(run: Path) -> str:
    return str(run / "checkpoints" / "last.ckpt")


def snapshot(run: Path) -> dict[Path, int]:
    return {path: path.stat().st_mtime_ns for path in run.rglob("*")}


def refusal(args: list[str], capsys) -> str:
    """The one error line of a command that must exit with status 2."""
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.count("primacy: error:") == 1
    last = err.strip().splitlines()[-1]
    assert last.startswith("primacy: error: ")
    return last


def test_a_checkpoint_of_another_backbone_is_refused_and_nothing_is_written(runs, capsys):
    s4d, lstm = runs
    before = snapshot(s4d)
    line = refusal(["test", "--config", str(s4d / "config.yaml"), "--ckpt_path", ckpt(lstm), *QUIET], capsys)
    assert f"ckpt_path={ckpt(lstm)} does not match the config: model.init_args.backbone.class_path: the config says " \
           "primacy.backbones.s4d.S4DBackbone, the checkpoint primacy.backbones.lstm.LSTMBackbone; use the run's own " \
           "config.yaml, or another checkpoint" in line
    assert snapshot(s4d) == before, "the S4D run's results stay as they were"


@pytest.mark.parametrize("subcommand", ["test", "fit"])
def test_a_model_setting_that_differs_from_the_checkpoint_is_refused(runs, tmp_path, capsys, subcommand):
    s4d, _ = runs
    line = refusal([subcommand, "--config", str(s4d / "config.yaml"), "--ckpt_path", ckpt(s4d), *QUIET,
                    "--trainer.default_root_dir", str(tmp_path / "run"),
                    "--model.init_args.backbone.init_args.d_model", "16"], capsys)
    assert "model.init_args.backbone.init_args.d_model: the config says 16, the checkpoint 8" in line
    assert not (tmp_path / "run").exists()


def test_a_resumed_fit_refuses_other_optimiser_settings_but_test_ignores_them(runs, tmp_path, capsys):
    s4d, _ = runs
    common = ["--config", str(s4d / "config.yaml"), "--ckpt_path", ckpt(s4d), *QUIET, "--model.init_args.lr", "0.01"]
    line = refusal(["fit", *common, "--trainer.default_root_dir", str(tmp_path / "resumed")], capsys)
    assert "model.init_args.lr: the config says 0.01, the checkpoint 0.001" in line
    main(["test", *common, "--trainer.default_root_dir", str(tmp_path / "tested")])
    assert (tmp_path / "tested" / "results" / "summary.json").is_file()


def not_checkpoints(run: Path, folder: Path) -> dict[str, Path]:
    data = Path(ckpt(run)).read_bytes()
    files = {name: folder / f"{name}.ckpt" for name in ("empty", "truncated", "yaml", "torch_dict")}
    files["empty"].write_bytes(b"")
    files["truncated"].write_bytes(data[: len(data) // 2])
    files["yaml"].write_text((run / "config.yaml").read_text())
    torch.save({"a": 1}, files["torch_dict"])
    return files


@pytest.mark.parametrize("subcommand", ["test", "fit"])
@pytest.mark.parametrize("kind,reason", [
    ("empty", "is not a readable Lightning checkpoint: the file is empty"),
    ("truncated", "is not a readable Lightning checkpoint: the file is truncated or corrupted"),
    ("yaml", "is not a readable Lightning checkpoint: it is not a torch file"),
    ("torch_dict", "is a torch file but not a Lightning checkpoint: it has no state_dict, global_step, "
                   "hyper_parameters"),
])
def test_a_file_that_is_not_a_checkpoint_is_named_in_one_line(runs, tmp_path, capsys, subcommand, kind, reason):
    s4d, _ = runs
    path = not_checkpoints(s4d, tmp_path)[kind]
    line = refusal([subcommand, "--config", str(s4d / "config.yaml"), "--ckpt_path", str(path), *QUIET,
                    "--trainer.default_root_dir", str(tmp_path / "run")], capsys)
    assert line == f"primacy: error: ckpt_path={path} {reason}"
    assert not (tmp_path / "run").exists()


def test_read_checkpoint_names_the_parameter_and_refuses_directories(runs, tmp_path):
    s4d, _ = runs
    assert read_checkpoint(ckpt(s4d))["global_step"] == 2
    with pytest.raises(UsageError, match=f"^resume={tmp_path} is a directory"):
        read_checkpoint(tmp_path, parameter="resume")
    with pytest.raises(UsageError, match="^ckpt_path=missing.ckpt does not exist"):
        read_checkpoint("missing.ckpt")


def test_equivalent_spellings_of_a_setting_are_the_same():
    hparams = {"_class_path": "primacy.models.lists.SequenceModel",
               "_instantiator": "lightning.pytorch.cli.instantiate_module",
               "backbone": {"class_path": "primacy.backbones.lstm.LSTMBackbone",
                            "init_args": {"d_model": 8, "max_timescale": None}},
               "vocab_size": 32, "lr": 0.001, "betas": [0.9, 0.99]}
    config = {"class_path": "primacy.models.lists.SequenceModel",
              "init_args": {"backbone": {"class_path": "LSTMBackbone",
                                         "init_args": {"d_model": 8.0, "max_timescale": None}},
                            "vocab_size": 32, "lr": 0.001, "betas": (0.9, 0.99)}}
    assert checkpoint_difference(hparams, config, "fit") is None
    config["init_args"]["backbone"]["init_args"]["d_model"] = 9
    assert checkpoint_difference(hparams, config, "test") == \
        "model.init_args.backbone.init_args.d_model: the config says 9, the checkpoint 8"


def test_a_setting_added_after_the_checkpoint_counts_only_when_it_leaves_its_default():
    hparams = {"_class_path": "primacy.models.lists.SequenceModel",
               "backbone": {"class_path": "primacy.backbones.lstm.LSTMBackbone", "init_args": {"d_model": 8}}}
    config = {"class_path": "primacy.models.lists.SequenceModel",
              "init_args": {"backbone": {"class_path": "primacy.backbones.lstm.LSTMBackbone",
                                         "init_args": {"d_model": 8, "n_layers": 1}}}}
    assert checkpoint_difference(hparams, config, "test") is None
    config["init_args"]["backbone"]["init_args"]["n_layers"] = 2
    assert checkpoint_difference(hparams, config, "test") == \
        "model.init_args.backbone.init_args.n_layers: the config says 2, the checkpoint has no such setting"


def test_the_context_length_set_from_the_task_is_not_asked_of_the_checkpoint():
    """Lightning's hyper_parameters leave a link's target out of a nested backbone's init_args: the context_length the
    CLI sets from the task is not a difference (the class is never imported for it)."""
    backbone = {"class_path": "some_plugin.WindowedBackbone", "init_args": {"d_model": 8}}
    hparams = {"_class_path": "primacy.models.lists.SequenceModel", "backbone": backbone}
    config = {"class_path": "primacy.models.lists.SequenceModel",
              "init_args": {"backbone": {**backbone, "init_args": {"d_model": 8, "context_length": 64}}}}
    assert checkpoint_difference(hparams, config, "test") is None


def test_analyze_refuses_a_run_without_an_exact_influence_before_any_work(runs, tmp_path, capsys):
    _, lstm = runs
    out = tmp_path / "icl"
    line = refusal(["analyze", "icl", "--config", str(lstm / "config.yaml"), "--ckpt_path", ckpt(lstm),
                    "--out", str(out)], capsys)
    assert line == f"primacy: error: config={lstm / 'config.yaml'} has backbone LSTMBackbone: analyze icl needs " \
                   "attention or an exact token-to-token influence (Transformer, S4, S4D, Mamba, xLSTM with mLSTM " \
                   "blocks)"
    assert not out.exists()


def test_analyze_refuses_a_checkpoint_of_another_backbone(runs, tmp_path, capsys):
    s4d, lstm = runs
    settings = yaml.safe_load((s4d / "config.yaml").read_text())
    settings["model"]["init_args"]["backbone"] = {"class_path": "TransformerBackbone", "init_args": {"d_model": 8}}
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(settings))
    out = tmp_path / "icl"
    line = refusal(["analyze", "icl", "--config", str(config), "--ckpt_path", ckpt(lstm), "--out", str(out)], capsys)
    assert "model.init_args.backbone.class_path: the config says primacy.backbones.transformer.TransformerBackbone, " \
           "the checkpoint primacy.backbones.lstm.LSTMBackbone" in line
    assert not out.exists()
