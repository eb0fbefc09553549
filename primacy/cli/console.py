"""What a run prints: known third-party warnings and tips silenced, wandb quiet, and plain progress lines instead of
a redrawn bar when the output goes to a file (so a log has no carriage returns or ANSI codes)."""

from __future__ import annotations

import logging
import os
import sys
import time
import warnings
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback, ProgressBar

# (message regex, category, why it says nothing to a primacy user). Anything not listed stays visible.
KNOWN_WARNINGS = (
    (r"It is recommended to use `self\.log\(.*sync_dist=True\)`", UserWarning,
     "epoch-level values are torchmetrics states summed over every process before compute()"),
    (r"Your `IterableDataset` has `__len__` defined", UserWarning,
     "primacy's evaluation sets split themselves across processes and DataLoader workers (primacy.tasks.base)"),
    (r"Attribute 'backbone' is an instance of `nn\.Module`", UserWarning,
     "under the CLI the backbone is recorded as its class_path/init_args config"),
    (r"`isinstance\(treespec, LeafSpec\)` is deprecated", FutureWarning,
     "Lightning's own use of a torch API, nothing a user can change"),
    (r"LightningCLI's args parameter is intended to run from within Python", UserWarning,
     "main(args) is how tests and notebooks call primacy"),
)
_LOGGERS = ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero")


class _NoTips(logging.Filter):
    """Drops Lightning's advertisement ("💡 Tip: ... try installing litlogger ...")."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("💡 Tip")


def setup() -> None:
    """Called first by ``primacy.cli.main``: safe to call again."""
    for message, category, _ in KNOWN_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category)
    for name in _LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _NoTips) for f in logger.filters):
            logger.addFilter(_NoTips())
    os.environ.setdefault("WANDB_SILENT", "true")  # wandb's banners and notices; set it to false to see them


def show(text: str, stream: Any = None) -> None:
    """Prints help text; a reader that stops early (``primacy --help | head``) ends it quietly."""
    stream = stream or sys.stdout
    try:
        print(text, file=stream, flush=True)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())  # so the flush at exit does not fail again


def quiet_wandb(logger: Any) -> None:
    """wandb warns about a setting Lightning always passes (``anonymous``) before it reads WANDB_SILENT; set its
    console to silent first. Only when the run logs to wandb (importing wandb takes a second)."""
    if type(logger).__name__ != "WandbLogger" or os.environ.get("WANDB_SILENT", "").lower() not in ("1", "true"):
        return
    import wandb

    wandb.termsetup(wandb.Settings(silent=True), None)


def finish_wandb() -> None:
    """Ends the wandb run of a finished command now rather than at interpreter exit, where wandb's summary is written
    with colour codes even into a file (and a second command in the same process would log into the same run)."""
    wandb = sys.modules.get("wandb")
    if wandb is not None and getattr(wandb, "run", None) is not None:
        wandb.run.finish()


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
