"""Free-recall analyses of a model's output sequences: serial-position curve (spc), probability of first recall (pfr),
lag-CRP, and intrusion and repetition rates, counted in torch for a whole batch at once.

Free recall: a list of L items is studied, then items are output in any order. Each analysis returns sufficient
statistics that add up over lists (so metric states with ``dist_reduce_fx="sum"`` accumulate them exactly across
batches and processes); ``summarize`` turns the sums into curves. The scoring follows psifr (Morton), which the tests
use as an oracle:

* An output is *correct* if it is in the list's study and was not output before; an *intrusion* is not in the
  study (said again, it is still an intrusion, where psifr's ``repeat`` column also counts it); a *repetition* is a
  studied item already output earlier in the list.
* spc[i]: the fraction of lists in which study position i was output at least once.
* pfr[i]: among lists with at least one correct output, the fraction whose first correct output is position i.
  Intrusions before it are skipped, and lists without a correct output leave the denominator (psifr's ``pnr`` at
  output 1), so the denominator is ``first_recall_counts(...).sum()``.
* lag-CRP[k]: over transitions between two consecutive outputs that are both correct, the number of times the lag
  (study position of the second minus that of the first) was k, divided by the number of times lag k was possible:
  lag k is possible when the item at study position (first + k) has not been output yet, including the first
  output itself, so lag 0 is never possible. A transition into or out of an intrusion or a repetition does not count
  (the next one starts after it), but items output before still leave the pool of possible ones (psifr's
  ``lag_crp`` defaults).

``primacy.analysis.behaviour.cmr.fits.fit_free_recall`` fits the lag-CRP with CMR, as a head's is fitted; it lives
there so that training, which counts, never imports the fitter.

Shapes: B lists, L study positions, R output steps. Positions are 0-based here; ``long_format_rows`` exports 1-based
positions, as psifr and the free-recall literature use.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch

from primacy.errors import UsageError

PADDING = -1  # in `recalls`: the model had stopped
PSIFR_COLUMNS = ("subject", "list", "trial_type", "position", "item")  # psifr's long format; other columns are ignored
LONG_FORMAT_COLUMNS = (*PSIFR_COLUMNS, "study_position")  # what ``long_format_rows`` writes
INTRUSION_POSITION = -1  # in `positions`: an output that is not in the list's study
PADDING_POSITION = -2  # in `positions`: no output


def _check_ids(name: str, ids: torch.Tensor) -> None:
    if ids.ndim != 2 or ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
        raise UsageError(f"{name} has shape {tuple(ids.shape)} and dtype {ids.dtype}: it must be an integer "
                         f"tensor of shape (lists, steps)")
    if ids.shape[0] == 0 or ids.shape[1] == 0:
        raise UsageError(f"{name} has shape {tuple(ids.shape)}: it needs at least one list and one step")


def _check_trailing_padding(name: str, is_padding: torch.Tensor) -> None:
    late = is_padding.cummax(dim=1).values & ~is_padding  # B R: an output after the model had stopped
    if late.any():
        b, r = (int(x) for x in late.nonzero()[0])
        raise UsageError(f"{name}[{b}] has an output at step {r} after padding: padding must only end a sequence")


def recall_positions(study: torch.Tensor, recalls: torch.Tensor) -> torch.Tensor:
    """The 0-based study position of each output: -1 for an intrusion, -2 for padding.

    study: (B, L) studied item ids (>= 0, distinct within a list); recalls: (B, R) output item ids in output order,
    padded at the end with -1. Returns (B, R) int64. E.g. study [[5, 6, 7]], recalls [[7, 9, 7, 5, -1]] give
    [[2, -1, 2, 0, -2]] (9 is an intrusion; the second 7 a repetition, which keeps its position).
    """
    _check_ids("study", study)
    _check_ids("recalls", recalls)
    if study.shape[0] != recalls.shape[0]:
        raise UsageError(f"study has {study.shape[0]} lists and recalls {recalls.shape[0]}: they must match")
    if (study < 0).any():
        raise UsageError(f"study has id {int(study.min())}: study ids must be >= 0 (-1 pads recalls)")
    if (recalls < PADDING).any():
        raise UsageError(f"recalls has id {int(recalls.min())}: ids must be >= 0, or -1 for padding")
    ordered = study.sort(dim=1).values  # B L
    repeated = (ordered[:, 1:] == ordered[:, :-1]).any(dim=1)  # B
    if repeated.any():
        b = int(repeated.nonzero()[0])
        raise UsageError(f"study[{b}] = {study[b].tolist()} repeats an item: study items must be distinct in a list")
    is_padding = recalls == PADDING  # B R
    _check_trailing_padding("recalls", is_padding)
    match = recalls[:, :, None] == study[:, None, :]  # B R L
    positions = match.to(torch.uint8).argmax(dim=2)  # B R: the matching position, 0 if none
    positions = torch.where(match.any(dim=2), positions, INTRUSION_POSITION)
    return torch.where(is_padding, PADDING_POSITION, positions)


class _Outputs(NamedTuple):
    onehot: torch.Tensor  # B R L: output r is study position l
    correct: torch.Tensor  # B R: studied and not output before
    repetition: torch.Tensor  # B R: studied and output before
    intrusion: torch.Tensor  # B R
    padding: torch.Tensor  # B R
    seen: torch.Tensor  # B R L: study position l output at a step <= r


def _outputs(positions: torch.Tensor, n_items: int) -> _Outputs:
    """Scores every output of ``positions`` (B, R) from ``recall_positions``, after checking it."""
    if not isinstance(n_items, int) or isinstance(n_items, bool) or n_items < 1:
        raise UsageError(f"n_items={n_items!r}: it must be an int >= 1 (the list length L)")
    _check_ids("positions", positions)
    low, high = int(positions.min()), int(positions.max())
    if low < PADDING_POSITION or high >= n_items:
        raise UsageError(f"positions range over [{low}, {high}]: with n_items={n_items} they must lie in "
                         f"[-2, {n_items - 1}] (-1 intrusion, -2 padding)")
    padding = positions == PADDING_POSITION  # B R
    _check_trailing_padding("positions", padding)
    onehot = positions[:, :, None] == torch.arange(n_items, device=positions.device)  # B R L
    seen = onehot.to(torch.int32).cumsum(dim=1)  # B R L: times output at steps <= r
    times = seen.gather(2, positions.clamp(min=0)[:, :, None]).squeeze(2)  # B R: of this output's item, so far
    studied = positions >= 0  # B R
    return _Outputs(onehot, studied & (times == 1), studied & (times > 1), positions == INTRUSION_POSITION,
                    padding, seen > 0)


def spc_counts(positions: torch.Tensor, n_items: int) -> torch.Tensor:
    """(L,) int64: the number of lists in which study position i was output at least once (repetitions count once).
    spc = counts / number of lists. positions: (B, R) from ``recall_positions``; n_items: L."""
    return _outputs(positions, n_items).onehot.any(dim=1).sum(dim=0)


def first_recall_counts(positions: torch.Tensor, n_items: int) -> torch.Tensor:
    """(L,) int64: the number of lists whose first correct output is study position i. Intrusions before it are
    skipped; a list without a correct output (empty, or only intrusions) adds nothing. pfr = counts / counts.sum(),
    as psifr's ``pnr`` at output 1 (its denominator is the lists with a correct output, not all lists)."""
    scored = _outputs(positions, n_items)
    first = scored.correct.to(torch.uint8).argmax(dim=1)  # B: the first correct step (0 if none)
    position = positions.gather(1, first[:, None]).squeeze(1)  # B
    return torch.bincount(position[scored.correct.any(dim=1)], minlength=n_items)


def lag_crp_counts(positions: torch.Tensor, n_items: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Actual and possible transitions by lag: two (2L - 1,) int64 tensors, index k + L - 1 for lag k in
    -(L - 1)..(L - 1). A transition is a pair of consecutive outputs that are both correct; it adds 1 to its actual
    lag and 1 to the lag of each study position not output at or before its first step (the module docstring has
    the rules). lag-CRP = actual / possible; lag 0 is always 0 / 0."""
    scored = _outputs(positions, n_items)
    transition = scored.correct[:, :-1] & scored.correct[:, 1:]  # B R-1: output r -> r + 1
    start = positions[:, :-1]  # B R-1
    actual = (positions[:, 1:] - start + n_items - 1)[transition]  # T: lag index
    available = ~scored.seen[:, :-1] & transition[:, :, None]  # B R-1 L: possible next study positions
    lag = torch.arange(n_items, device=positions.device) - start[:, :, None] + n_items - 1  # B R-1 L
    return (torch.bincount(actual, minlength=2 * n_items - 1),
            torch.bincount(lag[available], minlength=2 * n_items - 1))


class OutputCounts(NamedTuple):
    """Output tallies summed over lists (0-d int64 tensors): every output is one of correct, intrusion or
    repetition, so outputs = correct + intrusions + repetitions."""

    outputs: torch.Tensor  # non-padding outputs
    correct: torch.Tensor  # distinct studied items output: the number recalled, summed over lists
    intrusions: torch.Tensor
    repetitions: torch.Tensor


def output_counts(positions: torch.Tensor, n_items: int) -> OutputCounts:
    """Outputs, correct distinct recalls, intrusions and repetitions, each summed over the lists of ``positions``
    (B, R). Intrusion rate = intrusions / outputs; mean number recalled = correct / lists."""
    scored = _outputs(positions, n_items)
    return OutputCounts((~scored.padding).sum(), scored.correct.sum(), scored.intrusion.sum(),
                        scored.repetition.sum())


class FreeRecallCounts(NamedTuple):
    """Every free-recall sufficient statistic, int64 and summed over lists: add two field by field to pool batches."""

    lists: torch.Tensor  # 0-d
    spc: torch.Tensor  # L
    first_recall: torch.Tensor  # L
    lag_actual: torch.Tensor  # 2L - 1
    lag_possible: torch.Tensor  # 2L - 1
    outputs: torch.Tensor  # 0-d, and the three below (OutputCounts)
    correct: torch.Tensor
    intrusions: torch.Tensor
    repetitions: torch.Tensor


def free_recall_counts(positions: torch.Tensor, n_items: int) -> FreeRecallCounts:
    """All the counts of ``positions`` (B, R) from ``recall_positions`` with list length ``n_items``."""
    lists = torch.tensor(positions.shape[0], dtype=torch.int64, device=positions.device)
    return FreeRecallCounts(lists, spc_counts(positions, n_items), first_recall_counts(positions, n_items),
                            *lag_crp_counts(positions, n_items), *output_counts(positions, n_items))


@dataclass(frozen=True)
class FreeRecallCurves:
    """Curves and rates from summed counts, float64, NaN where a denominator is 0."""

    spc: torch.Tensor  # L: by 0-based study position
    pfr: torch.Tensor  # L
    lags: torch.Tensor  # 2L - 1: int64, -(L - 1)..(L - 1)
    lag_crp: torch.Tensor  # 2L - 1: NaN at lag 0
    intrusion_rate: float  # intrusions / outputs
    repetition_rate: float  # repetitions / outputs
    mean_recalled: float  # correct distinct outputs per list


def summarize(counts: FreeRecallCounts) -> FreeRecallCurves:
    """Turn summed ``FreeRecallCounts`` into curves (the module docstring defines them)."""
    c = FreeRecallCounts(*(x.double() for x in counts))
    n = c.spc.shape[0]
    return FreeRecallCurves(
        spc=c.spc / c.lists,
        pfr=c.first_recall / c.first_recall.sum(),
        lags=torch.arange(-(n - 1), n, device=c.spc.device),
        lag_crp=c.lag_actual / c.lag_possible,
        intrusion_rate=float(c.intrusions / c.outputs),
        repetition_rate=float(c.repetitions / c.outputs),
        mean_recalled=float(c.correct / c.lists),
    )


def long_format_rows(study: torch.Tensor, recalls: torch.Tensor, subject: int | str,
                     list_offset: int = 0) -> list[dict]:
    """The lists as rows of the long format psifr's ``fr.merge_free_recall`` reads as they are: columns
    ``LONG_FORMAT_COLUMNS``, subject, list, trial_type ('study' | 'recall'), position, item, study_position.

    One row per study event and per output (padding omitted). ``position`` is 1-BASED, as in psifr and the
    free-recall literature (the package's tensors are 0-based): the study position of a study event, the output
    position of a recall event. ``study_position`` is the 1-based study position an output matched (repetitions
    included), None for intrusions and for study rows; psifr ignores it unless asked
    (``fr.merge_free_recall(df, recall_keys=["study_position"])``, where it equals psifr's ``input``). ``list`` is
    ``list_offset + b + 1`` for list b; items are ints. study: (B, L); recalls: (B, R), as in ``recall_positions``.
    """
    positions = recall_positions(study, recalls).tolist()  # checks the input too
    rows = []
    for b, (items, outputs, matched) in enumerate(zip(study.tolist(), recalls.tolist(), positions)):
        base = {"subject": subject, "list": list_offset + b + 1}
        rows += [{**base, "trial_type": "study", "position": i + 1, "item": item, "study_position": None}
                 for i, item in enumerate(items)]
        rows += [{**base, "trial_type": "recall", "position": r + 1, "item": item,
                  "study_position": p + 1 if p >= 0 else None}
                 for r, (item, p) in enumerate(zip(outputs, matched)) if p != PADDING_POSITION]
    return rows
