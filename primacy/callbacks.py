"""Callbacks that make a run's directory: checkpoints, the resolved config, result files and figures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
import matplotlib.pyplot as plt
import numpy as np
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.cli import SaveConfigCallback

from primacy import plots, results


def run_dir(trainer: L.Trainer) -> Path:
    """A run's directory is the trainer's default_root_dir."""
    return Path(trainer.default_root_dir)


class RunCheckpoint(ModelCheckpoint):
    """ModelCheckpoint that writes <run>/checkpoints/last.ckpt (and any top-k) unless ``dirpath`` is given."""

    def __init__(self, dirpath: str | None = None, save_last: bool = True, every_n_train_steps: int | None = None,
                 save_top_k: int = 0) -> None:
        super().__init__(dirpath=dirpath, save_last=save_last, every_n_train_steps=every_n_train_steps,
                         save_top_k=save_top_k)

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self.dirpath is None:
            self.dirpath = str(run_dir(trainer) / "checkpoints")
        super().setup(trainer, pl_module, stage)


class RunConfig(SaveConfigCallback):
    """Saves the resolved config to <run>/config.yaml at the start of ``fit``, ready for ``primacy test``."""

    FIT_ONLY_KEYS = ("test_after_fit",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **{**kwargs, "save_to_log_dir": False})

    def save_config(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        config = self.config.clone()
        for key in self.FIT_ONLY_KEYS:  # so `primacy test --config <run>/config.yaml` accepts the file
            config.pop(key, None)
        path = run_dir(trainer) / "config.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        self.parser.save(config, path, skip_none=False, overwrite=True, skip_validation=True)


class ResultsWriter(Callback):
    """At the end of ``test``, writes <run>/results/: summary.json, accuracy.npz, verification.csv and
    heatmap.png/.pdf, from the model's ``test_accuracy`` metric.

    Args:
        formats: figure file formats.
        dpi: resolution of raster figures.
    """

    def __init__(self, formats: list[str] = ["png", "pdf"], dpi: int = 150) -> None:  # noqa: B006 (CLI default)
        super().__init__()
        self.formats, self.dpi = list(formats), dpi

    def on_test_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        result = pl_module.test_accuracy.compute()  # syncs across processes
        if not trainer.is_global_zero:
            return
        settings = run_settings(trainer, pl_module)
        out = run_dir(trainer) / "results"
        content = results.write(out, result, settings)
        title = (f"{settings['backbone']} · L={settings['n_items']} · K={settings['vocab_size']} · "
                 f"{settings['condition']} · {content['n_sets']} sets\n"
                 f"accuracy {content['overall_accuracy']:.3f} · early−late {content['early_minus_late']:+.3f}")
        fig = plots.heatmap(np.asarray(result["matrix"]), np.asarray(result["distractor_accuracy_by_query"]), title)
        for fmt in self.formats:
            fig.savefig(out / f"heatmap.{fmt}", dpi=self.dpi)
        plt.close(fig)


def run_settings(trainer: L.Trainer, pl_module: L.LightningModule) -> dict[str, Any]:
    """The key settings stored with the results: task and model hyperparameters and the backbone's name."""
    data = _plain(trainer.datamodule.hparams) if trainer.datamodule is not None else {}
    model = _plain(pl_module.hparams)
    backbone = model.pop("backbone", None)
    return {
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
