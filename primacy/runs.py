"""Rebuilding a finished run's model and task from its config.yaml and a checkpoint, for post-hoc analyses."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import torch
import yaml
from lightning.pytorch.cli import LightningArgumentParser

from primacy import registry
from primacy.errors import UsageError


def link_task_to_model(parser: LightningArgumentParser) -> None:
    """The task's sizes are the model's: vocab_size always, n_items for the verification task."""
    parser.link_arguments("data.init_args.vocab_size", "model.init_args.vocab_size", apply_on="parse")
    parser.link_arguments("data.init_args.n_items", "model.init_args.n_items", apply_on="parse")


def load_run(config: str | Path, ckpt_path: str | Path) -> tuple[L.LightningModule, L.LightningDataModule]:
    """The model (weights from ``ckpt_path``, in eval mode) and the task described by a run's ``config.yaml``."""
    config, ckpt_path = Path(config), Path(ckpt_path)
    if not config.is_file():
        raise UsageError(f"config={config} does not exist: give a run's config.yaml")
    if not ckpt_path.is_file():
        raise UsageError(f"ckpt_path={ckpt_path} does not exist: give a checkpoint, e.g. <run>/checkpoints/last.ckpt")
    settings = yaml.safe_load(config.read_text())
    if not isinstance(settings, dict) or "model" not in settings or "data" not in settings:
        raise UsageError(f"config={config} is not a run config: it needs model and data sections")
    registry.load_all()
    parser = LightningArgumentParser()
    parser.add_lightning_class_args(L.LightningModule, "model", subclass_mode=True)
    parser.add_lightning_class_args(L.LightningDataModule, "data", subclass_mode=True)
    link_task_to_model(parser)
    parsed = parser.parse_object({"model": settings["model"], "data": settings["data"]})
    built = parser.instantiate_classes(parsed)
    try:
        state = torch.load(ckpt_path, map_location="cpu", weights_only=False)["state_dict"]
    except Exception as err:  # truncated files, other formats
        raise UsageError(f"ckpt_path={ckpt_path} is not a readable Lightning checkpoint: {err}") from None
    missing, unexpected = built.model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise UsageError(f"ckpt_path={ckpt_path} does not match config={config}: missing {missing[:3]}, "
                         f"unexpected {unexpected[:3]}")
    return built.model.eval(), built.data
