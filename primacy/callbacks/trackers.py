"""Trackers of a value over training: DtTracker (the backbone's Δt), TokenDtTracker (the Δt each position takes) and
HeadScoreTracker (attention-head scores), each saved in the checkpoint and written to <run>/results at the end of
fit."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import TensorBoardLogger, WandbLogger
from lightning.pytorch.utilities import rank_zero_warn

from primacy import figures, files
from primacy.analysis.behaviour.cmr.fits import FIT_LAGS
from primacy.analysis.behaviour.cmr.grid import CMRGrid
from primacy.analysis.heads.analysis import score_heads
from primacy.analysis.heads.emergence import EMERGED
from primacy.analysis.heads.model import head_model
from primacy.analysis.heads.scores import QUERY_WINDOWS, shortest_prompt
from primacy.analysis.heads.selection import has_dt, token_dt
from primacy.callbacks.checkpointing import RunCheckpoint
from primacy.checks import figure_formats, fits_in_memory, one_of, positive
from primacy.errors import UsageError
from primacy.rundir import results
from primacy.rundir.layout import RunDir
from primacy.tasks.prompts import BOS, repeated_prompt


class TrainingRecorder(Callback, ABC):
    """What DtTracker and HeadScoreTracker share: a record (``_record``, which skips a step it already has) before
    the first step, every ``every_n_steps`` optimiser steps and after the last, and the files (``_write``) written
    from the history on rank zero at the end of ``fit``. A run stopped by a signal (Ctrl-C, SIGTERM: RunCheckpoint)
    gets no record at the step it stopped at, nor at the step it resumes from, so it ends with the history of an
    uninterrupted run."""

    def __init__(self, every_n_steps: int) -> None:
        super().__init__()
        positive(every_n_steps=every_n_steps)
        self.every_n_steps = every_n_steps
        self.steps: list[int] = []

    @abstractmethod
    def _record(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Append this step's values to the history, unless its last step is this one."""

    @abstractmethod
    def _write(self, trainer: L.Trainer, pl_module: L.LightningModule, run: RunDir) -> None:
        """Write the history's files into the run's results/ (the names are RunDir's)."""

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.global_step == 0:  # a resumed run has its history from the checkpoint
            self._record(trainer, pl_module)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any) -> None:
        if trainer.global_step % self.every_n_steps == 0:
            self._record(trainer, pl_module)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        interrupted = any(isinstance(cb, RunCheckpoint) and cb.stop_requested for cb in trainer.callbacks)
        if not interrupted:
            self._record(trainer, pl_module)
        if self.steps and trainer.is_global_zero:
            self._write(trainer, pl_module, RunDir.of(trainer))


class DtTracker(TrainingRecorder):
    """Records the backbone's Δt (``Backbone.dt()``, every layer and channel) during training.

    Every ``every_n_steps`` optimiser steps (and at the first and last step) it stores the values, logs
    their quantiles (and a histogram, for wandb and TensorBoard), and at the end of ``fit`` writes
    <run>/results/dt_history.npz and the figures dt_trajectory and dt_histogram. Does nothing for backbones
    without a Δt. The history is part of the checkpoint, so a resumed run keeps it.

    Args:
        every_n_steps: recording interval in optimiser steps.
        formats: figure file formats; [] writes the history alone.
        dpi: resolution of raster figures.
    """

    QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)

    def __init__(self, every_n_steps: int = 100, formats: list[str] = ["png"], dpi: int = 150) -> None:  # noqa: B006
        super().__init__(every_n_steps)
        figure_formats(formats)
        self.formats, self.dpi = list(formats), dpi
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

    def _write(self, trainer: L.Trainer, pl_module: L.LightningModule, run: RunDir) -> None:
        steps, dt = np.asarray(self.steps), np.stack(self.values)  # S, S C
        results.write_dt_history(run.dt_history, steps, dt, self.layers, self.channels)
        if not self.formats:
            return
        name = type(pl_module.backbone).__name__
        figures.save(figures.dt.dt_trajectory(steps, dt, f"{name}: Δt over training"), run.figure("dt_trajectory"),
                     self.formats, self.dpi)
        figures.save(figures.dt.dt_histogram(dt[0], dt[-1], f"{name}: Δt at step {steps[0]} and {steps[-1]}"),
                     run.figure("dt_histogram"), self.formats, self.dpi)

    def state_dict(self) -> dict[str, Any]:
        return {"steps": list(self.steps), "values": [v.tolist() for v in self.values],
                "layers": list(self.layers), "channels": list(self.channels)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.steps = list(state_dict["steps"])
        self.values = [np.asarray(v) for v in state_dict["values"]]
        self.layers, self.channels = list(state_dict["layers"]), list(state_dict["channels"])


class TokenDtTracker(TrainingRecorder):
    """Records the Δt each position of a fixed set of validation sequences takes during training: Mamba's selection
    step (``Backbone.dt_per_token``), which depends on the token, or a fixed Δt (``dt()``, S4 and S4D) at every
    position, the time-invariant control.

    Every ``every_n_steps`` optimiser steps (and at the first and last step) it stores the Δt of every layer, channel
    and position averaged over the sequences (the first ``sequences`` of the task's first validation batch: an
    induction task's [BOS] r r prompts, a verification task's study-and-query trials), without gradients and in eval
    mode, so training goes as without it. At the end of ``fit`` it writes <run>/results/token_dt.npz (``steps`` (S,),
    ``dt`` (S, T, C), ``tokens`` (sequences, T), ``layers``, ``channels``) and the figure token_dt. The history is part
    of the checkpoint, so a resumed run keeps it.

    Args:
        every_n_steps: recording interval in optimiser steps.
        sequences: validation sequences the Δt is averaged over.
        formats: figure file formats; [] writes the history alone.
        dpi: resolution of raster figures.
    """

    def __init__(self, every_n_steps: int = 250, sequences: int = 16, formats: list[str] = ["png"],  # noqa: B006
                 dpi: int = 150) -> None:
        super().__init__(every_n_steps)
        positive(sequences=sequences, dpi=dpi)
        figure_formats(formats)
        self.sequences, self.formats, self.dpi = sequences, list(formats), dpi
        self.tokens: torch.Tensor | None = None  # sequences T, from the first validation batch
        self.values: list[np.ndarray] = []  # each (T, C)
        self.layers: list[str] = []
        self.channels: list[int] = []

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        backbone = pl_module.backbone
        if not has_dt(backbone):
            raise UsageError(f"TokenDtTracker: backbone {type(backbone).__name__} has no Δt: it needs an SSM (S4, "
                             "S4D, or Mamba's selection step)")

    def token_dt(self, trainer: L.Trainer, pl_module: L.LightningModule) -> dict[str, torch.Tensor]:
        """Δt of each layer at each position of the sequences: {layer: (sequences, T, channels)}."""
        if self.tokens is None:
            self.tokens = next(iter(trainer.datamodule.val_dataloader()))["tokens"][: self.sequences].cpu()
        return token_dt(pl_module, self.tokens)

    def _record(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        step = trainer.global_step
        if self.steps and self.steps[-1] == step:
            return
        dts = self.token_dt(trainer, pl_module)
        self.layers, self.channels = list(dts), [int(v.shape[-1]) for v in dts.values()]
        self.values.append(torch.cat([v.float().mean(0) for v in dts.values()], dim=-1).cpu().numpy())  # T C
        self.steps.append(step)

    def _write(self, trainer: L.Trainer, pl_module: L.LightningModule, run: RunDir) -> None:
        steps, dt = np.asarray(self.steps, dtype=np.int64), np.stack(self.values)  # S, (S T C)
        files.save_npz(run.token_dt, steps=steps, dt=dt, tokens=self.tokens.numpy(),
                       layers=np.asarray(self.layers), channels=np.asarray(self.channels, dtype=np.int64))
        if self.formats:
            title = (f"{type(pl_module.backbone).__name__}: Δt by position of {len(self.tokens)} validation "
                     "sequences over training")
            figures.save(figures.dt.token_dt(steps, dt, self.layers, self.channels, title), run.figure("token_dt"),
                         self.formats, self.dpi)

    def state_dict(self) -> dict[str, Any]:
        return {"steps": list(self.steps), "values": [v.tolist() for v in self.values], "layers": list(self.layers),
                "channels": list(self.channels), "sequences": self.sequences}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if state_dict.get("sequences") != self.sequences:
            rank_zero_warn(f"TokenDtTracker: the checkpoint's history averaged {state_dict.get('sequences')} "
                           f"sequences, this run {self.sequences}: the history starts afresh")
            return
        self.steps = list(state_dict["steps"])
        self.values = [np.asarray(v, dtype=np.float32) for v in state_dict["values"]]
        self.layers, self.channels = list(state_dict["layers"]), list(state_dict["channels"])


class HeadScoreTracker(TrainingRecorder):
    """Scores every attention head during training on one fixed set of [BOS] r r prompts (Ji-An et al. 2024): its
    induction score, the lag at which its attention lag-CRP peaks and its CMR distance. A backbone without attention
    but with an exact influence (S4, S4D, Mamba, xLSTM's mLSTM blocks) has its units scored as heads
    (``primacy.analysis.heads.model.InfluenceHeads``); any other is refused when fit starts.

    Every ``every_n_steps`` optimiser steps (and before the first step and after the last) it scores the heads, logs
    the best head's scores, and at the end of ``fit`` writes <run>/results/head_history.npz and head_history.png
    (and the other ``formats``). The prompts come from their own generator and the heads are scored without
    gradients and in eval mode, so training goes exactly as without the tracker. The history is part of the
    checkpoint, so a resumed run keeps it.

    Args:
        every_n_steps: scoring interval in optimiser steps.
        n_items: n, the length of r (prompts have length 2n + 1); null: the task's ``prompt_items``, else 25.
        query_window: the queries each lag of the attention lag-CRP averages (``primacy.analysis.heads.scores``):
            ``paper`` (needs n_items >= 11) or ``common``.
        prompts: prompts the scores average over.
        seed: seed of the prompts' generator.
        group: units of an influence layer merged into one head (``InfluenceHeads``); 1 for a Transformer.
        formats: figure file formats.
        dpi: resolution of raster figures.
    """

    def __init__(self, every_n_steps: int = 250, n_items: int | None = None, prompts: int = 32, seed: int = 0,
                 formats: list[str] = ["png", "pdf"], dpi: int = 150, query_window: str = "paper",  # noqa: B006
                 group: int = 1) -> None:
        super().__init__(every_n_steps)
        self.query_window = one_of("query_window", query_window, QUERY_WINDOWS)
        if n_items is not None and n_items < 1:
            raise UsageError(f"n_items={n_items} is invalid: it must be at least 1 (or null for the task's "
                             "prompt_items)")
        positive(prompts=prompts, dpi=dpi)
        figure_formats(formats)
        positive(group=group)
        self.n_items, self.prompts, self.seed, self.group = n_items, prompts, seed, group
        self.formats, self.dpi = list(formats), dpi
        self.tokens: torch.Tensor | None = None  # P 2n+1, drawn at setup
        self.n: int | None = None  # n_items resolved at setup
        self.induction: list[np.ndarray] = []  # each (layers, heads)
        self.lag_crp_peak: list[np.ndarray] = []
        self.cmr_distance: list[np.ndarray] = []

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        try:
            heads = head_model(pl_module, group=self.group)
        except UsageError as err:
            raise UsageError(f"HeadScoreTracker: {err}") from None
        vocab_size = pl_module.hparams.vocab_size
        n = getattr(trainer.datamodule, "prompt_items", 25) if self.n_items is None else self.n_items
        max_lag = int(FIT_LAGS.max())
        shortest = shortest_prompt(max_lag, self.query_window)  # a second-repeat query at every lag of the CRP
        if not shortest <= n < vocab_size:
            given = "" if self.n_items is not None else " (the task's prompt_items)"
            raise UsageError(f"n_items={n}{given} is invalid for HeadScoreTracker with vocab_size={vocab_size}: it "
                             f"must lie in [{shortest}, {vocab_size - 1}] (the lag-CRP on lags ±{max_lag} with "
                             f"query_window={self.query_window!r} needs n_items >= {shortest}, the prompt n distinct "
                             "tokens besides BOS)")
        if heads.max_length is not None and 2 * n + 1 > heads.max_length:
            raise UsageError(f"n_items={n} is too large for max_length={heads.max_length} of the learned "
                             f"positions: prompts have length 2·n_items + 1 = {2 * n + 1}")
        fits_in_memory("the tracker's captured attention", 2 * 4 * heads.n_layers * self.prompts * heads.n_heads
                       * (2 * n + 1) ** 2, prompts=self.prompts, n_items=n)
        self.n = n
        generator = torch.Generator().manual_seed(self.seed)  # never the global one: training must not notice
        self.tokens = repeated_prompt(n, vocab_size, BOS, self.prompts, generator)  # P 2n+1

    def settings(self) -> dict[str, int | None]:
        """What the scores depend on besides the model: a history scored otherwise is not continued."""
        return {"n_items": self.n, "prompts": self.prompts, "seed": self.seed, "query_window": self.query_window,
                "group": self.group}

    def score(self, pl_module: L.LightningModule) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Induction score, lag-CRP peak and CMR distance (NaN for a flat lag-CRP) of every head on the prompts,
        averaged over them: (layers, heads) each, as ``score_heads`` gives them (the scoring of ``primacy analyze
        icl``), in one batch and on the paper's grid. The model's modes are restored afterwards."""
        modes = [(module, module.training) for module in pl_module.modules()]
        pl_module.eval()  # dropout would draw from the global generator
        try:
            heads = head_model(pl_module, group=self.group)
            scored = score_heads(heads, self.tokens.to(pl_module.device), self.n, CMRGrid.paper(),
                                 batch_size=self.prompts, window=self.query_window)  # the grid is read once
        finally:
            for module, training in modes:
                module.training = training
        return scored.induction, scored.lag_crp_peak, scored.fits["cmr_distance"]

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

    def _write(self, trainer: L.Trainer, pl_module: L.LightningModule, run: RunDir) -> None:
        steps, induction = np.asarray(self.steps, dtype=np.int64), np.stack(self.induction)  # S, (S layers heads)
        peak, distance = np.stack(self.lag_crp_peak), np.stack(self.cmr_distance)  # S layers heads each
        first = self.first_induction_step()
        files.save_npz(run.head_history, steps=steps, induction=induction, lag_crp_peak=peak,
                       cmr_distance=distance, n_items=np.int64(self.n), n_prompts=np.int64(self.prompts),
                       prompt_seed=np.int64(self.seed), first_induction_step=np.int64(-1 if first is None else first))
        title = (f"{type(pl_module.backbone).__name__}: heads on [BOS] r r (n = {self.n}, {self.prompts} prompts) "
                 "over training")
        figures.save(figures.heads.head_history(steps, induction, distance, peak, first, title),
                     run.figure("head_history"), self.formats, self.dpi)

    def first_induction_step(self) -> int | None:
        """The first recorded step at which some head's induction score is at least 0.5; None if none."""
        return next((step for step, scores in zip(self.steps, self.induction) if scores.max() >= EMERGED), None)

    def state_dict(self) -> dict[str, Any]:
        return {"settings": self.settings(), "steps": list(self.steps),
                "induction": [v.tolist() for v in self.induction],
                "lag_crp_peak": [v.tolist() for v in self.lag_crp_peak],
                "cmr_distance": [v.tolist() for v in self.cmr_distance]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        saved = {"query_window": "common", "group": 1, **state_dict["settings"]}  # older histories: those defaults
        if self.n is not None and saved != self.settings():  # fitting with other prompts or queries
            rank_zero_warn(f"HeadScoreTracker: the checkpoint's head history was scored with {saved}, "
                           f"this run scores with {self.settings()}: the history starts afresh")
            return
        self.steps = list(state_dict["steps"])
        self.induction = [np.asarray(v, dtype=np.float64) for v in state_dict["induction"]]
        self.lag_crp_peak = [np.asarray(v, dtype=np.int64) for v in state_dict["lag_crp_peak"]]
        self.cmr_distance = [np.asarray(v, dtype=np.float64) for v in state_dict["cmr_distance"]]
