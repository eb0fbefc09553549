"""The run's result files: summary.json, accuracy.npz, verification.csv (schema in DESIGN.md) and contiguity.csv."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch

from primacy.analysis.serial_position import summarize
from primacy.errors import UsageError

COUNT_KEYS = ("hits", "counts", "distractor_hits", "distractor_counts")
# Recognition contiguity (StudyQueryAccuracy): always written now, absent from runs written before it existed.
CONTIGUITY_KEYS = ("contiguity_hits", "contiguity_counts")
CURVE_KEYS = ("serial_position_curve", "query_position_curve", "lag_curve")
SCALAR_KEYS = ("overall_accuracy", "target_accuracy", "distractor_accuracy",
               "primacy_index", "recency_index", "early_minus_late")


def _json_number(x: float) -> float | None:
    return None if math.isnan(x) else x  # JSON has no NaN


def summary(result: dict[str, Any], settings: dict[str, Any]) -> dict[str, Any]:
    """The summary.json content: scalars, curves, the number of test sets and the run's key settings.

    ``contiguity_curve`` (null where a lag has no pairs) and ``contiguity_lags`` are included when ``result``
    has them.
    """
    counts = result["counts"]
    contiguity = {}
    if "contiguity_curve" in result:
        contiguity = {"contiguity_curve": [_json_number(float(v)) for v in result["contiguity_curve"]],
                      "contiguity_lags": [int(d) for d in result["contiguity_lags"]]}
    return {
        **{k: _json_number(float(result[k])) for k in SCALAR_KEYS},
        **{k: [_json_number(float(v)) for v in result[k]] for k in CURVE_KEYS},
        **contiguity,
        "n_sets": int(counts.min()) if bool((counts == counts.min()).all()) else None,
        **settings,
    }


def write(out_dir: str | Path, result: dict[str, Any], settings: dict[str, Any]) -> dict[str, Any]:
    """Write summary.json, accuracy.npz, verification.csv and contiguity.csv under ``out_dir``; returns the summary.

    ``result`` is StudyQueryAccuracy.compute()'s dict; ``settings`` holds at least ``condition``. A result
    without the contiguity states (``summarize`` of an older run's counts) gives no contiguity.csv.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    keys = COUNT_KEYS + (CONTIGUITY_KEYS if "contiguity_counts" in result else ())
    arrays = {k: np.asarray(torch.as_tensor(result[k]).cpu()) for k in keys}
    np.savez(out / "accuracy.npz", **arrays)
    content = write_summary(out, summary(result, settings))
    write_csv(out / "verification.csv", arrays, settings["condition"])
    if "contiguity_counts" in arrays:
        write_contiguity_csv(out / "contiguity.csv", arrays, settings["condition"])
    return content


def write_summary(out_dir: str | Path, content: dict[str, Any]) -> dict[str, Any]:
    """Write ``content`` to <out_dir>/summary.json; returns it."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(content, indent=2) + "\n")
    return content


def write_csv(path: Path, arrays: dict[str, np.ndarray], condition: str) -> None:
    """Long format: one row per (study, query) cell, then one per query position for distractors (study_pos -1)."""
    hits, counts = arrays["hits"], arrays["counts"]
    n = hits.shape[0]
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["condition", "study_pos", "query_pos", "accuracy", "n"])
        for i in range(n):
            for j in range(n):
                writer.writerow([condition, i, j, _ratio(hits[i, j], counts[i, j]), int(counts[i, j])])
        for j in range(n):
            d_hits, d_counts = arrays["distractor_hits"][j], arrays["distractor_counts"][j]
            writer.writerow([condition, -1, j, _ratio(d_hits, d_counts), int(d_counts)])


def write_contiguity_csv(path: Path, arrays: dict[str, np.ndarray], condition: str) -> None:
    """Long format: one row per recognition-contiguity lag d = -(L - 1) .. L - 1 (empty accuracy where n = 0)."""
    hits, counts = arrays["contiguity_hits"], arrays["contiguity_counts"]
    n = (counts.shape[0] + 1) // 2
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["condition", "lag", "accuracy", "n"])
        for index, (h, c) in enumerate(zip(hits, counts)):
            writer.writerow([condition, index - (n - 1), _ratio(h, c), int(c)])


def _ratio(hits: float, count: float) -> str:
    return f"{hits / count:.6g}" if count else ""


def read(out_dir: str | Path) -> dict[str, Any]:
    """Load a results directory: the summary and the recomputed result dict from accuracy.npz.

    Runs written before the recognition-contiguity curve existed have no contiguity arrays: their dict then
    lacks ``contiguity_hits``, ``contiguity_counts``, ``contiguity_curve`` and ``contiguity_lags`` (as their
    summary lacks the last two) and everything else is as before.
    """
    out = Path(out_dir)
    path = out / "accuracy.npz"
    with np.load(path) as data:
        missing = [k for k in COUNT_KEYS if k not in data.files]
        if missing:
            raise UsageError(f"{path} lacks {', '.join(missing)}: it is not a run's accuracy.npz")
        present = [k for k in CONTIGUITY_KEYS if k in data.files]
        if len(present) == 1:
            raise UsageError(f"{path} has {present[0]} without its partner: contiguity_hits and contiguity_counts "
                             "are written together")
        states = {k: torch.from_numpy(data[k]) for k in COUNT_KEYS + tuple(present)}
    return {"summary": json.loads((out / "summary.json").read_text()), **summarize(**states), **states}


def write_dt_history(path: str | Path, steps: np.ndarray, dt: np.ndarray, layers: list[str], channels: list[int]) -> None:
    """dt_history.npz: steps (S,), dt (S, C) with the layers' channels side by side, layers (names), channels
    (each layer's channel count, in order)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, steps=np.asarray(steps, dtype=np.int64), dt=np.asarray(dt, dtype=np.float64),
             layers=np.asarray(layers, dtype=str), channels=np.asarray(channels, dtype=np.int64))


def read_dt_history(path: str | Path) -> dict[str, np.ndarray]:
    with np.load(path) as data:
        return {k: data[k] for k in ("steps", "dt", "layers", "channels")}
