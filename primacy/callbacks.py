"""Callbacks that make a run's directory: checkpoints, the resolved config, result files and figures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
import matplotlib.pyplot as plt
import numpy as np
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.cli import SaveConfigCallback
from lightning.pytorch.loggers import WandbLogger

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
    heatmap.png/.pdf, from the model's ``test_accuracy`` metric. After each validation it redraws
    results/val_heatmap.png (and logs it to wandb), so the matrix can be watched while training.

    Args:
        formats: figure file formats of the test heatmap.
        dpi: resolution of raster figures.
        val_heatmap: draw the validation heatmap.
    """

    def __init__(self, formats: list[str] = ["png", "pdf"], dpi: int = 150, val_heatmap: bool = True) -> None:  # noqa: B006
        super().__init__()
        self.formats, self.dpi, self.val_heatmap = list(formats), dpi, val_heatmap

    def on_test_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        result = pl_module.test_accuracy.compute()  # syncs across processes
        if not trainer.is_global_zero:
            return
        settings = run_settings(trainer, pl_module)
        out = run_dir(trainer) / "results"
        content = results.write(out, result, settings)
        self._draw(result, content, settings, [out / f"heatmap.{fmt}" for fmt in self.formats])

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self.val_heatmap or trainer.sanity_checking:
            return
        result = pl_module.val_accuracy.compute()
        if not trainer.is_global_zero:
            return
        settings = run_settings(trainer, pl_module)
        path = run_dir(trainer) / "results" / "val_heatmap.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        self._draw(result, results.summary(result, settings), settings, [path], f"validation, step {trainer.global_step}")
        if isinstance(trainer.logger, WandbLogger):
            trainer.logger.log_image("val/heatmap", [str(path)], step=trainer.global_step)

    def _draw(self, result: dict, content: dict, settings: dict, paths: list[Path], stage: str = "test") -> None:
        title = (f"{settings['backbone']} · L={settings['n_items']} · K={settings['vocab_size']} · "
                 f"{settings['condition']} · {content['n_sets']} sets ({stage})\n"
                 f"accuracy {content['overall_accuracy']:.3f} · early−late {content['early_minus_late']:+.3f}")
        fig = plots.heatmap(np.asarray(result["matrix"]), np.asarray(result["distractor_accuracy_by_query"]), title)
        for path in paths:
            fig.savefig(path, dpi=self.dpi)
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
