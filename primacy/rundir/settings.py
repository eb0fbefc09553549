"""The key settings of a run stored with its results (summary.json's task, condition, sizes, backbone and arguments)
and the trained steps of the model its test scored, by which a run counts as tested."""

from __future__ import annotations

import json
from typing import Any

import lightning as L

from primacy.rundir.checkpoints import checkpoint_step
from primacy.rundir.layout import RunDir

TRAINED_STEPS = "trained_steps"  # summary.json: the optimiser steps of the model its test scored


def tested_steps(trainer: L.Trainer) -> int:
    """The optimiser steps of the model a test scores: its checkpoint's (``primacy test --ckpt_path``: Lightning
    restores no step for a test), or the trainer's when it tests the model it has just trained."""
    return checkpoint_step(trainer.ckpt_path) if trainer.ckpt_path else trainer.global_step


def tested_at(run: RunDir, steps: int) -> bool:
    """Whether the run's summary.json is its test of the model trained for ``steps``, by the summary's own record
    (``TRAINED_STEPS``; a summary written before that record: any model), not by file times, which a copy changes.
    A summary that does not read is no test."""
    try:
        summary = json.loads(run.summary.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    return isinstance(summary, dict) and summary.get(TRAINED_STEPS, steps) == steps


def run_settings(trainer: L.Trainer, pl_module: L.LightningModule) -> dict[str, Any]:
    """The key settings stored with the results: task and model hyperparameters and the backbone's name."""
    data = _plain(trainer.datamodule.hparams) if trainer.datamodule is not None else {}
    model = _plain(pl_module.hparams)
    backbone = model.pop("backbone", None)
    datamodule = trainer.datamodule
    return {
        "task": getattr(datamodule, "name", type(datamodule).__name__ if datamodule is not None else None),
        "condition": data.get("condition"),
        "n_items": data.get("n_items"),
        "vocab_size": data.get("vocab_size"),
        "backbone": type(pl_module.backbone).__name__,
        "backbone_args": dict(backbone.get("init_args", {})) if isinstance(backbone, dict) else {},
        "data_args": data,
        "model_args": model,
    }


def _plain(hparams: Any) -> dict[str, Any]:
    """Hyperparameters without Lightning's bookkeeping keys (``_class_path``, ``_instantiator``)."""
    return {k: v for k, v in dict(hparams).items() if not k.startswith("_")}
