"""Training progress when the output goes to a file: plain lines instead of a redrawn bar, so a log has no carriage
returns or ANSI codes."""

from __future__ import annotations

import sys
import time
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback, ProgressBar


def wants_line_progress(enable_progress_bar: bool | None, callbacks: list[Callback]) -> bool:
    """Plain lines replace Lightning's bar when its output (stderr) is not a terminal, unless the progress bar is
    off or the config chose one."""
    return (enable_progress_bar is not False and not any(isinstance(c, ProgressBar) for c in callbacks)
            and not _isatty(sys.stderr))


def _isatty(stream: Any) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # replaced or closed stream
        return False


class LineProgress(ProgressBar):
    """Training progress as plain lines on stderr: one after each validation (step, time, ETA and the logged
    values) and one a minute in between, for logs of long runs that one reads with tail or less.

    Args:
        every_seconds: the longest silence during training.
    """

    def __init__(self, every_seconds: float = 60.0) -> None:
        super().__init__()
        self.every_seconds = every_seconds
        self._enabled = True
        self._start = self._last = 0.0
        self._first_step = 0

    def disable(self) -> None:
        self._enabled = False

    def enable(self) -> None:
        self._enabled = True

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._start = self._last = time.monotonic()
        self._first_step = trainer.global_step  # a resumed run's ETA counts the steps of this session only

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any) -> None:
        if self._enabled and time.monotonic() - self._last >= self.every_seconds:
            self._line(trainer, pl_module, "train/")

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._enabled and not trainer.sanity_checking and trainer.state.fn == "fit":
            self._line(trainer, pl_module, "")

    def _line(self, trainer: L.Trainer, pl_module: L.LightningModule, prefix: str) -> None:
        now = time.monotonic()
        self._last = now
        step, total, elapsed = trainer.global_step, trainer.max_steps, now - self._start
        done = step - self._first_step
        eta = f", ~{_clock(elapsed / done * (total - step))} left" if done > 0 and total > step else ""
        of = f"/{total}" if total > 0 else ""
        values = "  ".join(f"{key} {value:.3g}" if isinstance(value, float) else f"{key} {value}"
                           for key, value in self.get_metrics(trainer, pl_module).items()
                           if key.startswith(prefix) and key != "v_num")
        print(f"step {step}{of} ({_clock(elapsed)}{eta})  {values}".rstrip(), file=sys.stderr, flush=True)


def _clock(seconds: float) -> str:
    minutes, seconds = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}" if hours else f"{minutes}:{seconds:02d}"
