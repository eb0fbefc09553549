"""Where a run's files live: everything under one directory, the trainer's default_root_dir."""

from __future__ import annotations

from pathlib import Path

import lightning as L


def run_dir(trainer: L.Trainer) -> Path:
    """A run's directory is the trainer's default_root_dir."""
    return Path(trainer.default_root_dir)


def last_checkpoint(root: Path) -> Path:
    return root / "checkpoints" / "last.ckpt"
