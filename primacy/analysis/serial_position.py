"""Serial-position summaries of a study x query accuracy matrix (definitions in DESIGN.md) and the
recognition-contiguity curve (defined in primacy.metrics.StudyQueryAccuracy)."""

from __future__ import annotations

import torch


def lag_curve(matrix: torch.Tensor) -> torch.Tensor:
    """Mean accuracy by lag d = j + (L - i) - 1, the number of tokens between an item and its query.

    matrix: (L, L) study x query accuracy, NaN where a cell has no trials. Returns (2L - 1,): d runs from 0 (last item queried first)
    to 2L - 2 (first item queried last).
    """
    n = matrix.shape[0]
    i, j = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
    lag = (j + n - i - 1).flatten()  # L*L
    values = matrix.flatten()
    seen = ~values.isnan()  # cells without trials do not count
    sums = torch.zeros(2 * n - 1, dtype=matrix.dtype).index_add_(0, lag[seen], values[seen])
    return sums / torch.bincount(lag[seen], minlength=2 * n - 1).to(matrix.dtype)


def contiguity_curve(hits: torch.Tensor, counts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Recognition-contiguity curve from summed trials: accuracy by lag d (StudyQueryAccuracy defines it).

    hits, counts: (2L - 1,) correct answers and queries at index d + L - 1. Returns (lags (2L - 1,) int64 from
    -(L - 1) to L - 1, accuracy (2L - 1,) float64, NaN where a lag has no queries).
    """
    if hits.ndim != 1 or hits.shape != counts.shape or hits.shape[0] % 2 == 0:
        raise ValueError(
            f"contiguity hits {tuple(hits.shape)} and counts {tuple(counts.shape)} must both have shape (2L - 1,)"
        )
    n = (hits.shape[0] + 1) // 2
    return torch.arange(-(n - 1), n), hits.double() / counts.double()


def position_indices(curve: torch.Tensor) -> dict[str, float]:
    """primacy_index, recency_index and early_minus_late of a serial-position curve (L,).

    With q = max(1, L // 4): early = mean of the first q, late = mean of the last q, middle = mean of
    positions [q, L - q) (NaN when L < 3, which has no middle).
    """
    n = curve.shape[0]
    q = max(1, n // 4)
    early, late = curve[:q].mean(), curve[n - q :].mean()
    middle = curve[q : n - q].mean() if n - 2 * q > 0 else torch.tensor(float("nan"))
    return {
        "primacy_index": float(early - middle),
        "recency_index": float(late - middle),
        "early_minus_late": float(early - late),
    }


def _contiguity(hits: torch.Tensor | None, counts: torch.Tensor | None, n_items: int) -> dict[str, torch.Tensor]:
    if (hits is None) != (counts is None):
        raise ValueError("contiguity_hits and contiguity_counts go together: pass both or neither")
    if hits is None:
        return {}
    if hits.shape != (2 * n_items - 1,):
        raise ValueError(
            f"contiguity_hits has shape {tuple(hits.shape)}: L={n_items} study positions need ({2 * n_items - 1},)"
        )
    lags, accuracy = contiguity_curve(hits, counts)
    return {"contiguity_curve": accuracy, "contiguity_lags": lags}


def summarize(
    hits: torch.Tensor,
    counts: torch.Tensor,
    distractor_hits: torch.Tensor,
    distractor_counts: torch.Tensor,
    contiguity_hits: torch.Tensor | None = None,
    contiguity_counts: torch.Tensor | None = None,
) -> dict[str, torch.Tensor | float]:
    """Accuracy matrix, curves and indices from summed trial counts.

    hits, counts: (L, L) correct "old" answers and trials by study x query position; distractor_hits,
    distractor_counts: (L,) correct "new" answers and trials by query position. Cells without trials are NaN.
    contiguity_hits, contiguity_counts: (2L - 1,) by recognition-contiguity lag; with them the dict also has
    ``contiguity_curve`` and ``contiguity_lags``; without them (results written before they existed) it has not.
    """
    hits, counts = hits.double(), counts.double()
    distractor_hits, distractor_counts = distractor_hits.double(), distractor_counts.double()
    matrix = hits / counts  # L L (NaN where a cell has no trials)
    curve = matrix.nanmean(dim=1)  # L
    total = counts.sum() + distractor_counts.sum()
    return {
        "matrix": matrix,
        "distractor_accuracy_by_query": distractor_hits / distractor_counts,  # L
        "serial_position_curve": curve,
        "query_position_curve": matrix.nanmean(dim=0),
        "lag_curve": lag_curve(matrix),
        "overall_accuracy": float((hits.sum() + distractor_hits.sum()) / total),
        "target_accuracy": float(hits.sum() / counts.sum()),
        "distractor_accuracy": float(distractor_hits.sum() / distractor_counts.sum()),
        **position_indices(curve),
        **_contiguity(contiguity_hits, contiguity_counts, hits.shape[0]),
    }
