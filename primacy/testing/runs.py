"""Tiny runs of ``primacy fit``: the small settings of each built-in task, the command line of a run of a few steps
on the CPU without logger, progress bar or figures, and ``tiny_fit`` that runs one in this process. SignalAt
interrupts a run at a step, to test resuming."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from lightning.pytorch.callbacks import Callback

# a primacy checkout's configs (TINY_RUNS start from its quickstarts); absent when primacy is installed from a wheel
CONFIGS = Path(__file__).resolve().parents[2] / "configs"
QUIET = ["--trainer.logger", "false", "--trainer.enable_progress_bar", "false",
         "--trainer.enable_model_summary", "false"]
# No figures (results, validation heatmaps): they took 0.8 s of a 1.4 s tiny verification run. Tests of figures ask
# for them.
NO_FIGURES = ["--results.formats", "[]", "--results.val_heatmap", "false"]
# Each built-in task at a size that trains and tests in a few seconds.
TINY_SETTINGS: dict[str, dict[str, object]] = {
    "VerificationTask": {"n_items": 4, "vocab_size": 32, "batch_size": 4, "num_held_out": 12, "num_test_sets": 5,
                         "num_val_sets": 2},
    "InductionTask": {"vocab_size": 32, "length": 16, "min_period": 2, "prompt_items": 5, "batch_size": 4,
                      "num_val_prompts": 6, "num_test_prompts": 11},
    "ReconstructionTask": {"n_items": 4, "vocab_size": 16, "delay": [0, 2], "condition": "cued", "batch_size": 4,
                           "num_held_out": 12, "num_test_sets": 3, "num_val_sets": 2},
    "AssociativeRecallTask": {"n_items": 4, "n_keys": 16, "n_values": 8, "p_unseen": 0.25, "condition": "half",
                              "batch_size": 4, "num_held_out": 12, "num_test_sets": 3, "num_val_sets": 2},
    "FreeRecallTask": {"n_items": 4, "vocab_size": 16, "batch_size": 4, "num_held_out": 12, "num_test_sets": 5,
                       "num_val_sets": 2},
    "MQARTask": {"n_items": 4, "length": 20, "n_keys": 16, "n_values": 8, "batch_size": 4, "num_held_out": 12,
                 "num_test_sets": 3, "num_val_sets": 2},
    "SelectiveCopyingTask": {"n_items": 4, "length": 16, "vocab_size": 8, "batch_size": 4, "num_held_out": 12,
                             "num_test_sets": 3, "num_val_sets": 2},
}
TINY_MODEL: dict[str, object] = {"warmup_steps": 2}
TINY_BACKBONE: dict[str, object] = {"d_model": 8}


def tiny_settings(task: str | type) -> dict[str, object]:
    """The small settings (init args) of a built-in task, given by class or class name; a copy, to change freely."""
    name = task if isinstance(task, str) else task.__name__
    if name not in TINY_SETTINGS:
        raise KeyError(f"{name} has no tiny settings: give a plugin task's own ({', '.join(TINY_SETTINGS)} have)")
    return dict(TINY_SETTINGS[name])


def flags(prefix: str, settings: Mapping[str, object]) -> list[str]:
    """``--prefix.name value`` for each setting, the values as the command line reads them (YAML/JSON)."""
    return [arg for name, value in settings.items()
            for arg in (f"--{prefix}.{name}", value if isinstance(value, str) else json.dumps(value))]


def tiny_args(model: str | None = "SequenceModel", data: str | None = "VerificationTask",
              backbone: str | None = "S4DBackbone", *, config: str | Path | None = None, steps: int = 4,
              data_settings: Mapping[str, object] | None = None, model_settings: Mapping[str, object] | None = None,
              backbone_settings: Mapping[str, object] | None = None, seed: int = 0, figures: bool = False,
              args: Sequence[str] = ()) -> list[str]:
    """The arguments of ``primacy fit`` (after ``fit``) for a tiny run of ``model`` on ``data`` with ``backbone``
    (short names; None keeps the ``config``'s): the task's ``tiny_settings`` (a built-in one's) updated by
    ``data_settings``, ``TINY_MODEL`` by ``model_settings``, ``TINY_BACKBONE`` by ``backbone_settings``, ``steps``
    optimiser steps with a validation every 4 on the CPU from ``seed``, quietly, without figures unless asked; ``args``
    last."""
    command = [*(["--config", str(config)] if config is not None else []), *QUIET, "--seed_everything", str(seed)]
    command += ["--model", model] if model is not None else []
    command += ["--model.init_args.backbone", backbone] if backbone is not None else []
    command += ["--data", data] if data is not None else []
    if data is not None and data in TINY_SETTINGS or data_settings:
        command += flags("data.init_args", {**(TINY_SETTINGS.get(data, {}) if data else {}), **(data_settings or {})})
    command += flags("model.init_args", {**TINY_MODEL, **(model_settings or {})})
    command += flags("model.init_args.backbone.init_args", {**TINY_BACKBONE, **(backbone_settings or {})})
    command += ["--trainer.max_steps", str(steps), "--trainer.val_check_interval", "4",
                "--trainer.check_val_every_n_epoch", "null", "--trainer.accelerator", "cpu", "--trainer.devices", "1",
                "--trainer.num_sanity_val_steps", "0"]
    return [*command, *([] if figures else NO_FIGURES), *args]


def tiny_fit(run_dir: str | Path, model: str | None = "SequenceModel", data: str | None = "VerificationTask",
             backbone: str | None = "S4DBackbone", **options: object) -> Path:
    """Runs ``primacy fit`` with ``tiny_args(model, data, backbone, **options)`` in this process, writing into
    ``run_dir``, and returns ``run_dir``: trained, tested, its results written. Options: ``config``, ``steps``,
    ``data_settings``, ``model_settings``, ``backbone_settings``, ``seed``, ``figures``, ``args`` (``tiny_args``)."""
    from primacy.cli.main import main  # the command line, as a user runs it (imported late: Lightning is heavy)

    run_dir = Path(run_dir)
    main(["fit", *tiny_args(model, data, backbone, **options), "--trainer.default_root_dir", str(run_dir)])
    return run_dir


def _tiny_run(config: str, data: str, backbone: Mapping[str, object] = TINY_BACKBONE,
              model: Mapping[str, object] = TINY_MODEL, extra: Sequence[str] = ()) -> list[str]:
    """A tiny run of a quickstart config of the checkout (what TINY_RUNS holds): its task at ``tiny_settings``."""
    return ["--config", str(CONFIGS / config), *QUIET, *flags("data.init_args", tiny_settings(data)),
            *flags("model.init_args", model), *flags("model.init_args.backbone.init_args", backbone),
            "--trainer.val_check_interval", "4", *extra]


# The config's DtTracker draws figures too.
_NO_FIGURES_AT_ALL = [*NO_FIGURES, "--trainer.callbacks.formats", "[]"]
# Tiny runs of each built-in task from its quickstart config (a few seconds): a seed, a run directory and trainer
# flags are added by each test. primacy's own tests run them (resume, distributed, console, legacy).
TINY_RUNS: dict[str, list[str]] = {
    "verification": _tiny_run("quickstart.yaml", "VerificationTask", extra=_NO_FIGURES_AT_ALL),
    "induction": _tiny_run(
        "induction-quickstart.yaml", "InductionTask",
        # dropout draws from the global generator
        backbone={"d_model": 16, "n_layers": 1, "n_heads": 2, "dropout": 0.1},
        # the config's HeadScoreTracker: prompt_items=5 is too short for its lag-CRP on lags -5..+5 (the paper's query
        # window needs 11)
        extra=["--trainer.callbacks.n_items", "11", "--trainer.callbacks.formats", "[]"]),
    "reconstruction": _tiny_run("quickstart-reconstruction.yaml", "ReconstructionTask", extra=_NO_FIGURES_AT_ALL),
    "recall": _tiny_run("quickstart-recall.yaml", "AssociativeRecallTask", extra=_NO_FIGURES_AT_ALL),
    "mqar": _tiny_run("quickstart-mqar.yaml", "MQARTask", extra=NO_FIGURES),
    "selective_copying": _tiny_run("quickstart-selective-copying.yaml", "SelectiveCopyingTask", extra=NO_FIGURES),
    "free_recall": _tiny_run("quickstart-free-recall.yaml", "FreeRecallTask", extra=_NO_FIGURES_AT_ALL,
                             model={**TINY_MODEL, "decoding": "sampled"}),
}


class SignalAt(Callback):
    """Sends ``signum`` to this process when training reaches optimiser step ``step``, or (``during_validation``)
    in the middle of the validation that follows that step."""

    def __init__(self, step: int, signum: int, during_validation: bool = False) -> None:
        self.step, self.signum, self.during_validation = step, signum, during_validation

    def on_train_batch_end(self, trainer, *args) -> None:
        if trainer.global_step == self.step and not self.during_validation:
            os.kill(os.getpid(), self.signum)

    def on_validation_batch_end(self, trainer, *args) -> None:
        if trainer.global_step == self.step and self.during_validation and not trainer.sanity_checking:
            self.during_validation = None  # once
            os.kill(os.getpid(), self.signum)


class Pace(Callback):
    """Waits ``seconds`` after each training step: a tiny run made slow enough for a test to signal it while it trains
    (a scheduler's preemption, a time limit). Nothing else changes: the run's numbers are those of one without it."""

    def __init__(self, seconds: float = 0.1) -> None:
        self.seconds = seconds

    def on_train_batch_end(self, trainer, *args) -> None:
        time.sleep(self.seconds)
