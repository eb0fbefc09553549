"""How induction heads and their CMR fits change over training (Ji-An et al. 2024, Fig. 7): one row per checkpoint of
the top heads' scores and fitted CMR parameters, the share of CMR-like heads and the model's ICL score, and the mean
and standard error of those rows over seeds.

Which heads are "the top heads" (``HEAD_CHOICES``): by default the ``top`` best induction heads of the final
checkpoint, followed back through training, as the authors' code fixes them (so an early row describes the heads
that will become induction heads; Fig. 7d-e); ``each`` re-ranks at every checkpoint (a row then describes whichever
heads are best at that step). The paper's Fig. 7f-g follows a second set the same way, the ``top`` heads of lowest
CMR distance (the most CMR-like; ``closest_heads``): its columns are prefixed ``cmr_top_``. Fig. 7b is the share of
CMR-like heads in each layer (``cmr_like_share_L<layer>``) beside the share over all heads. The best head
(``best_head``, ``best_induction``, what ``emergence_step`` reads) is always the best of that checkpoint.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from primacy.analysis.heads.analysis import CMR_LIKE

FITTED = ("beta_enc", "beta_rec", "gamma_ft", "inv_temperature")  # CMR's parameters and scale, per head
MEASURES = ("icl_score", "top_induction", "top_cmr_distance", *FITTED, "cmr_like_share",
            "cmr_top_induction", "cmr_top_cmr_distance", *(f"cmr_top_{key}" for key in FITTED))
LAYER_SHARE = "cmr_like_share_L"  # + layer index: the share of CMR-like heads within that layer (Fig. 7b)
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


def closest_heads(heads: Sequence[dict[str, Any]], top: int) -> list[Head]:
    """The ``top`` heads of lowest CMR distance (the most CMR-like), best first, as (layer, head); flat heads (no
    fit) come last."""
    def order(h: dict[str, Any]) -> tuple[bool, float]:
        distance = as_float(h["cmr_distance"])
        return math.isnan(distance), distance

    return [(int(h["layer"]), int(h["head"])) for h in sorted(heads, key=order)[:top]]


def _names(rows: Sequence[dict[str, Any]]) -> str:
    return " ".join(f"L{int(h['layer'])}H{int(h['head'])}" for h in rows)


def emergence_row(step: int, heads: Sequence[dict[str, Any]], top: int, icl_score: float = float("nan"),
                  chosen: Sequence[Head] | None = None, closest: Sequence[Head] | None = None) -> dict:
    """One checkpoint's line: ``heads`` are heads.csv rows (or ``HeadResult.row()``); the top heads averaged are
    ``chosen`` (picked at another checkpoint, ``top_heads``) or else this checkpoint's ``top`` best induction heads,
    and the ``cmr_top_`` columns average ``closest`` (``closest_heads`` of another checkpoint) or else this
    checkpoint's ``top`` most CMR-like heads. Fitted parameters average the heads whose lag-CRP was not flat; the
    CMR-like shares count every head (a flat head is not CMR-like), over the model and within each layer."""
    by_head = {(int(h["layer"]), int(h["head"])): h for h in heads}
    ranked = [by_head[head] for head in (top_heads(heads, top) if chosen is None else chosen)]
    similar = [by_head[head] for head in (closest_heads(heads, top) if closest is None else closest)]
    best = max(heads, key=lambda h: as_float(h["induction"]))
    like = {head: as_float(h["cmr_distance"]) < CMR_LIKE for head, h in by_head.items()}
    layers = sorted({layer for layer, _ in by_head})
    return {
        "step": int(step),
        "icl_score": float(icl_score),
        "top_induction": _mean([as_float(h["induction"]) for h in ranked]),
        "top_cmr_distance": _mean([as_float(h["cmr_distance"]) for h in ranked]),
        **{key: _mean([as_float(h[key]) for h in ranked]) for key in FITTED},
        "cmr_like_share": float(np.mean(list(like.values()))),
        **{f"{LAYER_SHARE}{layer}": float(np.mean([v for (at, _), v in like.items() if at == layer]))
           for layer in layers},
        "cmr_top_induction": _mean([as_float(h["induction"]) for h in similar]),
        "cmr_top_cmr_distance": _mean([as_float(h["cmr_distance"]) for h in similar]),
        **{f"cmr_top_{key}": _mean([as_float(h[key]) for h in similar]) for key in FITTED},
        "best_head": f"L{int(best['layer'])}H{int(best['head'])}",
        "best_induction": as_float(best["induction"]),
        "top": len(ranked),
        "top_heads": _names(ranked),
        "cmr_top_heads": _names(similar),
    }


def measures(row: dict[str, Any]) -> list[str]:
    """The numeric columns of an emergence row that average over seeds: ``MEASURES`` and the per-layer shares
    (a row from before 2026-11-26 has neither the per-layer shares nor the ``cmr_top_`` columns)."""
    shares = sorted((k for k in row if k.startswith(LAYER_SHARE) and k.removeprefix(LAYER_SHARE).isdigit()),
                    key=lambda k: int(k.removeprefix(LAYER_SHARE)))  # a mean row's _se columns are not measures
    return [key for key in (*MEASURES, *shares) if key in row]


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
        for key in measures(tables[0][0]):
            values = np.array([table[step][key] for table in by_step], dtype=float)
            values = values[~np.isnan(values)]
            row[key] = float(values.mean()) if len(values) else float("nan")
            row[f"{key}_se"] = float(values.std(ddof=1) / np.sqrt(len(values))) if len(values) > 1 else float("nan")
        rows.append(row)
    return rows
