"""Serial-position summaries of a study x query accuracy matrix (their definitions: README.md, "What a run writes")
and the recognition-contiguity curves, raw and controlled (defined in primacy.metrics.StudyQueryAccuracy)."""

from __future__ import annotations

import torch


def delay_curve(matrix: torch.Tensor) -> torch.Tensor:
    """Mean accuracy by retention delay: the number of tokens between an item's presentation and its query.

    Study item i (0-based) is token i of the input and query position j is token L + j, so the tokens strictly
    between them number d = j + (L - i) - 1, from 0 (the last item queried first, right after it) to 2L - 2 (the
    first item queried last). ``delay_curve[d]`` is the unweighted mean of the cells (i, j) with that d.
    (Not a lag-CRP: that is ``contiguity_curve``.)

    matrix: (L, L) study x query accuracy, NaN where a cell has no trials. Returns (2L - 1,), NaN at a delay whose
    cells have no trials.
    """
    n = matrix.shape[0]
    positions = torch.arange(n, device=matrix.device)
    i, j = torch.meshgrid(positions, positions, indexing="ij")
    delay = (j + n - i - 1).flatten()  # L*L
    values = matrix.flatten()
    seen = ~values.isnan()  # cells without trials do not count
    sums = torch.zeros(2 * n - 1, dtype=matrix.dtype, device=matrix.device).index_add_(0, delay[seen], values[seen])
    return sums / torch.bincount(delay[seen], minlength=2 * n - 1).to(matrix.dtype)


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


def expected_contiguity_hits(cells: torch.Tensor, matrix: torch.Tensor) -> torch.Tensor:
    """Contiguity hits expected by lag if every query were answered at the accuracy of its own cell.

    cells: (L, L, L) eligible old queries by (previous study position s', study position s, query position q)
    (``StudyQueryAccuracy.contiguity_cells``); matrix: (L, L) study x query accuracy (NaN where a cell has no trials,
    which then has no eligible queries either). Returns (2L - 1,) float64 at index d + L - 1:
    expected[d] = Σ_{s - s' = d} Σ_q cells[s', s, q] · matrix[s, q].
    """
    n = matrix.shape[0]
    if cells.shape != (n, n, n):
        raise ValueError(f"contiguity cells {tuple(cells.shape)} must have shape (L, L, L) = {(n, n, n)}")
    accuracy = matrix.double().nan_to_num(0.0)  # L L
    # One s' at a time: an L x L float64 temporary, not an L³ one (L = 256: 0.5 MB rather than 134 MB).
    by_pair = torch.stack([(cells[p].double() * accuracy).sum(-1) for p in range(n)])  # L L: (s', s)
    positions = torch.arange(n, device=matrix.device)
    previous, study = torch.meshgrid(positions, positions, indexing="ij")  # L L each
    index = (study - previous + n - 1).flatten()  # lag d -> index d + L - 1
    return torch.zeros(2 * n - 1, dtype=torch.float64, device=matrix.device).index_add_(0, index, by_pair.flatten())


def controlled_contiguity_curve(hits: torch.Tensor, expected: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """Recognition contiguity controlled for serial and query position: by lag, the mean over eligible queries of
    hit - accuracy of the query's own (study, query) cell, i.e. (hits - expected) / counts.

    hits, counts: (2L - 1,) ``contiguity_hits`` and ``contiguity_counts``; expected: (2L - 1,) from
    ``expected_contiguity_hits``. Returns (2L - 1,) float64, NaN where a lag has no queries. A model without contiguity
    (hit probability a function of the cell alone) gives zero at every lag, up to sampling noise.
    """
    return (hits.double() - expected.double()) / counts.double()


def quarter(n_items: int) -> int:
    """q = max(1, L // 4): how many positions make the early (first q) and late (last q) blocks of every index."""
    return max(1, n_items // 4)


def position_indices(curve: torch.Tensor) -> dict[str, float]:
    """primacy_index, recency_index and early_minus_late of a serial-position curve (L,).

    With q = max(1, L // 4): early = mean of the first q, late = mean of the last q, middle = mean of
    positions [q, L - q) (NaN when L < 3, which has no middle).
    """
    n = curve.shape[0]
    q = quarter(n)
    early, late = curve[:q].mean(), curve[n - q :].mean()
    middle = curve[q : n - q].mean() if n - 2 * q > 0 else torch.tensor(float("nan"))
    return {
        "primacy_index": float(early - middle),
        "recency_index": float(late - middle),
        "early_minus_late": float(early - late),
    }


def _contiguity(hits: torch.Tensor | None, counts: torch.Tensor | None, expected: torch.Tensor | None,
                n_items: int) -> dict[str, torch.Tensor]:
    if (hits is None) != (counts is None):
        raise ValueError("contiguity_hits and contiguity_counts go together: pass both or neither")
    if hits is None:
        if expected is not None:
            raise ValueError("contiguity_expected needs contiguity_hits and contiguity_counts: pass them too")
        return {}
    if hits.shape != (2 * n_items - 1,):
        raise ValueError(
            f"contiguity_hits has shape {tuple(hits.shape)}: L={n_items} study positions need ({2 * n_items - 1},)"
        )
    lags, accuracy = contiguity_curve(hits, counts)
    out = {"contiguity_curve": accuracy, "contiguity_lags": lags}
    if expected is not None:
        if expected.shape != hits.shape:
            raise ValueError(f"contiguity_expected has shape {tuple(expected.shape)}: it must match contiguity_hits "
                             f"{tuple(hits.shape)}")
        out["controlled_contiguity_curve"] = controlled_contiguity_curve(hits, expected, counts)
    return out


def early_query_decay(matrix: torch.Tensor) -> float:
    """How much the first q study items are forgotten over query time (Morita: "minimal decay" for them): their mean
    accuracy at the first q query positions minus at the last q (q = max(1, L // 4); matrix (L, L), study x query,
    NaN cells skipped; NaN when either block has no trials). 0 is no decay; positive, worse when queried later."""
    q = quarter(matrix.shape[0])
    return float(matrix[:q, :q].nanmean() - matrix[:q, -q:].nanmean())


def summarize(
    hits: torch.Tensor,
    counts: torch.Tensor,
    distractor_hits: torch.Tensor,
    distractor_counts: torch.Tensor,
    contiguity_hits: torch.Tensor | None = None,
    contiguity_counts: torch.Tensor | None = None,
    contiguity_expected: torch.Tensor | None = None,
    delays: torch.Tensor | None = None,
    delay_hits: torch.Tensor | None = None,
    delay_counts: torch.Tensor | None = None,
) -> dict[str, torch.Tensor | float]:
    """Accuracy matrix, curves and indices from summed trial counts.

    hits, counts: (L, L) correct "old" answers and trials by study x query position; distractor_hits,
    distractor_counts: (L,) correct "new" answers and trials by query position. Cells without trials are NaN.
    contiguity_hits, contiguity_counts: (2L - 1,) by recognition-contiguity lag; with them the dict also has
    ``contiguity_curve`` and ``contiguity_lags``; without them (results written before they existed) it has not.
    contiguity_expected: (2L - 1,) (``expected_contiguity_hits``); with it the dict also has
    ``controlled_contiguity_curve``, the curve to read (results written before it existed lack it).
    delays (D,), delay_hits, delay_counts (D, L): answers about each study position by the trial's delay (tasks with
    a delay); with them the dict also has ``serial_position_by_delay`` (D, L, pooled over query positions) and
    ``early_minus_late_by_delay`` (D,).
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
        "delay_curve": delay_curve(matrix),
        "overall_accuracy": float((hits.sum() + distractor_hits.sum()) / total),
        "target_accuracy": float(hits.sum() / counts.sum()),
        "distractor_accuracy": float(distractor_hits.sum() / distractor_counts.sum()),
        **position_indices(curve),
        "early_query_decay": early_query_decay(matrix),
        **_contiguity(contiguity_hits, contiguity_counts, contiguity_expected, hits.shape[0]),
        **_by_delay(delays, delay_hits, delay_counts, hits.shape[0]),
    }


def _by_delay(delays: torch.Tensor | None, hits: torch.Tensor | None, counts: torch.Tensor | None,
              n_items: int) -> dict[str, torch.Tensor]:
    given = [x is not None for x in (delays, hits, counts)]
    if not any(given):
        return {}
    if not all(given):
        raise ValueError("delays, delay_hits and delay_counts go together: pass all three or none")
    if hits.shape != (len(delays), n_items) or counts.shape != hits.shape:
        raise ValueError(f"delay_hits {tuple(hits.shape)} and delay_counts {tuple(counts.shape)} must have shape "
                         f"(delays, L) = {(len(delays), n_items)}")
    curves = hits.double() / counts.double()  # D L
    return {"serial_position_by_delay": curves,
            "early_minus_late_by_delay": torch.tensor([position_indices(c)["early_minus_late"] for c in curves],
                                                      dtype=torch.float64)}
