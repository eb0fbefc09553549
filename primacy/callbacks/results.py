"""ResultsWriter: <run>/results/ (summary, arrays, long-format tables and figures) at the end of a test."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import numpy as np
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import WandbLogger
from matplotlib.figure import Figure

from primacy import figures
from primacy.metrics import FreeRecallStats, StudyQueryAccuracy
from primacy.rundir import results
from primacy.rundir.layout import run_dir
from primacy.rundir.settings import run_settings


class ResultsWriter(Callback):
    """At the end of ``test``, writes <run>/results/: summary.json, accuracy.npz, <task>.csv (verification.csv,
    reconstruction.csv, recall.csv), contiguity.csv, heatmap.png/.pdf and contiguity.png/.pdf (raw and controlled
    contiguity), and for a task with delays delays.csv and delay_heatmap.png/.pdf (the serial-position curve by delay,
    which is also forward reconstruction's heatmap: its study x query matrix is a diagonal), from the model's
    ``test_accuracy`` metric. After each validation it redraws
    results/val_heatmap.png (and logs it to wandb), so the matrix can be watched while training. A free-recall model
    (its ``test_recall`` metric) gets summary.json, free_recall.npz and free_recall.csv (``results.write_free_recall``).
    Other models without a study x query matrix (the induction task's LanguageModel) get results/summary.json with
    their logged ``test/`` metrics and the run's settings.

    Args:
        formats: figure file formats of the test figures.
        dpi: resolution of raster figures.
        val_heatmap: draw the validation heatmap.
    """

    def __init__(self, formats: list[str] = ["png", "pdf"], dpi: int = 150, val_heatmap: bool = True) -> None:  # noqa: B006
        super().__init__()
        self.formats, self.dpi, self.val_heatmap = list(formats), dpi, val_heatmap

    def on_test_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        recall = getattr(pl_module, "test_recall", None)
        if isinstance(recall, FreeRecallStats):
            self._write_free_recall(trainer, pl_module, recall)
            return
        metric = _matrix_metric(pl_module, "test")
        if metric is None:
            return
        result = metric.compute()  # syncs across processes
        if not trainer.is_global_zero:
            return
        settings = run_settings(trainer, pl_module)
        out = run_dir(trainer) / "results"
        _announce_replacing(out)
        content = results.write(out, result, settings)
        figures.save(self._heatmap(result, content, settings), out / "heatmap", self.formats, self.dpi)
        if "serial_position_by_delay" in result:
            figures.save(self._heatmap(result, content, settings, by_delay=True), out / "delay_heatmap", self.formats,
                         self.dpi)
        figures.save(self._contiguity(result, settings), out / "contiguity", self.formats, self.dpi)

    def _write_free_recall(self, trainer: L.Trainer, pl_module: L.LightningModule, recall: FreeRecallStats) -> None:
        counts, study, recalls = recall.compute()  # syncs across processes: every list, in test order
        loss = float(pl_module.test_loss.compute())
        if not trainer.is_global_zero:
            return
        out, settings = run_dir(trainer) / "results", run_settings(trainer, pl_module)
        _announce_replacing(out)
        content = results.write_free_recall(out, counts, study, recalls, settings, run_dir(trainer).name, loss)
        figures.save(self._free_recall(content, settings), out / "free_recall", self.formats, self.dpi)

    def _free_recall(self, content: dict, settings: dict) -> Figure:
        """The serial-position, first-recall and lag-CRP curves of a free-recall summary, its CMR fits overlaid."""
        curves = (np.array(content[k], dtype=float)  # null (never possible) -> NaN
                  for k in ("serial_position_curve", "first_recall_curve", "lag_crp_lags", "lag_crp"))
        title = (f"{figures.style.describe(settings)} · {content['n_lists']} lists (test)\n" +
                 figures.style.recall_line(settings["n_items"], content["mean_recalled"], content["intrusion_rate"],
                                           content["repetition_rate"]))
        return figures.free_recall.free_recall(*curves, title, figures.free_recall.cmr_overlays(content["cmr_fit"]))

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if _matrix_metric(pl_module, "test") is not None or not trainer.is_global_zero:
            return
        if isinstance(getattr(pl_module, "test_recall", None), FreeRecallStats):
            return  # written at the end of the test epoch
        metrics = {k.removeprefix("test/"): float(v) for k, v in trainer.callback_metrics.items()
                   if k.startswith("test/")}
        out = run_dir(trainer) / "results"
        _announce_replacing(out)
        results.write_summary(out, {**metrics, **run_settings(trainer, pl_module)})

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
        fig = self._heatmap(result, results.summary(result, settings), settings,
                            f"validation, step {trainer.global_step}")
        [path] = figures.save(fig, run_dir(trainer) / "results" / "val_heatmap", ["png"], self.dpi)
        if isinstance(trainer.logger, WandbLogger):
            trainer.logger.log_image("val/heatmap", [str(path)], step=trainer.global_step)

    def _heatmap(self, result: dict, content: dict, settings: dict, stage: str = "test",
                 by_delay: bool = False) -> Figure:
        """The Fig. 3 heatmap, or with ``by_delay`` the serial-position curve by delay, which is also the heatmap of
        forward reconstruction (its study x query matrix is only a diagonal)."""
        title = (f"{figures.style.describe(settings)} · {content['n_sets']} sets ({stage})\n"
                 f"accuracy {content['overall_accuracy']:.3f} · early−late {content['early_minus_late']:+.3f}")
        if by_delay or (settings["condition"] == "forward" and "serial_position_by_delay" in result):
            return figures.accuracy.delay_heatmap(np.asarray(result["delays"]),
                                                  np.asarray(result["serial_position_by_delay"]), title)
        matrix, distractor = np.asarray(result["matrix"]), np.asarray(result["distractor_accuracy_by_query"])
        return figures.accuracy.heatmap(matrix, distractor, title,
                                        distractor_label=figures.style.distractor_label(settings.get("task")))

    def _contiguity(self, result: dict, settings: dict) -> Figure:
        title = f"contiguity · {figures.style.describe(settings)}"
        curves = (np.asarray(result[k]) for k in ("contiguity_lags", "contiguity_curve", "controlled_contiguity_curve"))
        return figures.accuracy.contiguity(*curves, title)


def _announce_replacing(out: Path) -> None:
    """One line when a test is about to replace the results already in ``out`` (called on rank zero)."""
    notice = results.replacing_notice(out)
    if notice:
        print(notice)


def _matrix_metric(pl_module: L.LightningModule, stage: str) -> StudyQueryAccuracy | None:
    """The model's study x query accuracy metric of ``stage`` (val or test), or None for models without one."""
    metric = getattr(pl_module, f"{stage}_accuracy", None)
    return metric if isinstance(metric, StudyQueryAccuracy) else None
