"""RunConfig: <run>/config.yaml, and the run's whole config logged to every logger."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
import yaml
from jsonargparse import Namespace
from lightning.pytorch.cli import SaveConfigCallback

from primacy import files, moved
from primacy.rundir.layout import RunDir


class RunConfig(SaveConfigCallback):
    """Saves the resolved config to <run>/config.yaml at the start of ``fit``, ready for ``primacy test``, and logs it
    (trainer, model, data and the rest, nested as in the file) to every logger at the start of ``fit`` and ``test``.

    It replaces Lightning's merge of the model's and the task's hyperparameters, which models and tasks switch off
    (``save_hyperparameters(logger=False)``): that merge refuses a key with two values, and a task's ``vocab_size``
    (its items) is not the model's (every token id, e.g. blanks and cues too).
    """

    FIT_ONLY_KEYS = ("test_after_fit",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **{**kwargs, "save_to_log_dir": False})

    def save_config(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        config = current_class_paths(self.config.clone())  # a config of before the package layout: its paths now
        for key in self.FIT_ONLY_KEYS:  # so `primacy test --config <run>/config.yaml` accepts the file
            config.pop(key, None)
        if stage == "fit" and _own_checkpoint(config.get("ckpt_path"), trainer):
            config.ckpt_path = None  # a resumed run's file is the run's, as it started: not where it stopped
        if trainer.loggers:
            logged = yaml.safe_load(self.parser.dump(config, skip_none=False, skip_validation=True))  # plain types
            for logger in trainer.loggers:
                logger.log_hyperparams(logged)
        if stage == "fit":
            with files.atomic_path(RunDir.of(trainer).config) as temp:  # overwrite: the temporary file exists
                self.parser.save(config, temp, skip_none=False, overwrite=True, skip_validation=True)


def _own_checkpoint(ckpt_path: str | None, trainer: L.Trainer) -> bool:
    """Whether ``ckpt_path`` is the run's own last.ckpt: the fit resumes its run, and `primacy fit --config
    <run>/config.yaml` must train the run again from its start, not resume from a checkpoint that a copy of the run
    (results/ keeps no checkpoints) does not have."""
    if ckpt_path in (None, "best", "hpc", "registry"):
        return False
    return ckpt_path == "last" or Path(ckpt_path).resolve() == RunDir.of(trainer).last_checkpoint.resolve()


def current_class_paths(value: Any) -> Any:
    """``value`` (a parsed config, or a part of one) with every class_path of a moved module replaced, in place, by
    the path of its class now (``primacy.moved``)."""
    if isinstance(value, Namespace):
        for key, child in vars(value).items():
            if key == "class_path" and isinstance(child, str):
                setattr(value, key, moved.current_path(child))
            else:
                current_class_paths(child)
    elif isinstance(value, list):
        for child in value:
            current_class_paths(child)
    return value
