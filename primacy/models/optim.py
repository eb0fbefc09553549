"""The optimiser of primacy's models and its settings (``Optimiser``), parameter groups from per-parameter hints, and
the warm-up + cosine learning-rate schedule."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from functools import partial

import lightning as L
import torch
from torch import nn

from primacy.checks import finite
from primacy.errors import UsageError


@dataclass(frozen=True)
class Optimiser:
    """The optimiser every primacy model trains with, and its settings: AdamW over ``param_groups`` with a linear
    warm-up to ``lr`` and a cosine decay to 0 at the trainer's last step (``configure``).

    A model takes these settings as its own arguments (``model.init_args.lr``, ...) without declaring them: its
    constructor ends with ``**optimiser`` and passes them to this class (or to a subclass that changes a default, as
    LanguageModel's does), and jsonargparse, following that call, gives the model these parameters with their types,
    defaults and the descriptions below, so the CLI shows, checks and saves them as before; a checkpoint's hparams
    hold them beside the model's own, and load back through ``**optimiser``. The model keeps the result as
    ``self.optimiser``. Settings it cannot use are refused when it is built, in one line naming the setting.

    Args:
        lr: peak learning rate.
        betas: Adam(W)'s betas (the paper's text: 0.9, 0.99; the authors' code: 0.9, 0.98).
        eps: Adam(W)'s epsilon.
        weight_decay: AdamW's weight decay (a parameter's ``_optim`` hint may set its own: ``param_groups``).
        warmup_steps: linear warm-up from 0 to ``lr``; then cosine decay to 0 at the trainer's last step.
    """

    lr: float = 1e-3
    betas: tuple[float, float] = (0.9, 0.99)
    eps: float = 1e-8
    weight_decay: float = 0.0
    warmup_steps: int = 1000

    def __post_init__(self) -> None:
        finite(lr=self.lr, eps=self.eps, weight_decay=self.weight_decay)
        if self.lr <= 0:
            raise UsageError(f"lr={self.lr} is invalid: it must be positive")
        if not all(0 <= b < 1 for b in self.betas):
            raise UsageError(f"betas={self.betas} is invalid: both must lie in [0, 1)")
        if self.warmup_steps < 0:
            raise UsageError(f"warmup_steps={self.warmup_steps} is invalid: it must be at least 0")

    def configure(self, module: L.LightningModule) -> dict:
        """AdamW over ``param_groups(module)`` and a per-step warm-up + cosine schedule to the trainer's last step:
        what ``module.configure_optimizers`` returns."""
        groups = param_groups(module, self.lr, self.weight_decay)
        optimizer = torch.optim.AdamW(groups, lr=self.lr, betas=self.betas, eps=self.eps)
        total = module.trainer.estimated_stepping_batches
        if total == float("inf"):
            raise UsageError("trainer.max_steps=-1 is not allowed: the training stream is endless, set max_steps")
        schedule = partial(warmup_cosine, warmup_steps=self.warmup_steps, total_steps=int(total))
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def check_optimiser(lr: float, betas: tuple[float, float], eps: float, weight_decay: float, warmup_steps: int) -> None:
    """Refuse optimiser settings ``Optimiser`` cannot use: its checks, for code written before it."""
    Optimiser(lr, betas, eps, weight_decay, warmup_steps)


def adamw_warmup_cosine(module: L.LightningModule) -> dict:
    """``Optimiser.configure`` with the settings in ``module.hparams`` (lr, betas, eps, weight_decay, warmup_steps), as
    before the models kept an ``Optimiser``: for a LightningModule of one's own that saves them."""
    return Optimiser(**{f.name: module.hparams[f.name] for f in fields(Optimiser)}).configure(module)


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
