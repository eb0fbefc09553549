"""Serial-position summaries of a study x query accuracy matrix (definitions in DESIGN.md)."""

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


def summarize(
    hits: torch.Tensor, counts: torch.Tensor, distractor_hits: torch.Tensor, distractor_counts: torch.Tensor
) -> dict[str, torch.Tensor | float]:
    """Accuracy matrix, curves and indices from summed trial counts.

    hits, counts: (L, L) correct "old" answers and trials by study x query position; distractor_hits,
    distractor_counts: (L,) correct "new" answers and trials by query position. Cells without trials are NaN.
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
    }
