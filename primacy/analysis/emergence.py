"""How induction heads and their CMR fits change over training (Ji-An et al. 2024, Fig. 7): one row per checkpoint of
the top heads' scores and fitted CMR parameters, the share of CMR-like heads and the model's ICL score, and the mean
and standard error of those rows over seeds.

The top heads are chosen afresh at every checkpoint, by induction score, as the paper chose them in each Pythia
checkpoint: a row describes the model's best induction heads at that step, whichever they are.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from primacy.analysis.icl import CMR_LIKE

FITTED = ("beta_enc", "beta_rec", "gamma_ft", "inv_temperature")  # CMR's parameters and scale, per head
MEASURES = ("icl_score", "top_induction", "top_cmr_distance", *FITTED, "cmr_like_share")
EMERGED = 0.5  # top-head induction score at which a checkpoint counts as having an induction head


def as_float(value: Any) -> float:
    """A heads.csv cell, a HeadResult field or a JSON number as a float; empty cells and nulls (no fit) are NaN."""
    return float("nan") if value in (None, "") else float(value)


def _mean(values: list[float]) -> float:
    finite = [v for v in values if not math.isnan(v)]
    return float(np.mean(finite)) if finite else float("nan")


def emergence_row(step: int, heads: Sequence[dict[str, Any]], top: int, icl_score: float = float("nan")) -> dict:
    """One checkpoint's line: ``heads`` are heads.csv rows (or ``HeadResult.row()``), ``top`` how many of the best
    induction heads are averaged. Fitted parameters average the top heads whose lag-CRP was not flat; the CMR-like
    share counts every head (a flat head is not CMR-like)."""
    ranked = sorted(heads, key=lambda h: -as_float(h["induction"]))[:top]
    best = ranked[0]
    return {
        "step": int(step),
        "icl_score": float(icl_score),
        "top_induction": _mean([as_float(h["induction"]) for h in ranked]),
        "top_cmr_distance": _mean([as_float(h["cmr_distance"]) for h in ranked]),
        **{key: _mean([as_float(h[key]) for h in ranked]) for key in FITTED},
        "cmr_like_share": float(np.mean([as_float(h["cmr_distance"]) < CMR_LIKE for h in heads])),
        "best_head": f"L{int(best['layer'])}H{int(best['head'])}",
        "best_induction": as_float(best["induction"]),
        "top": len(ranked),
    }


def emergence_step(rows: Sequence[dict[str, Any]], threshold: float = EMERGED) -> int | None:
    """The first step whose best head has an induction score of at least ``threshold``; None if none has."""
    return next((row["step"] for row in sorted(rows, key=lambda r: r["step"]) if row["best_induction"] >= threshold),
                None)


def across_seeds(tables: Sequence[Sequence[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Mean and standard error over seeds of every measure, at the steps every seed has (runs of one config save
    at the same steps; a step only some seeds have, such as an interrupted run's extra save, is left out)."""
    steps = sorted(set.intersection(*({row["step"] for row in table} for table in tables)))
    by_step = [{row["step"]: row for row in table} for table in tables]
    rows = []
    for step in steps:
        row: dict[str, Any] = {"step": step, "seeds": len(tables), "top": tables[0][0]["top"]}
        for key in MEASURES:
            values = np.array([table[step][key] for table in by_step], dtype=float)
            values = values[~np.isnan(values)]
            row[key] = float(values.mean()) if len(values) else float("nan")
            row[f"{key}_se"] = float(values.std(ddof=1) / np.sqrt(len(values))) if len(values) > 1 else float("nan")
        rows.append(row)
    return rows
