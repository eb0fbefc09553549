"""Bad input fails fast with one line naming the parameter; nothing already written is lost."""

import csv
import shutil

import pytest
import yaml
from conftest import ROOT, TINY_RUNS

from primacy.cli import main
from primacy.rundir.layout import RunDir

QUICKSTART = str(ROOT / "configs" / "quickstart.yaml")


@pytest.mark.parametrize(
    "args,expected",
    [
        (["--data.init_args.n_items", "300"], "vocab_size=512 is too small for n_items=300"),
        (["--data.init_args.n_items", "0"], "n_items=0 is invalid"),
        (["--model.init_args.backbone", "S4Dbackbone"], "'S4Dbackbone' is not registered: did you mean S4DBackbone"),
        (["--model.init_args.backbone.init_args.dt_min", "-0.01"], "dt_min=-0.01"),
        (["--model.init_args.backbone.init_args.dt_min", "0.5"], "dt_min=0.5, dt_max=0.1 is not a valid"),
        (["--ckpt_path", "missing.ckpt"], "ckpt_path=missing.ckpt does not exist"),
    ],
)
def test_bad_input_gives_one_line(args, expected, quiet, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", QUICKSTART, *quiet, *args])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("primacy: error: ") and expected in last


def test_fit_refuses_a_run_directory_with_a_damaged_checkpoint(quiet, tmp_path, capsys):
    ckpt = tmp_path / "run" / "checkpoints" / "last.ckpt"
    ckpt.parent.mkdir(parents=True)
    ckpt.write_bytes(b"an earlier run")
    with pytest.raises(SystemExit) as refused:
        main(["fit", "--config", QUICKSTART, *quiet])
    assert refused.value.code == 2
    assert "holds a run that cannot be resumed" in capsys.readouterr().err
    assert ckpt.read_bytes() == b"an earlier run"


def test_print_config_shows_the_resolved_backbone(capsys):
    with pytest.raises(SystemExit) as printed:
        main(["fit", "--config", QUICKSTART, "--print_config"])
    assert printed.value.code == 0
    out = capsys.readouterr().out
    assert "class_path: primacy.backbones.s4d.S4DBackbone" in out
    assert "vocab_size: 512" in out


def test_default_logger_is_offline_wandb_inside_the_run_directory_and_follows_a_moved_run(tmp_path):
    run = tmp_path / "run"
    main(["fit", "--config", QUICKSTART, "--trainer.default_root_dir", str(run), "--trainer.enable_progress_bar",
          "false", "--trainer.max_steps", "1", "--trainer.limit_val_batches", "1", "--trainer.limit_test_batches", "1",
          "--trainer.num_sanity_val_steps", "0", "--data.init_args.batch_size", "4",
          "--data.init_args.num_test_sets", "1", "--data.init_args.num_val_sets", "1", "--results.formats", "[png]"])
    offline_runs = list((run / "wandb").glob("offline-run-*"))
    assert len(offline_runs) == 1, "one offline wandb run, stored in the run directory"

    # a run moved (or copied) elsewhere is tested where it is now: its config.yaml names the directory it was trained
    # in, and wandb's files there followed it, but neither its results nor wandb's files go back there
    moved = shutil.move(run, tmp_path / "moved")
    main([*RunDir(moved).test_args(), "--trainer.enable_progress_bar", "false"])
    assert not run.exists(), "nothing is written where the run was"
    assert len(list((moved / "wandb").glob("offline-run-*"))) == 2
    assert RunDir(moved).summary.stat().st_mtime >= RunDir(moved).last_checkpoint.stat().st_mtime


def test_training_loss_and_accuracy_reach_the_logger_every_log_every_n_steps(tmp_path):
    run = tmp_path / "run"
    main(["fit", "--config", QUICKSTART, "--trainer.default_root_dir", str(run), "--trainer.enable_progress_bar",
          "false", "--trainer.logger", "lightning.pytorch.loggers.CSVLogger", "--trainer.logger.save_dir", str(run),
          "--trainer.log_every_n_steps", "2", "--trainer.max_steps", "7", "--trainer.val_check_interval", "7",
          "--trainer.num_sanity_val_steps", "0", "--data.init_args.batch_size", "4", "--data.init_args.num_val_sets",
          "1", "--test_after_fit", "false"])
    rows = list(csv.DictReader((run / "version_0" / "metrics.csv").open()))
    logged = {int(r["step"]): (r["train/loss"], r["train/acc"]) for r in rows if r["train/loss"]}
    assert sorted(logged) == [1, 3, 5], "Lightning's steps 2, 4 and 6, counted from 0"
    assert all(float(loss) > 0 and 0 <= float(acc) <= 1 for loss, acc in logged.values())


@pytest.mark.parametrize("task", TINY_RUNS)
def test_the_loggers_get_the_whole_config_of_every_task(task, tmp_path):
    """The run's config (the file `primacy test` reads) reaches the logger, model and task side by side, even where a
    name means two things (a reconstruction task's vocab_size counts its items, its model's every token id)."""
    run = tmp_path / "run"
    main(["fit", *TINY_RUNS[task], "--trainer.default_root_dir", str(run), "--trainer.logger",
          "lightning.pytorch.loggers.CSVLogger", "--trainer.logger.save_dir", str(run), "--trainer.max_steps", "1",
          "--trainer.num_sanity_val_steps", "0", "--test_after_fit", "false"])
    [hparams] = run.glob("**/version_0/hparams.yaml")
    logged = yaml.safe_load(hparams.read_text())
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert logged == saved and logged["model"]["init_args"]["backbone"] and logged["data"]["init_args"]["seed"] == 0


def test_validate_scores_a_checkpoint_and_predict_is_refused_in_one_line(tmp_path, capsys):
    run = tmp_path / "run"
    main(["fit", *TINY_RUNS["verification"], "--trainer.default_root_dir", str(run), "--trainer.max_steps", "2",
          "--test_after_fit", "false"])
    capsys.readouterr()
    from_run = ["--config", str(run / "config.yaml"), "--ckpt_path", str(run / "checkpoints" / "last.ckpt")]
    main(["validate", *from_run])
    assert "val/overall_accuracy" in capsys.readouterr().out
    with pytest.raises(SystemExit) as refused:
        main(["predict", *from_run])
    assert refused.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "primacy: error: predict: the task VerificationTask has no predict data (no predict_dataloader): use primacy "
        "test, which scores its held-out sets and writes <run>/results")



@pytest.mark.parametrize("config", ["quickstart.yaml", "cpu/induction-attn-2L.yaml"])
def test_the_models_hyperparameters_are_the_config_lightning_would_record(config, tmp_path):
    """PrimacyCLI's quicker copy of the parsed config (no second check, JSON instead of YAML) is the copy Lightning's
    own would make, so the hyperparameters a checkpoint keeps are the same."""
    from primacy.cli.lightning import PrimacyCLI

    class Built(Exception):  # noqa: N818 - carries the CLI out before training
        pass

    class BuildOnly(PrimacyCLI):
        def before_fit(self) -> None:
            raise Built(self)

    with pytest.raises(Built) as built:
        BuildOnly(args=["fit", "--config", str(ROOT / "configs" / config), "--trainer.logger", "false",
                        "--trainer.default_root_dir", str(tmp_path)])
    cli = built.value.args[0]
    lightnings = yaml.safe_load(cli.parser.dump(cli.config, skip_link_targets=False, skip_none=False, format="yaml"))
    assert cli.config_dump == lightnings["fit"]
    hparams = dict(cli.model.hparams)
    assert hparams.pop("_class_path") == lightnings["fit"]["model"]["class_path"]
    assert hparams.pop("_instantiator") == "lightning.pytorch.cli.instantiate_module"
    assert yaml.safe_load(yaml.safe_dump(hparams)) == lightnings["fit"]["model"]["init_args"]
