"""How induction heads and their CMR fits change over training (Ji-An et al. 2024, Fig. 7): one row per checkpoint of
the top heads' scores and fitted CMR parameters, the share of CMR-like heads and the model's ICL score, and the mean
and standard error of those rows over seeds.

Which heads are "the top heads" (``HEAD_CHOICES``): by default the ``top`` best induction heads of the final
checkpoint, followed back through training, as the authors' code fixes them (so an early row describes the heads
that will become induction heads); ``each`` re-ranks at every checkpoint (a row then describes whichever heads are
best at that step). The best head (``best_head``, ``best_induction``, what ``emergence_step`` reads) is always the
best of that checkpoint.
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
HEAD_CHOICES = ("final", "each")  # the checkpoint whose ranking picks the top heads: the last one, or every one
Head = tuple[int, int]  # (layer, head)


def as_float(value: Any) -> float:
    """A heads.csv cell, a HeadResult field or a JSON number as a float; empty cells and nulls (no fit) are NaN."""
    return float("nan") if value in (None, "") else float(value)


def _mean(values: list[float]) -> float:
    finite = [v for v in values if not math.isnan(v)]
    return float(np.mean(finite)) if finite else float("nan")


def top_heads(heads: Sequence[dict[str, Any]], top: int) -> list[Head]:
    """The ``top`` heads of highest induction score, best first, as (layer, head)."""
    ranked = sorted(heads, key=lambda h: -as_float(h["induction"]))[:top]
    return [(int(h["layer"]), int(h["head"])) for h in ranked]


def emergence_row(step: int, heads: Sequence[dict[str, Any]], top: int, icl_score: float = float("nan"),
                  chosen: Sequence[Head] | None = None) -> dict:
    """One checkpoint's line: ``heads`` are heads.csv rows (or ``HeadResult.row()``); the top heads averaged are
    ``chosen`` (picked at another checkpoint, ``top_heads``) or else this checkpoint's ``top`` best induction heads.
    Fitted parameters average the top heads whose lag-CRP was not flat; the CMR-like share counts every head (a
    flat head is not CMR-like)."""
    by_head = {(int(h["layer"]), int(h["head"])): h for h in heads}
    ranked = [by_head[head] for head in (top_heads(heads, top) if chosen is None else chosen)]
    best = max(heads, key=lambda h: as_float(h["induction"]))
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
        "top_heads": " ".join(f"L{layer}H{head}" for layer, head in
                              ((int(h["layer"]), int(h["head"])) for h in ranked)),
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
