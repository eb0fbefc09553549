"""Optimiser parameter groups from per-parameter hints, and the warm-up + cosine learning-rate schedule."""

from __future__ import annotations

import math
from functools import partial

import lightning as L
import torch
from torch import nn

from primacy.checks import finite
from primacy.errors import UsageError


def check_optimiser(lr: float, betas: tuple[float, float], eps: float, weight_decay: float, warmup_steps: int) -> None:
    """Refuse optimiser settings ``adamw_warmup_cosine`` cannot use, when the model is built."""
    finite(lr=lr, eps=eps, weight_decay=weight_decay)
    if lr <= 0:
        raise UsageError(f"lr={lr} is invalid: it must be positive")
    if not all(0 <= b < 1 for b in betas):
        raise UsageError(f"betas={betas} is invalid: both must lie in [0, 1)")
    if warmup_steps < 0:
        raise UsageError(f"warmup_steps={warmup_steps} is invalid: it must be at least 0")


def param_groups(module: nn.Module, lr: float, weight_decay: float) -> list[dict]:
    """Group trainable parameters by their optimiser hints.

    A parameter may carry ``_optim``, a dict overriding ``lr`` or ``weight_decay`` (SSM dynamics use it
    to avoid weight decay). Frozen parameters (requires_grad False) are left out, so they never move.
    """
    groups: dict[tuple, dict] = {}
    for p in module.parameters():
        if not p.requires_grad:
            continue
        hint = {"lr": lr, "weight_decay": weight_decay, **getattr(p, "_optim", {})}
        groups.setdefault(tuple(sorted(hint.items())), {**hint, "params": []})["params"].append(p)
    return list(groups.values())


def warmup_cosine(step: int, warmup_steps: int, total_steps: int) -> float:
    """Learning-rate factor: linear from 0 to 1 over ``warmup_steps``, then cosine to 0 at ``total_steps``."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    return 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


def adamw_warmup_cosine(module: L.LightningModule) -> dict:
    """AdamW over ``param_groups`` with the module's hparams (lr, betas, eps, weight_decay, warmup_steps) and a
    per-step warm-up + cosine schedule to the trainer's last step: what ``configure_optimizers`` returns."""
    hp = module.hparams
    optimizer = torch.optim.AdamW(param_groups(module, hp.lr, hp.weight_decay), lr=hp.lr, betas=hp.betas, eps=hp.eps)
    total = module.trainer.estimated_stepping_batches
    if total == float("inf"):
        raise UsageError("trainer.max_steps=-1 is not allowed: the training stream is endless, set max_steps")
    schedule = partial(warmup_cosine, warmup_steps=hp.warmup_steps, total_steps=int(total))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}
