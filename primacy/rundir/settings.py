"""The key settings of a run stored with its results (summary.json's task, condition, sizes, backbone and arguments)."""

from __future__ import annotations

from typing import Any

import lightning as L


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
