"""What a run prints: known third-party warnings and tips silenced, wandb quiet, help text ended quietly when its
reader stops (progress lines are ``primacy.cli.progress``). Imports no Lightning: ``primacy --help`` and primacy's own
commands start without it."""

from __future__ import annotations

import logging
import os
import sys
import warnings
from typing import Any

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
    show_plugin_logs()


def show_plugin_logs() -> None:
    """Each installed plugin's logger (its top-level package's, ``logging.getLogger("primacy_mamba")``) prints its
    INFO records on stderr, from the first process only, as Lightning's own do: a plugin says once which kernel or
    path it chose. A level set on the logger beforehand is kept."""
    from primacy import registry

    for package in registry.plugin_packages():
        logger = logging.getLogger(package)
        if any(isinstance(h, _PluginHandler) for h in logger.handlers):
            continue
        if logger.level == logging.NOTSET:
            logger.setLevel(logging.INFO)
        logger.addHandler(_PluginHandler())


class _PluginHandler(logging.StreamHandler):
    """The message alone on whatever sys.stderr is when it comes, from the process of rank 0 only (Lightning sets
    each process's rank)."""

    def __init__(self) -> None:
        super().__init__()
        self.addFilter(_rank_zero)

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:  # StreamHandler's constructor sets it; the property reads sys.stderr
        pass


def _rank_zero(record: logging.LogRecord) -> bool:
    from lightning.pytorch.utilities import rank_zero_only  # loaded by then: plugins log from Lightning's runs

    return getattr(rank_zero_only, "rank", 0) == 0


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
