"""Δ by token for the figure pages: each seed's selection step on new and repeated tokens (``analysis.heads.selection``)
from its last checkpoint, on the first validation sequences of its task (the ones TokenDtTracker follows), and
their mean ± SE over a panel's seeds."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from primacy import files
from primacy.analysis.behaviour.comparison import mean_and_se
from primacy.analysis.heads.selection import DtByRole, dt_by_role, has_dt, token_dt
from primacy.errors import UsageError
from primacy.rundir import results
from primacy.rundir.layout import RunDir
from primacy.rundir.runs import load_run, untrained_run

SEQUENCES = 16  # as TokenDtTracker's default


def run_dt_by_role(run: Path, sequences: int = SEQUENCES) -> DtByRole | None:
    """Δ by role of a run's last checkpoint; None for a backbone without a Δt (attention, LSTM, xLSTM). Kept in
    <run>/selection (``RunDir.selection``) and read back from there when newer than the checkpoint, or when the run
    was kept without checkpoints (results/)."""
    files_of = RunDir(run)
    kept, checkpoint = files_of.selection.arrays, files_of.last_checkpoint
    if kept.is_file() and (files_of.kept_as_results or kept.stat().st_mtime >= checkpoint.stat().st_mtime):
        return _read(kept, sequences)
    if files_of.kept_as_results:
        return _kept_dt_by_role(files_of, kept, sequences)
    model, data = load_run(files_of.config, checkpoint)
    if not has_dt(model.backbone):
        files.save_npz(kept, sequences=sequences, layers=np.array([], dtype=str))
        return None
    data.setup("validate")
    tokens = next(iter(data.val_dataloader()))["tokens"][:sequences]  # B T
    result = dt_by_role(token_dt(model, tokens), tokens)
    files.save_npz(kept, sequences=sequences, layers=np.array(result.layers, dtype=str), new=result.new,
                   repeat=result.repeat, contrast=result.contrast, positions=result.positions)
    return result


def _kept_dt_by_role(files_of: RunDir, kept: Path, sequences: int) -> DtByRole | None:
    """A run kept without checkpoints and without its file: None where its backbone has no Δ; a fixed Δt (S4, S4D: a
    parameter, the same on every token) from the last row of its kept Δt history, which the tracker writes at the last
    step; else a one-line error."""
    model, data = untrained_run(files_of.config)
    if not has_dt(model.backbone):
        return None  # nothing to measure, with or without weights
    if callable(getattr(model.backbone, "dt_per_token", None)) or not files_of.dt_history.is_file():
        raise UsageError(f"{files_of.path} was kept without checkpoints and without its Δ by token ({kept}): it "
                         "cannot be measured again")
    history = results.read_dt_history(files_of.dt_history)
    final = torch.from_numpy(history["dt"][-1])  # channels of every layer, in order
    widths = [int(width) for width in history["channels"]]
    data.setup("validate")
    tokens = next(iter(data.val_dataloader()))["tokens"][:sequences]  # B T
    dt = {str(name): part.expand(*tokens.shape, -1)
          for name, part in zip(history["layers"], torch.split(final, widths))}  # B T channels each
    return dt_by_role(dt, tokens)


def _read(path: Path, sequences: int) -> DtByRole | None:
    with np.load(path) as arrays:
        if int(arrays["sequences"]) != sequences:
            raise UsageError(f"{path} holds Δ on {int(arrays['sequences'])} sequences, not {sequences}: remove it to "
                             "measure it again from the run's checkpoint")
        if not arrays["layers"].size:
            return None
        return DtByRole([str(name) for name in arrays["layers"]], arrays["new"], arrays["repeat"],
                        arrays["contrast"], int(arrays["positions"]))


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
