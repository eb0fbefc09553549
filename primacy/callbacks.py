"""Callbacks that make a run's directory: checkpoints, the resolved config, result files and figures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
import matplotlib.pyplot as plt
import numpy as np
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.cli import SaveConfigCallback
from lightning.pytorch.loggers import TensorBoardLogger, WandbLogger

from primacy import plots, results
from primacy.errors import UsageError
from primacy.metrics import StudyQueryAccuracy


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
    results/val_heatmap.png (and logs it to wandb), so the matrix can be watched while training. Models without
    a study x query matrix (the induction task's LanguageModel) get results/summary.json with their logged
    ``test/`` metrics and the run's settings.

    Args:
        formats: figure file formats of the test heatmap.
        dpi: resolution of raster figures.
        val_heatmap: draw the validation heatmap.
    """

    def __init__(self, formats: list[str] = ["png", "pdf"], dpi: int = 150, val_heatmap: bool = True) -> None:  # noqa: B006
        super().__init__()
        self.formats, self.dpi, self.val_heatmap = list(formats), dpi, val_heatmap

    def on_test_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        metric = _matrix_metric(pl_module, "test")
        if metric is None:
            return
        result = metric.compute()  # syncs across processes
        if not trainer.is_global_zero:
            return
        settings = run_settings(trainer, pl_module)
        out = run_dir(trainer) / "results"
        content = results.write(out, result, settings)
        self._draw(result, content, settings, [out / f"heatmap.{fmt}" for fmt in self.formats])

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if _matrix_metric(pl_module, "test") is not None or not trainer.is_global_zero:
            return
        metrics = {k.removeprefix("test/"): float(v) for k, v in trainer.callback_metrics.items()
                   if k.startswith("test/")}
        results.write_summary(run_dir(trainer) / "results", {**metrics, **run_settings(trainer, pl_module)})

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self.val_heatmap or trainer.sanity_checking:
            return
        metric = _matrix_metric(pl_module, "val")
        if metric is None:
            return
        result = metric.compute()
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


def _matrix_metric(pl_module: L.LightningModule, stage: str) -> StudyQueryAccuracy | None:
    """The model's study x query accuracy metric of ``stage`` (val or test), or None for models without one."""
    metric = getattr(pl_module, f"{stage}_accuracy", None)
    return metric if isinstance(metric, StudyQueryAccuracy) else None


class DtTracker(Callback):
    """Records the backbone's Δt (``Backbone.dt()``, every layer and channel) during training.

    Every ``every_n_steps`` optimiser steps (and at the first and last step) it stores the values, logs
    their quantiles (and a histogram, for wandb and TensorBoard), and at the end of ``fit`` writes
    <run>/results/dt_history.npz, dt_trajectory.png and dt_histogram.png. Does nothing for backbones
    without a Δt. The history is part of the checkpoint, so a resumed run keeps it.

    Args:
        every_n_steps: recording interval in optimiser steps.
        dpi: resolution of the figures.
    """

    QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)

    def __init__(self, every_n_steps: int = 100, dpi: int = 150) -> None:
        super().__init__()
        if every_n_steps < 1:
            raise UsageError(f"every_n_steps={every_n_steps} is invalid: it must be at least 1")
        self.every_n_steps, self.dpi = every_n_steps, dpi
        self.steps: list[int] = []
        self.values: list[np.ndarray] = []
        self.layers: list[str] = []
        self.channels: list[int] = []

    def _record(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        step = trainer.global_step
        dts = pl_module.backbone.dt()
        if not dts or (self.steps and self.steps[-1] == step):
            return
        self.layers, self.channels = list(dts), [int(v.numel()) for v in dts.values()]
        values = np.concatenate([v.detach().float().cpu().numpy() for v in dts.values()])  # C
        self.steps.append(step)
        self.values.append(values)
        logger = trainer.logger
        if logger is None:
            return
        quantiles = np.quantile(values, self.QUANTILES)
        logger.log_metrics({f"dt/q{int(q * 100):02d}": float(v) for q, v in zip(self.QUANTILES, quantiles)}, step)
        if isinstance(logger, WandbLogger):
            import wandb

            logger.experiment.log({"dt/log10_histogram": wandb.Histogram(np.log10(values))}, commit=False)
        elif isinstance(logger, TensorBoardLogger):
            logger.experiment.add_histogram("dt/log10", np.log10(values), step)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._record(trainer, pl_module)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any) -> None:
        if trainer.global_step % self.every_n_steps == 0:
            self._record(trainer, pl_module)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._record(trainer, pl_module)
        if not self.steps or not trainer.is_global_zero:
            return
        out = run_dir(trainer) / "results"
        steps, dt = np.asarray(self.steps), np.stack(self.values)  # S, S C
        results.write_dt_history(out / "dt_history.npz", steps, dt, self.layers, self.channels)
        name = type(pl_module.backbone).__name__
        for fig, file in ((plots.dt_trajectory(steps, dt, f"{name}: Δt over training"), "dt_trajectory.png"),
                          (plots.dt_histogram(dt[0], dt[-1], f"{name}: Δt at step {steps[0]} and {steps[-1]}"),
                           "dt_histogram.png")):
            fig.savefig(out / file, dpi=self.dpi)
            plt.close(fig)

    def state_dict(self) -> dict[str, Any]:
        return {"steps": list(self.steps), "values": [v.tolist() for v in self.values],
                "layers": list(self.layers), "channels": list(self.channels)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.steps = list(state_dict["steps"])
        self.values = [np.asarray(v) for v in state_dict["values"]]
        self.layers, self.channels = list(state_dict["layers"]), list(state_dict["channels"])


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
