"""RunCheckpoint: <run>/checkpoints/last.ckpt kept current, on a schedule, on SIGTERM and Ctrl-C, and at the end,
with the random generators' states so that a resumed run equals an uninterrupted one."""

from __future__ import annotations

import random
import signal
import threading
import time
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.utilities import rank_zero_info

from primacy.callbacks.wandb_service import close_wandb, detach_wandb
from primacy.errors import UsageError
from primacy.rundir.layout import RunDir


class RunCheckpoint(ModelCheckpoint):
    """Keeps <run>/checkpoints/last.ckpt the latest state of a run, so a long run survives interruption:

    - every ``every_n_train_steps`` optimiser steps and every ``every_n_minutes`` of training, whichever comes first;
    - on SIGTERM (what SLURM sends before it preempts a job) and on the first Ctrl-C: the step in progress (or the
      validation in progress and the step after it) finishes, the checkpoint is written and training stops (a second
      Ctrl-C stops at once); after SIGTERM nothing more is logged to wandb, whose service SLURM signals too, and its
      run is closed when training ends (``primacy.callbacks.wandb_service``);
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
        self._trainer: L.Trainer | None = None  # the trainer whose run a signal stops
        self._wandb_detached = False

    @property
    def state_key(self) -> str:
        return type(self).__name__  # one per run, whatever its intervals: a resume may change them

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self.dirpath is None:
            self.dirpath = str(RunDir.of(trainer).checkpoints)
        super().setup(trainer, pl_module, stage)

    @property
    def stop_requested(self) -> bool:
        return self.stop_signal is not None

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._last_save_time = time.monotonic()
        self._trainer = trainer
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
            if self._trainer is not None and detach_wandb(self._trainer):
                self._wandb_detached = True

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
        if self._wandb_detached:  # the checkpoint first: closing may find wandb's service gone
            close_wandb(128 + (self.stop_signal or signal.SIGTERM))

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        self._restore_signals()

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "rng": rng_states()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        saved_in = state_dict.get("dirpath")
        if saved_in and self.dirpath and saved_in != self.dirpath:
            state_dict = rerooted(state_dict, saved_in, self.dirpath)
        super().load_state_dict(state_dict)
        if "rng" in state_dict:
            set_rng_states(state_dict["rng"])


def rerooted(state_dict: dict[str, Any], old: str, new: str) -> dict[str, Any]:
    """A ModelCheckpoint state written in directory ``old`` as if written in ``new``: the run directory was moved or
    copied since. Without this Lightning forgets which last.ckpt is the run's own, and the resumed run saves its
    steps to last-v1.ckpt while last.ckpt stays at the step it resumed from."""

    def moved(path: Any) -> Any:
        if isinstance(path, str) and path and Path(path).parent == Path(old):
            return str(Path(new) / Path(path).name)
        return path

    state = {key: moved(value) for key, value in state_dict.items()}
    state["dirpath"] = new
    if isinstance(state_dict.get("best_k_models"), dict):
        state["best_k_models"] = {moved(path): score for path, score in state_dict["best_k_models"].items()}
    return state


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
