"""Δ by token for the figure pages: each seed's selection step on new and repeated tokens (``analysis.heads.selection``)
from its last checkpoint, on the first validation sequences of its task (the ones TokenDtTracker follows), and
their mean ± SE over a panel's seeds."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from primacy.analysis.behaviour.comparison import mean_and_se
from primacy.analysis.heads.selection import DtByRole, dt_by_role, has_dt, token_dt
from primacy.rundir.layout import RunDir
from primacy.rundir.runs import load_run

SEQUENCES = 16  # as TokenDtTracker's default


def run_dt_by_role(run: Path, sequences: int = SEQUENCES) -> DtByRole | None:
    """Δ by role of a run's last checkpoint; None for a backbone without a Δt (attention, LSTM, xLSTM)."""
    files_of = RunDir(run)
    model, data = load_run(files_of.config, files_of.last_checkpoint)
    if not has_dt(model.backbone):
        return None
    data.setup("validate")
    tokens = next(iter(data.val_dataloader()))["tokens"][:sequences]  # B T
    return dt_by_role(token_dt(model, tokens), tokens)


@dataclass(frozen=True)
class PanelDt:
    """A panel's Δ by role over its seeds: mean and SE (layers, T) of new and of repeated tokens, and of the
    position-matched contrast repeat − new (layers,)."""

    label: str
    layers: list[str]
    new: tuple[np.ndarray, np.ndarray]
    repeat: tuple[np.ndarray, np.ndarray]
    contrast: tuple[np.ndarray, np.ndarray]

    def row(self) -> dict[str, float]:
        """The table's columns: dt_repeat_minus_new_L<i> and its _se, in decades (log10 Δ)."""
        row = {}
        for i, (mean, se) in enumerate(zip(*self.contrast)):
            row[f"dt_repeat_minus_new_L{i}"], row[f"dt_repeat_minus_new_L{i}_se"] = float(mean), float(se)
        return row


def panel_dt(label: str, dirs: list[Path]) -> PanelDt | None:
    """Δ by role of each of a panel's runs, mean ± SE over them; None when the backbone has no Δt."""
    seeds = [run_dt_by_role(run) for run in dirs]
    if not seeds or any(seed is None for seed in seeds):
        return None

    def over_seeds(field: str) -> tuple[np.ndarray, np.ndarray]:
        return mean_and_se(np.stack([getattr(seed, field) for seed in seeds]))
    return PanelDt(label, seeds[0].layers, over_seeds("new"), over_seeds("repeat"), over_seeds("contrast"))
