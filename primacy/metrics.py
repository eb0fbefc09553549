"""torchmetrics for the list tasks: the study x query accuracy matrix (with the serial-position curve by delay when a
task varies it), the free-recall counts of a model's recall sequences, and per-token-group next-token accuracy; states
are sums (or, for the recall sequences themselves, concatenations) across processes."""

from __future__ import annotations

import torch
from torchmetrics import Metric

from primacy.analysis.behaviour.free_recall import FreeRecallCounts, free_recall_counts, recall_positions
from primacy.analysis.behaviour.serial_position import expected_contiguity_hits, summarize
from primacy.checks import fits_in_memory, positive
from primacy.errors import UsageError


def contiguity_pairs(study_pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Pair each old query with the most recent earlier old query of its trial.

    study_pos: (B, L), the study position each query asks for, -1 for a distractor. Returns ``eligible``
    (B, L) bool, true for an old query k that has an old query k' < k before it, and ``lag`` (B, L) int64,
    d = study_pos[k] - study_pos[k'] with k' the latest such query (0 where not eligible). Distractors in
    between are skipped: they ask for no studied item.

    Example: study_pos = [2, -1, 3, 0] gives eligible = [F, F, T, T] and lag = [0, 0, +1, -3].
    """
    n = study_pos.shape[-1]
    old = study_pos >= 0  # B L
    index = torch.arange(n, device=study_pos.device).expand_as(study_pos)  # B L
    latest_old = torch.where(old, index, -1).cummax(dim=-1).values  # B L: last old query at or before k
    previous = torch.cat([torch.full_like(latest_old[..., :1], -1), latest_old[..., :-1]], dim=-1)  # B L: before k
    eligible = old & (previous >= 0)  # B L
    previous_pos = study_pos.gather(-1, previous.clamp(min=0))  # B L
    return eligible, torch.where(eligible, study_pos - previous_pos, 0)


def old_new_correct(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Whether each old/new answer is right: a logit > 0 answers "old" (target 1). (B, L) each -> (B, L) bool."""
    return (logits > 0) == targets.bool()


class StudyQueryAccuracy(Metric):
    """Accumulates correct answers by (study position, query position) for queries about a studied item, by query
    position for the others (verification's distractors, associative recall's unseen keys), and by
    recognition-contiguity lag. States are sums, so results are exact across batches and processes.

    update(correct (B, L) bool, study_pos (B, L) with -1 for a query about no studied item, delay (B,) or None):
    whether each of a trial's L answers was right (an "old"/"new" decision, a recalled token), whatever the task.

    With ``delays`` (a task that puts a delay between study and queries, e.g. reconstruction), every update gives
    each trial's delay, one of ``delays``, and ``delay_hits[k, s]`` / ``delay_counts[k, s]`` count the answers about
    study position s at delay ``delays[k]``: the serial-position curve by delay.

    Recognition contiguity (the recognition analogue of free recall's lag-CRP): every old query k that has
    an earlier old query in its trial is paired with the most recent one, k'; its lag is
    d = study_pos[k] - study_pos[k'] in [-(L - 1), L - 1]. ``contiguity_hits[d + L - 1]`` counts correct
    "old" answers to such queries k and ``contiguity_counts[d + L - 1]`` the queries. Distractors between
    k' and k are skipped, because a lure retrieves no study context: in the ``uniform`` test condition the
    pairs are adjacent queries (k' = k - 1); in ``half``, where every other query is a distractor, they are
    k' = k - 2 with one lure between. The accuracy on k' does not matter.

    That raw curve is confounded with position at every lag: d < 0 pairs an early study position s with a
    later s', so a model with primacy and no contiguity at all scores higher at negative lags. The control:
    ``contiguity_cells[s', s, q]`` counts the eligible queries by previous study position s', study position s
    and query position q (L³ int32, never written to result files), and compute() derives
    ``contiguity_expected[d + L - 1]`` = Σ over those queries with lag d of the final accuracy of their own cell
    (s, q) (float64). The controlled curve (hits - expected) / counts is then zero at every lag, up to sampling
    noise, for any model whose hit probability depends only on (s, q); what remains is contiguity. The cell
    accuracies include that contiguity too, so an effect at some lags also shows, scaled by those lags' share of
    the cells' queries, as a small dip at the others (at L = 32, +0.2 at |d| = 1 reads as about +0.19 there and
    -0.012 elsewhere).
    """

    result_kind = "StudyQueryResults"  # what a test writes of it: primacy.rundir.kinds.StudyQueryResults
    full_state_update = False
    is_differentiable = False
    higher_is_better = True

    def __init__(self, n_items: int, delays: list[int] | None = None) -> None:
        super().__init__()
        positive(n_items=n_items)
        if delays is not None and (not delays or sorted(set(delays)) != list(delays) or min(delays) < 0):
            raise UsageError(f"delays={delays} is invalid: give distinct delays >= 0 in increasing order (or null)")
        self.n_items = n_items
        self.delays = None if delays is None else torch.tensor(delays, dtype=torch.long)
        if delays is not None:
            self.add_state("delay_hits", torch.zeros(len(delays), n_items, dtype=torch.long), dist_reduce_fx="sum")
            self.add_state("delay_counts", torch.zeros(len(delays), n_items, dtype=torch.long), dist_reduce_fx="sum")
        self.add_state("hits", torch.zeros(n_items, n_items, dtype=torch.long), dist_reduce_fx="sum")
        self.add_state("counts", torch.zeros(n_items, n_items, dtype=torch.long), dist_reduce_fx="sum")
        self.add_state("distractor_hits", torch.zeros(n_items, dtype=torch.long), dist_reduce_fx="sum")
        self.add_state("distractor_counts", torch.zeros(n_items, dtype=torch.long), dist_reduce_fx="sum")
        self.add_state("contiguity_hits", torch.zeros(2 * n_items - 1, dtype=torch.long), dist_reduce_fx="sum")
        self.add_state("contiguity_counts", torch.zeros(2 * n_items - 1, dtype=torch.long), dist_reduce_fx="sum")
        fits_in_memory("the recognition-contiguity cell counts", 4 * n_items**3, n_items=n_items)
        # int32: half the memory of int64 at L = 256 (67 MB); a sync or merge sums it to int64 (torch.sum promotes).
        self.add_state("contiguity_cells", torch.zeros(n_items, n_items, n_items, dtype=torch.int32),
                       dist_reduce_fx="sum")

    def update(self, correct: torch.Tensor, study_pos: torch.Tensor, delay: torch.Tensor | None = None) -> None:
        if correct.shape[-1] != self.n_items:
            raise ValueError(f"{type(self).__name__}(n_items={self.n_items}) got {correct.shape[-1]} queries per trial")
        delay_index = self._delay_index(delay)  # checked before any state changes
        n = self.n_items
        correct = correct.long()  # B L
        query_pos = torch.arange(n, device=correct.device).expand_as(study_pos)  # B L
        old = study_pos >= 0  # B L
        cell = (study_pos * n + query_pos)[old]  # flat (study, query) index of each old query
        self.hits += torch.bincount(cell, weights=correct[old], minlength=n * n).long().view(n, n)
        self.counts += torch.bincount(cell, minlength=n * n).view(n, n)
        self.distractor_hits += torch.bincount(query_pos[~old], weights=correct[~old], minlength=n).long()
        self.distractor_counts += torch.bincount(query_pos[~old], minlength=n)
        eligible, lag = contiguity_pairs(study_pos)  # B L
        lag_index = (lag + n - 1)[eligible]  # lag d -> index d + L - 1
        self.contiguity_hits += torch.bincount(lag_index, weights=correct[eligible], minlength=2 * n - 1).long()
        self.contiguity_counts += torch.bincount(lag_index, minlength=2 * n - 1)
        previous_pos = study_pos - lag  # B L: s' = s - d
        cell = ((previous_pos * n + study_pos) * n + query_pos)[eligible]  # flat (s', s, q) index
        cells = self.contiguity_cells.view(-1)  # a view: index_add_ writes into the state
        cells.index_add_(0, cell, torch.ones_like(cell, dtype=cells.dtype))  # no L³ temporary per batch
        if delay_index is not None:
            n = self.n_items
            cell = (delay_index[:, None] * n + study_pos)[old]  # flat (delay, study position) index
            size = len(self.delays) * n
            self.delay_hits += torch.bincount(cell, weights=correct[old], minlength=size).long().view(-1, n)
            self.delay_counts += torch.bincount(cell, minlength=size).view(-1, n)

    def _delay_index(self, delay: torch.Tensor | None) -> torch.Tensor | None:
        """Each trial's index into ``delays`` (B,); a trial without a delay when the metric counts them, or with a
        delay it does not count, is a ValueError."""
        if (delay is None) != (self.delays is None):
            expected = "no delay" if self.delays is None else f"a delay in {self.delays.tolist()}"
            raise ValueError(f"{type(self).__name__} expects {expected} per trial, got "
                             f"{'none' if delay is None else 'delays'}: a model's delays come from its task")
        if delay is None:
            return None
        delays = self.delays.to(delay.device)
        index = torch.searchsorted(delays, delay).clamp(max=len(delays) - 1)  # B
        if not bool((delays[index] == delay).all()):
            unknown = sorted(set(delay.tolist()) - set(delays.tolist()))
            raise ValueError(f"{type(self).__name__} got delays {unknown}: it counts only {delays.tolist()}")
        return index

    def compute(self) -> dict[str, torch.Tensor | float]:
        """``summarize``'s dict plus the summed states (hits, counts, distractor_hits, distractor_counts,
        contiguity_hits, contiguity_counts; with delays also delays, delay_hits and delay_counts) and
        ``contiguity_expected`` (2L - 1,) float64, derived from ``contiguity_cells`` and the accuracy matrix."""
        expected = expected_contiguity_hits(self.contiguity_cells, self.hits.double() / self.counts.double())  # 2L-1
        states = {"hits": self.hits, "counts": self.counts,
                  "distractor_hits": self.distractor_hits, "distractor_counts": self.distractor_counts,
                  "contiguity_hits": self.contiguity_hits, "contiguity_counts": self.contiguity_counts,
                  "contiguity_expected": expected}
        if self.delays is not None:
            states.update(delays=self.delays, delay_hits=self.delay_hits, delay_counts=self.delay_counts)
        return {**summarize(**states), **states}


class TokenGroupMetrics(Metric):
    """Per-token loss and accuracy of next-token prediction, summed by token group (for the induction task:
    ``repeat`` tokens, predictable only by copying from context, and the ``other`` ones). States are sums (the
    losses in float64), so results equal the single-process ones on any number of processes.

    update(loss (B, T) per-token cross-entropy, correct (B, T) bool, group (B, T) int64 index into ``groups``,
    -1 for tokens that are not scored). compute() gives ``{group}_loss``, ``{group}_accuracy`` (NaN for a group
    without tokens) and ``{group}_tokens`` for every group.
    """

    result_kind = "LoggedResults"  # what a test writes of it: primacy.rundir.kinds.LoggedResults
    full_state_update = False
    is_differentiable = False

    def __init__(self, groups: tuple[str, ...]) -> None:
        super().__init__()
        if not groups:
            raise UsageError("groups=() is invalid: name at least one token group")
        self.groups = tuple(groups)
        n = len(self.groups)
        self.add_state("loss_sum", torch.zeros(n, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("correct", torch.zeros(n, dtype=torch.long), dist_reduce_fx="sum")
        self.add_state("tokens", torch.zeros(n, dtype=torch.long), dist_reduce_fx="sum")

    def update(self, loss: torch.Tensor, correct: torch.Tensor, group: torch.Tensor) -> None:
        n = len(self.groups)
        scored = group >= 0  # B T
        index = group[scored]
        self.loss_sum += torch.bincount(index, weights=loss[scored].double(), minlength=n)
        self.correct += torch.bincount(index, weights=correct[scored].double(), minlength=n).long()
        self.tokens += torch.bincount(index, minlength=n)

    def compute(self) -> dict[str, torch.Tensor]:
        result = {}
        for i, name in enumerate(self.groups):
            tokens = self.tokens[i].double()
            result[f"{name}_loss"] = self.loss_sum[i] / tokens
            result[f"{name}_accuracy"] = self.correct[i] / tokens
            result[f"{name}_tokens"] = self.tokens[i]
        return result


# the orders a free-recall model is teacher-forced on at evaluation: the task's random one and its own greedy one
FORCED_ORDERS = ("task_order", "own_order")


class FreeRecallStats(Metric):
    """The free-recall counts of recall sequences (``primacy.analysis.behaviour.free_recall.FreeRecallCounts``: lists,
    spc, first recall, lag-CRP actual and possible, outputs, correct, intrusions, repetitions), summed, so the curves
    equal the single-process ones on any number of processes. It also keeps the sequences themselves (study items,
    outputs and each list's index in the evaluation design), gathered from every process, for the long-format export.

    update(study (B, L) item ids, recalls (B, R) output ids padded with -1 after the model stopped, index (B,) the
    lists' indices in the design). compute() gives ``(counts, study (N, L), recalls (N, R))``, the lists ordered by
    index: the same whatever the number of processes.

    update_forced(task_order (B, S) bool, own_order (B, S) bool) counts the steps of teacher-forced recall whose most
    probable token is a right answer, fed the task's order and the model's own; ``forced_accuracy()`` gives their
    shares.
    """

    result_kind = "FreeRecallResults"  # what a test writes of it: primacy.rundir.kinds.FreeRecallResults
    full_state_update = False
    is_differentiable = False

    def __init__(self, n_items: int) -> None:
        super().__init__()
        positive(n_items=n_items)
        self.n_items = n_items
        lags = 2 * n_items - 1
        sizes = {"lists": (), "spc": (n_items,), "first_recall": (n_items,), "lag_actual": (lags,),
                 "lag_possible": (lags,), "outputs": (), "correct": (), "intrusions": (), "repetitions": ()}
        assert tuple(sizes) == FreeRecallCounts._fields
        for name, shape in sizes.items():
            self.add_state(name, torch.zeros(shape, dtype=torch.long), dist_reduce_fx="sum")
        for name in ("study", "recalls", "index"):
            self.add_state(name, [], dist_reduce_fx="cat")
        self.add_state("forced_right", torch.zeros(len(FORCED_ORDERS), dtype=torch.long), dist_reduce_fx="sum")
        self.add_state("forced_steps", torch.zeros((), dtype=torch.long), dist_reduce_fx="sum")

    def update(self, study: torch.Tensor, recalls: torch.Tensor, index: torch.Tensor) -> None:
        counts = free_recall_counts(recall_positions(study, recalls), self.n_items)
        for name, value in zip(FreeRecallCounts._fields, counts):
            setattr(self, name, getattr(self, name) + value)
        self.study.append(study)
        self.recalls.append(recalls)
        self.index.append(index)

    def update_forced(self, task_order: torch.Tensor, own_order: torch.Tensor) -> None:
        if task_order.shape != own_order.shape:
            raise UsageError(f"update_forced got task_order {tuple(task_order.shape)} and own_order "
                             f"{tuple(own_order.shape)}: both must be (lists, steps)")
        self.forced_right = self.forced_right + torch.stack([task_order.sum(), own_order.sum()])
        self.forced_steps = self.forced_steps + task_order.numel()

    def forced_accuracy(self) -> dict[str, float] | None:
        """The share of teacher-forced steps answered right, fed each order (FORCED_ORDERS); None if none were."""
        with self.sync_context(dist_sync_fn=self.dist_sync_fn):  # every process's counts (compute() unsyncs after)
            steps, right = int(self.forced_steps), self.forced_right.tolist()
        if steps == 0:
            return None
        return {name: count / steps for name, count in zip(FORCED_ORDERS, right)}

    def compute(self) -> tuple[FreeRecallCounts, torch.Tensor, torch.Tensor]:
        counts = FreeRecallCounts(*(getattr(self, name) for name in FreeRecallCounts._fields))
        study, recalls, index = (torch.cat(x) if isinstance(x, list) else x  # a list until synced across processes
                                 for x in (self.study, self.recalls, self.index))
        order = index.argsort()
        return counts, study[order], recalls[order]
