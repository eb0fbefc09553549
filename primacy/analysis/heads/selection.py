"""The selection step Δ token by token: which tokens open the scan's gate (a large Δ: the state takes the token in and
forgets more of the past) and which close it. Mamba's Δ depends on the token (``Backbone.dt_per_token``); S4's and
S4D's is a parameter, the same at every position: the time-invariant control.

A token is a *repeat* where it occurred earlier in its sequence (an old probe of memory verification, the second
half of an induction prompt) and *new* otherwise. The contrast compares the two at the same positions, so that it
is not the position's own effect: on memory verification, old against new probes."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


def has_dt(backbone: torch.nn.Module) -> bool:
    """Whether a backbone has a Δ to read: a selection step per token (``dt_per_token``) or a fixed Δt (``dt()``)."""
    return callable(getattr(backbone, "dt_per_token", None)) or bool(backbone.dt())


def token_dt(model: torch.nn.Module, tokens: torch.Tensor) -> dict[str, torch.Tensor]:
    """Δ of every layer at every position of ``tokens`` (B, T): {layer: (B, T, channels)}, without gradients and in
    eval mode (the model's mode is restored). A fixed Δt (S4, S4D) is expanded over the positions."""
    backbone, training = model.backbone, model.training
    model.eval()
    try:
        with torch.no_grad():
            x = model.embedding(tokens.to(next(model.parameters()).device))  # B T D
            if callable(getattr(backbone, "dt_per_token", None)):
                return backbone.dt_per_token(x)
            return {name: dt.expand(*x.shape[:2], -1) for name, dt in backbone.dt().items()}
    finally:
        model.train(training)


def seen_before(tokens: torch.Tensor) -> torch.Tensor:
    """(B, T) bool: the token at t occurred at an earlier position of its sequence."""
    same = tokens[:, :, None] == tokens[:, None, :]  # B T T: [b, t, s] = token t is token s
    return torch.tril(same, diagonal=-1).any(dim=-1)


@dataclass(frozen=True)
class DtByRole:
    """Per layer, the channels' median log10 Δ at each position, averaged over the sequences whose token there is new
    (``new``) or a repeat (``repeat``), both (layers, T) with NaN where no sequence has that kind; and the contrast
    repeat − new (layers,) in decades, averaged over the ``positions`` that have both kinds (NaN where none)."""

    layers: list[str]
    new: np.ndarray
    repeat: np.ndarray
    contrast: np.ndarray
    positions: int


def dt_by_role(dt: dict[str, torch.Tensor], tokens: torch.Tensor) -> DtByRole:
    """``dt`` as ``token_dt`` gives it for ``tokens`` (B, T)."""
    repeat = seen_before(tokens).cpu().numpy()  # B T
    both = repeat.any(axis=0) & (~repeat).any(axis=0)  # T: positions where some sequences repeat and some do not
    new_rows, repeat_rows, contrasts = [], [], []
    for values in dt.values():
        log_dt = np.median(np.log10(values.double().cpu().numpy()), axis=-1)  # B T: the channels' median
        by_new, by_repeat = _masked_mean(log_dt, ~repeat), _masked_mean(log_dt, repeat)  # T each
        new_rows.append(by_new)
        repeat_rows.append(by_repeat)
        contrasts.append(float(np.mean(by_repeat[both] - by_new[both])) if both.any() else float("nan"))
    return DtByRole(list(dt), np.array(new_rows), np.array(repeat_rows), np.array(contrasts), int(both.sum()))


def _masked_mean(values: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """(T,): the mean over the first axis of ``values`` (B, T) where ``mask``; NaN where nothing is."""
    count = mask.sum(axis=0)
    total = np.where(mask, values, 0.0).sum(axis=0)
    return np.where(count > 0, total / np.maximum(count, 1), np.nan)
