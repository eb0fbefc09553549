"""Callbacks that make a run's directory: checkpoints, the resolved config, result files and figures."""

from __future__ import annotations

import random
import signal
import threading
import time
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

import lightning as L
import matplotlib.pyplot as plt
import numpy as np
import torch
import yaml
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.cli import SaveConfigCallback
from lightning.pytorch.loggers import TensorBoardLogger, WandbLogger
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn

from primacy import files, icl_plots, plots, results
from primacy.analysis.cmr_grid import CMRGrid
from primacy.analysis.emergence import EMERGED
from primacy.analysis.fits import FIT_LAGS, fit_cmr, is_flat
from primacy.analysis.head_model import RunHeads
from primacy.analysis.heads import attention_lag_crp, induction_score, repeated_prompt
from primacy.backbones.transformer import TransformerBackbone
from primacy.checks import figure_formats, fits_in_memory
from primacy.errors import UsageError
from primacy.metrics import FreeRecallStats, StudyQueryAccuracy
from primacy.plots import describe
from primacy.tasks.induction import BOS


def run_dir(trainer: L.Trainer) -> Path:
    """A run's directory is the trainer's default_root_dir."""
    return Path(trainer.default_root_dir)


class RunCheckpoint(ModelCheckpoint):
    """Keeps <run>/checkpoints/last.ckpt the latest state of a run, so a long run survives interruption:

    - every ``every_n_train_steps`` optimiser steps and every ``every_n_minutes`` of training, whichever comes first;
    - on SIGTERM (what SLURM sends before it preempts a job) and on the first Ctrl-C: the step in progress (or the
      validation in progress and the step after it) finishes, the checkpoint is written and training stops (a second
      Ctrl-C stops at once);
    - when training ends, so last.ckpt always holds the final step.

    Every save happens where Lightning's own step checkpoints do (after the step), and the random generators' states
    are part of the checkpoint, so a resumed run equals an uninterrupted one bitwise on CPU.

    Args:
        dirpath: where checkpoints go (default <run>/checkpoints).
        every_n_train_steps: step interval (null: none).
        every_n_minutes: wall-clock interval of training (null: none).
        save_top_k: also keep a numbered checkpoint at every save (-1 keeps all of them, 0 only last.ckpt).
        save_last: always true (runs resume from last.ckpt); kept so the config.yaml of older runs still loads.
    """

    def __init__(self, dirpath: str | None = None, every_n_train_steps: int | None = 1000,
                 every_n_minutes: float | None = 30.0, save_top_k: int = 0, save_last: bool = True) -> None:
        if not save_last:
            raise UsageError("save_last=False is not allowed: runs resume from checkpoints/last.ckpt")
        if every_n_train_steps is not None and every_n_train_steps < 1:
            raise UsageError(f"every_n_train_steps={every_n_train_steps} is invalid: it must be at least 1 (or null)")
        if every_n_minutes is not None and not every_n_minutes > 0:
            raise UsageError(f"every_n_minutes={every_n_minutes} is invalid: it must be positive (or null)")
        super().__init__(dirpath=dirpath, save_last=True, every_n_train_steps=every_n_train_steps,
                         save_top_k=save_top_k)
        self.every_n_minutes = every_n_minutes
        self.stop_signal: int | None = None  # the first Ctrl-C or SIGTERM, which stops training after its step
        self._last_save_time = time.monotonic()
        self._previous_handlers: dict[int, Any] = {}

    @property
    def state_key(self) -> str:
        return type(self).__name__  # one per run, whatever its intervals: a resume may change them

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self.dirpath is None:
            self.dirpath = str(run_dir(trainer) / "checkpoints")
        super().setup(trainer, pl_module, stage)

    @property
    def stop_requested(self) -> bool:
        return self.stop_signal is not None

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._last_save_time = time.monotonic()
        if threading.current_thread() is threading.main_thread():
            # Lightning's own SIGTERM handler makes a validation in progress raise at once, without a checkpoint.
            self._previous_handlers = {sig: signal.signal(sig, self._request_stop)
                                       for sig in (signal.SIGINT, signal.SIGTERM)}

    def _request_stop(self, signum: int, frame: Any) -> None:
        if self.stop_signal is None:
            self.stop_signal = signum
        if signum == signal.SIGINT:
            signal.signal(signal.SIGINT, signal.default_int_handler)  # a second Ctrl-C interrupts at once
            rank_zero_info("\nCtrl-C: stopping after this step with a checkpoint (press again to stop at once)")
        else:
            rank_zero_info(f"\n{signal.Signals(signum).name}: stopping after this step with a checkpoint")

    def _restore_signals(self) -> None:
        for sig, handler in self._previous_handlers.items():
            signal.signal(sig, handler)
        self._previous_handlers = {}

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any, **kwargs: Any) -> None:
        stop = self.stop_requested or trainer.received_sigterm
        due = self.every_n_minutes is not None and time.monotonic() - self._last_save_time >= 60 * self.every_n_minutes
        if trainer.world_size > 1:  # every process must save at the same step
            stop, due = trainer.strategy.broadcast((stop, due))
        if (stop or due) and not self._should_skip_saving_checkpoint(trainer):
            candidates = self._monitor_candidates(trainer)
            self._save_topk_checkpoint(trainer, candidates)
            self._save_last_checkpoint(trainer, candidates)
        super().on_train_batch_end(trainer, pl_module, *args, **kwargs)  # the step interval
        if stop:
            trainer.should_stop = True

    def _save_checkpoint(self, trainer: L.Trainer, filepath: str) -> None:
        super()._save_checkpoint(trainer, filepath)
        self._last_save_time = time.monotonic()

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._restore_signals()
        if self._last_global_step_saved != trainer.global_step:
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        self._restore_signals()

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "rng": rng_states()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        if "rng" in state_dict:
            set_rng_states(state_dict["rng"])


def rng_states() -> dict[str, Any]:
    """The global random generators' states (torch, CUDA, numpy, Python) as tensors and plain values, so a
    checkpoint holding them still loads with ``torch.load(weights_only=True)``."""
    name, keys, position, has_gauss, gauss = np.random.get_state()
    return {"torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
            "numpy": [name, torch.from_numpy(keys.astype(np.int64)), position, has_gauss, gauss],
            "python": list(random.getstate())}


def set_rng_states(states: dict[str, Any]) -> None:
    """Restore what ``rng_states`` returned."""
    torch.set_rng_state(states["torch"])
    if states["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])
    name, keys, position, has_gauss, gauss = states["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), position, has_gauss, gauss))
    version, state, gauss = states["python"]
    random.setstate((version, tuple(state), gauss))


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
        config = self.config.clone()
        for key in self.FIT_ONLY_KEYS:  # so `primacy test --config <run>/config.yaml` accepts the file
            config.pop(key, None)
        if trainer.loggers:
            logged = yaml.safe_load(self.parser.dump(config, skip_none=False, skip_validation=True))  # plain types
            for logger in trainer.loggers:
                logger.log_hyperparams(logged)
        if stage == "fit":
            with files.atomic_path(run_dir(trainer) / "config.yaml") as temp:  # overwrite: the temporary file exists
                self.parser.save(config, temp, skip_none=False, overwrite=True, skip_validation=True)


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
        self._draw(result, content, settings, [out / f"heatmap.{fmt}" for fmt in self.formats])
        if "serial_position_by_delay" in result:
            self._draw(result, content, settings, [out / f"delay_heatmap.{fmt}" for fmt in self.formats],
                       by_delay=True)
        self._draw_contiguity(result, settings, [out / f"contiguity.{fmt}" for fmt in self.formats])

    def _write_free_recall(self, trainer: L.Trainer, pl_module: L.LightningModule, recall: FreeRecallStats) -> None:
        counts, study, recalls = recall.compute()  # syncs across processes: every list, in test order
        loss = float(pl_module.test_loss.compute())
        if not trainer.is_global_zero:
            return
        out, settings = run_dir(trainer) / "results", run_settings(trainer, pl_module)
        _announce_replacing(out)
        content = results.write_free_recall(out, counts, study, recalls, settings, run_dir(trainer).name, loss)
        self._draw_free_recall(content, settings, [out / f"free_recall.{fmt}" for fmt in self.formats])

    def _draw_free_recall(self, content: dict, settings: dict, paths: list[Path]) -> None:
        """The serial-position, first-recall and lag-CRP curves of a free-recall summary, its CMR fits overlaid."""
        curves = (np.array(content[k], dtype=float)  # null (never possible) -> NaN
                  for k in ("serial_position_curve", "first_recall_curve", "lag_crp_lags", "lag_crp"))
        title = (f"{describe(settings)} · {content['n_lists']} lists (test)\n" +
                 plots.recall_line(settings["n_items"], content["mean_recalled"], content["intrusion_rate"],
                                   content["repetition_rate"]))
        fig = plots.free_recall(*curves, title, plots.cmr_overlays(content["cmr_fit"]))
        for path in paths:
            files.save_figure(fig, path, dpi=self.dpi)
        plt.close(fig)

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
        path = run_dir(trainer) / "results" / "val_heatmap.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        self._draw(result, results.summary(result, settings), settings, [path], f"validation, step {trainer.global_step}")
        if isinstance(trainer.logger, WandbLogger):
            trainer.logger.log_image("val/heatmap", [str(path)], step=trainer.global_step)

    def _draw(self, result: dict, content: dict, settings: dict, paths: list[Path], stage: str = "test",
              by_delay: bool = False) -> None:
        """The Fig. 3 heatmap, or with ``by_delay`` the serial-position curve by delay, which is also the heatmap of
        forward reconstruction (its study x query matrix is only a diagonal)."""
        title = (f"{describe(settings)} · {content['n_sets']} sets ({stage})\n"
                 f"accuracy {content['overall_accuracy']:.3f} · early−late {content['early_minus_late']:+.3f}")
        if by_delay or (settings["condition"] == "forward" and "serial_position_by_delay" in result):
            fig = plots.delay_heatmap(np.asarray(result["delays"]), np.asarray(result["serial_position_by_delay"]),
                                      title)
        else:
            fig = plots.heatmap(np.asarray(result["matrix"]), np.asarray(result["distractor_accuracy_by_query"]), title,
                                distractor_label=plots.distractor_label(settings.get("task")))
        for path in paths:
            files.save_figure(fig, path, dpi=self.dpi)
        plt.close(fig)

    def _draw_contiguity(self, result: dict, settings: dict, paths: list[Path]) -> None:
        title = f"contiguity · {describe(settings)}"
        fig = plots.contiguity(np.asarray(result["contiguity_lags"]), np.asarray(result["contiguity_curve"]),
                               np.asarray(result["controlled_contiguity_curve"]), title)
        for path in paths:
            files.save_figure(fig, path, dpi=self.dpi)
        plt.close(fig)


def _announce_replacing(out: Path) -> None:
    """One line when a test is about to replace the results already in ``out`` (called on rank zero)."""
    notice = results.replacing_notice(out)
    if notice:
        print(notice)


def _matrix_metric(pl_module: L.LightningModule, stage: str) -> StudyQueryAccuracy | None:
    """The model's study x query accuracy metric of ``stage`` (val or test), or None for models without one."""
    metric = getattr(pl_module, f"{stage}_accuracy", None)
    return metric if isinstance(metric, StudyQueryAccuracy) else None


class TrainingRecorder(Callback, ABC):
    """What DtTracker and HeadScoreTracker share: a record (``_record``, which skips a step it already has) before
    the first step, every ``every_n_steps`` optimiser steps and after the last, and the files (``_write``) written
    from the history on rank zero at the end of ``fit``."""

    def __init__(self, every_n_steps: int) -> None:
        super().__init__()
        if every_n_steps < 1:
            raise UsageError(f"every_n_steps={every_n_steps} is invalid: it must be at least 1")
        self.every_n_steps = every_n_steps
        self.steps: list[int] = []

    @abstractmethod
    def _record(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Append this step's values to the history, unless its last step is this one."""

    @abstractmethod
    def _write(self, trainer: L.Trainer, pl_module: L.LightningModule, out: Path) -> None:
        """Write the history's files under ``out`` (<run>/results)."""

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._record(trainer, pl_module)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any) -> None:
        if trainer.global_step % self.every_n_steps == 0:
            self._record(trainer, pl_module)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._record(trainer, pl_module)
        if self.steps and trainer.is_global_zero:
            self._write(trainer, pl_module, run_dir(trainer) / "results")


class DtTracker(TrainingRecorder):
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
        super().__init__(every_n_steps)
        self.dpi = dpi
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

    def _write(self, trainer: L.Trainer, pl_module: L.LightningModule, out: Path) -> None:
        steps, dt = np.asarray(self.steps), np.stack(self.values)  # S, S C
        results.write_dt_history(out / "dt_history.npz", steps, dt, self.layers, self.channels)
        name = type(pl_module.backbone).__name__
        for fig, file in ((plots.dt_trajectory(steps, dt, f"{name}: Δt over training"), "dt_trajectory.png"),
                          (plots.dt_histogram(dt[0], dt[-1], f"{name}: Δt at step {steps[0]} and {steps[-1]}"),
                           "dt_histogram.png")):
            files.save_figure(fig, out / file, dpi=self.dpi)
            plt.close(fig)

    def state_dict(self) -> dict[str, Any]:
        return {"steps": list(self.steps), "values": [v.tolist() for v in self.values],
                "layers": list(self.layers), "channels": list(self.channels)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.steps = list(state_dict["steps"])
        self.values = [np.asarray(v) for v in state_dict["values"]]
        self.layers, self.channels = list(state_dict["layers"]), list(state_dict["channels"])


class HeadScoreTracker(TrainingRecorder):
    """Scores every attention head of a TransformerBackbone during training on one fixed set of [BOS] r r prompts
    (Ji-An et al. 2024): its induction score, the lag at which its attention lag-CRP peaks and its CMR distance.

    Every ``every_n_steps`` optimiser steps (and before the first step and after the last) it scores the heads, logs
    the best head's scores, and at the end of ``fit`` writes <run>/results/head_history.npz and head_history.png
    (and the other ``formats``). The prompts come from their own generator and the heads are scored without
    gradients and in eval mode, so training goes exactly as without the tracker. The history is part of the
    checkpoint, so a resumed run keeps it.

    Args:
        every_n_steps: scoring interval in optimiser steps.
        n_items: n, the length of r (prompts have length 2n + 1); null: the task's ``prompt_items``, else 25.
        prompts: prompts the scores average over.
        seed: seed of the prompts' generator.
        formats: figure file formats.
        dpi: resolution of raster figures.
    """

    def __init__(self, every_n_steps: int = 250, n_items: int | None = None, prompts: int = 32, seed: int = 0,
                 formats: list[str] = ["png", "pdf"], dpi: int = 150) -> None:  # noqa: B006
        super().__init__(every_n_steps)
        if n_items is not None and n_items < 1:
            raise UsageError(f"n_items={n_items} is invalid: it must be at least 1 (or null for the task's "
                             "prompt_items)")
        if prompts < 1:
            raise UsageError(f"prompts={prompts} is invalid: it must be at least 1")
        if dpi < 1:
            raise UsageError(f"dpi={dpi} is invalid: it must be at least 1")
        figure_formats(formats)
        self.n_items, self.prompts, self.seed = n_items, prompts, seed
        self.formats, self.dpi = list(formats), dpi
        self.tokens: torch.Tensor | None = None  # P 2n+1, drawn at setup
        self.n: int | None = None  # n_items resolved at setup
        self.induction: list[np.ndarray] = []  # each (layers, heads)
        self.lag_crp_peak: list[np.ndarray] = []
        self.cmr_distance: list[np.ndarray] = []

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        backbone = getattr(pl_module, "backbone", None)
        if not isinstance(backbone, TransformerBackbone):
            raise UsageError(f"HeadScoreTracker needs a TransformerBackbone: this run's backbone is "
                             f"{type(backbone).__name__}")
        vocab_size = pl_module.hparams.vocab_size
        n = getattr(trainer.datamodule, "prompt_items", 25) if self.n_items is None else self.n_items
        shortest = int(FIT_LAGS.max()) + 1  # a second-repeat query with every lag of the CRP behind it
        if not shortest <= n < vocab_size:
            given = "" if self.n_items is not None else " (the task's prompt_items)"
            raise UsageError(f"n_items={n}{given} is invalid for HeadScoreTracker with vocab_size={vocab_size}: it "
                             f"must lie in [{shortest}, {vocab_size - 1}] (the lag-CRP on lags ±{shortest - 1} needs "
                             f"n_items >= {shortest}, the prompt n distinct tokens besides BOS)")
        if backbone.max_length is not None and 2 * n + 1 > backbone.max_length:
            raise UsageError(f"n_items={n} is too large for max_length={backbone.max_length} of the learned "
                             f"positions: prompts have length 2·n_items + 1 = {2 * n + 1}")
        layers = len(backbone.heads()) // backbone.n_heads
        fits_in_memory("the tracker's captured attention", 2 * 4 * layers * self.prompts * backbone.n_heads
                       * (2 * n + 1) ** 2, prompts=self.prompts, n_items=n)
        self.n = n
        generator = torch.Generator().manual_seed(self.seed)  # never the global one: training must not notice
        self.tokens = repeated_prompt(n, vocab_size, BOS, self.prompts, generator)  # P 2n+1

    def settings(self) -> dict[str, int | None]:
        """What the scores depend on besides the model: a history scored otherwise is not continued."""
        return {"n_items": self.n, "prompts": self.prompts, "seed": self.seed}

    def score(self, pl_module: L.LightningModule) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Induction score, lag-CRP peak and CMR distance (NaN for a flat lag-CRP) of every head on the prompts,
        averaged over them: (layers, heads) each. The model's modes are restored afterwards."""
        heads, n = RunHeads(pl_module), self.n
        modes = [(module, module.training) for module in pl_module.modules()]
        pl_module.eval()  # dropout would draw from the global generator
        try:
            scores, weights = heads.attention(self.tokens.to(pl_module.device), range(heads.n_layers))
        finally:
            for module, training in modes:
                module.training = training
        scores, weights = scores.float().cpu(), weights.float().cpu()  # layers P heads T T each
        induction = induction_score(weights, n).mean(1).double().numpy()  # layers heads
        lags, crps = attention_lag_crp(scores.double(), n)  # K, (layers P heads K)
        lags, crps = lags.numpy(), crps.mean(1).numpy()  # K, (layers heads K)
        distance = np.full(induction.shape, np.nan)
        for head in np.ndindex(distance.shape):
            if not is_flat(crps[head]):  # a flat curve (up to rounding) has no fit
                distance[head] = fit_cmr(crps[head], lags, CMRGrid.paper()).distance  # the grid is read once
        return induction, lags[crps.argmax(-1)].astype(np.int64), distance

    def _record(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        step = trainer.global_step
        if self.tokens is None or (self.steps and self.steps[-1] == step):
            return
        induction, peak, distance = self.score(pl_module)
        self.steps.append(step)
        self.induction.append(induction)
        self.lag_crp_peak.append(peak)
        self.cmr_distance.append(distance)
        if trainer.logger is not None:
            best = np.unravel_index(induction.argmax(), induction.shape)
            trainer.logger.log_metrics({"heads/best_induction": float(induction[best]),
                                        "heads/best_lag_crp_peak": float(peak[best]),
                                        "heads/best_cmr_distance": float(distance[best])}, step)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self.steps:  # a resumed run's history already has its start
            self._record(trainer, pl_module)

    def _write(self, trainer: L.Trainer, pl_module: L.LightningModule, out: Path) -> None:
        steps, induction = np.asarray(self.steps, dtype=np.int64), np.stack(self.induction)  # S, (S layers heads)
        peak, distance = np.stack(self.lag_crp_peak), np.stack(self.cmr_distance)  # S layers heads each
        first = self.first_induction_step()
        files.save_npz(out / "head_history.npz", steps=steps, induction=induction, lag_crp_peak=peak,
                       cmr_distance=distance, n_items=np.int64(self.n), n_prompts=np.int64(self.prompts),
                       prompt_seed=np.int64(self.seed), first_induction_step=np.int64(-1 if first is None else first))
        title = (f"{type(pl_module.backbone).__name__}: heads on [BOS] r r (n = {self.n}, {self.prompts} prompts) "
                 "over training")
        fig = icl_plots.head_history(steps, induction, distance, peak, first, title)
        for fmt in self.formats:
            files.save_figure(fig, out / f"head_history.{fmt}", dpi=self.dpi)
        plt.close(fig)

    def first_induction_step(self) -> int | None:
        """The first recorded step at which some head's induction score is at least 0.5; None if none."""
        return next((step for step, scores in zip(self.steps, self.induction) if scores.max() >= EMERGED), None)

    def state_dict(self) -> dict[str, Any]:
        return {"settings": self.settings(), "steps": list(self.steps),
                "induction": [v.tolist() for v in self.induction],
                "lag_crp_peak": [v.tolist() for v in self.lag_crp_peak],
                "cmr_distance": [v.tolist() for v in self.cmr_distance]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if self.n is not None and state_dict["settings"] != self.settings():  # fitting with other prompts
            rank_zero_warn(f"HeadScoreTracker: the checkpoint's head history was scored with {state_dict['settings']}, "
                           f"this run scores with {self.settings()}: the history starts afresh")
            return
        self.steps = list(state_dict["steps"])
        self.induction = [np.asarray(v, dtype=np.float64) for v in state_dict["induction"]]
        self.lag_crp_peak = [np.asarray(v, dtype=np.int64) for v in state_dict["lag_crp_peak"]]
        self.cmr_distance = [np.asarray(v, dtype=np.float64) for v in state_dict["cmr_distance"]]


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
