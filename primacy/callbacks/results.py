"""ResultsWriter: <run>/results/ (summary, arrays, long-format tables and figures) at the end of a test."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import WandbLogger

from primacy import figures
from primacy.rundir import kinds, results
from primacy.rundir.kinds import KIND_KEY
from primacy.rundir.layout import RunDir
from primacy.rundir.settings import TRAINED_STEPS, run_settings, tested_steps


class ResultsWriter(Callback):
    """At the end of ``test``, writes <run>/results/ as the model's kind of result (``primacy.rundir.kinds``) says:
    the one its test metric names (``result_kind``); summary.json names it. For the study x query accuracy matrix
    (StudyQueryResults): summary.json, accuracy.npz, <task>.csv, contiguity.csv, the heatmap and contiguity figures
    and, for a task with delays, delays.csv and delay_heatmap; after each validation it redraws
    results/val_heatmap.png (and logs it to wandb), so the matrix can be watched while training. For free recall
    (FreeRecallResults): summary.json, free_recall.npz, free_recall.csv and free_recall.png/.pdf. For a model whose
    metric names no kind, such as the induction task's LanguageModel (LoggedResults): summary.json with its logged
    ``test/`` values and the run's settings.

    Args:
        formats: figure file formats of the test figures.
        dpi: resolution of raster figures.
        val_heatmap: draw the validation figure (the heatmap).
    """

    def __init__(self, formats: list[str] = ["png", "pdf"], dpi: int = 150, val_heatmap: bool = True) -> None:  # noqa: B006
        super().__init__()
        self.formats, self.dpi, self.val_heatmap = list(formats), dpi, val_heatmap
        self._collected: Any = None

    def on_test_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Before the model's own epoch end, which logs the metric and resets the loss; on every process (syncs).
        self._collected = kinds.for_model(pl_module).collect(pl_module, "test")

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        collected, self._collected = self._collected, None
        if not trainer.is_global_zero:
            return
        kind, run = kinds.for_model(pl_module), RunDir.of(trainer)
        settings = {**run_settings(trainer, pl_module), KIND_KEY: kind.name, TRAINED_STEPS: tested_steps(trainer)}
        logged = {k.removeprefix("test/"): float(v) for k, v in trainer.callback_metrics.items()
                  if k.startswith("test/")}
        _announce_replacing(run.results)
        run.results.mkdir(parents=True, exist_ok=True)
        summary = kind.write(run.results, collected, logged, settings, run.name)
        if not self.formats:  # `--results.formats []`: no figure is drawn at all, not drawn and then dropped
            return
        for stem, fig in kind.figures(collected, summary, settings).items():
            figures.save(fig, run.results / stem, self.formats, self.dpi)

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        kind = kinds.for_model(pl_module)
        if not self.val_heatmap or trainer.sanity_checking or not kind.draws_validation:
            return
        collected = kind.collect(pl_module, "val")  # on every process (syncs)
        if not trainer.is_global_zero:
            return
        run = RunDir.of(trainer)
        fig = kind.validation_figure(collected, run_settings(trainer, pl_module), f"validation, step "
                                     f"{trainer.global_step}")
        [path] = figures.save(fig, run.figure("val_heatmap"), ["png"], self.dpi)
        if isinstance(trainer.logger, WandbLogger):
            trainer.logger.log_image("val/heatmap", [str(path)], step=trainer.global_step)


def _announce_replacing(out: Path) -> None:
    """One line when a test is about to replace the results already in ``out`` (called on rank zero)."""
    notice = results.replacing_notice(out)
    if notice:
        print(notice)
