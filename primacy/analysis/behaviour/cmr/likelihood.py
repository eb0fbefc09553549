"""The likelihood of whole free-recall sequences under CMR as cymr computes it (Morton & Polyn 2016; cymr 0.14's
``CMR.likelihood`` with ``config_loc_cmr``'s localist items and its default options): ``cmr_log_likelihood``, per list
``cmr_list_log_likelihoods``, for many parameter sets at once ``cmr_log_likelihoods`` (what a population-based fit
evaluates), and the choice probabilities behind them, ``cmr_choice_probabilities``.

A list studies L items, item i at serial position i. Context has one unit per item and a start unit d_0 (item i's
unit is d_(i+1)); every vector below has these L + 1 entries. Pre-experimental weights, item i -> context and
context -> item:

    M_FC_pre[i] = Afc · Σ_k d_(k+1) + Dfc · d_(i+1),   M_CF_pre[i] = Acf · Σ_k d_(k+1) + Dcf · d_(i+1)

(A on every item unit, the start unit left out; the start item maps to d_0 only). Context drifts towards a unit
input c_IN as c ← ρ c + β c_IN with ρ = sqrt(1 + β²((c·c_IN)² - 1)) - β c·c_IN, which keeps |c| = 1.

Study: c = d_0; for i = 0..L-1, c_IN = normalise(M_FC_pre[i]) (0 if that row is 0), c ← drift with β = B_enc, then
item i learns the context that *includes* it: M_FC_exp[i] = Lfc · c_i, M_CF_exp[i] = (Lcf + P1 e^(-P2 i)) · c_i
(cymr's primacy gradient adds to Lcf; it does not scale it). After the list, c ← drift towards d_0 with β = B_start.

Recall, output position r = 0, 1, ... with the items already recalled set aside (sampling without replacement):

    a_j = max(M_CF[j] · c, 10⁻⁶),  P(item j) = (1 - p_stop(r)) · e^(2 a_j / T) / Σ_(k not recalled) e^(2 a_k / T)
    p_stop(r) = min(max(X1 · e^(X2 r), 10⁻⁶), 1 - 10⁻⁶) for r < L,  p_stop(L) = 1

(cymr's choice rule has the factor 2; T below 10⁻⁶ counts as 10⁻⁶). The first recall is no different: it is cued by
the context after B_start. After recalling item j, c ← drift towards normalise(M_FC_pre[j] + M_FC_exp[j]) with
β = B_rec. The probability of a list is that of each recall and of the stop after the last one; each probability is
raised to 10⁻⁵ before its log is taken (cymr's floor, so an event the model all but rules out costs log 10⁻⁵, about
-11.5, no more). Where cymr's e^(2a/T) overflows (2a/T > 709), it returns NaN and this module the limit.

Intrusions and repetitions are dropped before the likelihood, as cymr's data preparation does (``prepare_lists``,
``clean=True``): the correct recalls keep their order, close up, and the list ends with a stop after the last one. So
the output position r counts correct recalls only, and an intrusion or a repetition costs nothing.

Every list studies the same way, so study runs once per parameter set; recall runs for all lists (and parameter
sets) at once, a loop over output positions only. Context itself is not kept during recall: the activations
a = M_CF c and the overlaps g = M_FC_in c with every item's unit recall input (M_FC_in[j] = normalise(M_FC[j])) change
linearly with each drift, a' = ρ a + β H[j] and g' = ρ g + β G[j], with H[j, k] = M_FC_in[j] · M_CF[k] and
G = M_FC_in M_FC_inᵀ, and ρ needs only c · c_IN = g[j] (``_Recall`` holds this state; ``generate`` drives it with
sampled recalls). Lists are taken in decreasing number of correct recalls, so that the lists still recalling at step r
are a prefix of the rows, and each step works on that prefix only.

Shapes: P parameter sets, B lists, N = B·P rows (list-major), M <= N the rows still recalling, R output steps,
S = the most correct recalls in a list + 1 (steps, the stop included), L study items, D = L + 1 context units.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import astuple, dataclass, fields
from typing import NamedTuple

import numpy as np
import numpy.typing as npt
import torch

from primacy.analysis.behaviour.free_recall import INTRUSION_POSITION, PADDING_POSITION, recall_positions
from primacy.errors import UsageError

MIN_ACTIVATION = 1e-6  # cymr's amin: the least support of an item; also the least temperature
MIN_STOP = 1e-6  # cymr's pmin: p_stop stays in [MIN_STOP, 1 - MIN_STOP] before all items are recalled
MIN_PROBABILITY = 1e-5  # cymr's floor on each event's probability before the log (written 10e-6 there)


@dataclass(frozen=True)
class CMRParameters:
    """CMR's parameters under cymr's names (a dict with exactly these keys is accepted wherever this is)."""

    B_enc: float = 0.6  # context drift rate at study
    B_start: float = 0.0  # drift back towards the start context before recall
    B_rec: float = 0.8  # context drift rate after each recall
    Afc: float = 0.0  # pre-experimental item -> context weight on every item unit
    Dfc: float = 0.85  # pre-experimental item -> own context unit weight
    Acf: float = 0.0  # pre-experimental context -> item weight from every item unit
    Dcf: float = 0.85  # pre-experimental own context unit -> item weight
    Lfc: float = 0.15  # item -> context learning rate
    Lcf: float = 0.15  # context -> item learning rate, before the primacy gradient
    P1: float = 2.0  # primacy gradient: extra context -> item learning of the first item
    P2: float = 1.0  # primacy gradient: its decay per serial position
    T: float = 0.1  # choice temperature
    X1: float = 0.001  # stop probability before the first recall
    X2: float = 0.5  # growth rate of the stop probability per output position

    @classmethod
    def of(cls, params: CMRParameters | Mapping[str, float]) -> CMRParameters:
        """``params`` itself, or a dict with cymr's names (every one of them, no others) as parameters; checked."""
        if not isinstance(params, CMRParameters):
            unknown = sorted(set(params) - set(PARAMETER_NAMES))
            missing = [n for n in PARAMETER_NAMES if n not in params]
            if unknown or missing:
                raise UsageError(f"params has unknown names {unknown} and lacks {missing}: give exactly "
                                 f"{', '.join(PARAMETER_NAMES)}")
            params = cls(**{n: float(params[n]) for n in PARAMETER_NAMES})
        params.check()
        return params

    def check(self) -> None:
        """Raise a UsageError naming the first parameter outside its range."""
        _check_table(np.array([astuple(self)], dtype=np.float64), "")


PARAMETER_NAMES = tuple(f.name for f in fields(CMRParameters))  # the columns of a parameter table
_COLUMN = {name: k for k, name in enumerate(PARAMETER_NAMES)}
# (low, high) of each checked parameter; T must also be > 0. Drift rates above 1 have no real ρ; negative learning
# rates and X1 are skipped (learning) or clipped (stopping) by cymr, so they would only hide a mistake.
_RANGES = {"B_enc": (0.0, 1.0), "B_start": (0.0, 1.0), "B_rec": (0.0, 1.0), "Lfc": (0.0, np.inf),
           "Lcf": (0.0, np.inf), "P1": (0.0, np.inf), "X1": (0.0, np.inf), "T": (0.0, np.inf)}


def _check_table(table: np.ndarray, where: str) -> None:
    """Raise a UsageError for the first row (P, K) with a parameter out of range, ``where`` prefixing its name."""
    def fail(row: int, name: str, rule: str) -> None:
        prefix = f"{where}[{row}]: " if where else ""
        raise UsageError(f"{prefix}{name}={table[row, _COLUMN[name]]} is invalid: it must {rule}")

    finite = np.isfinite(table)
    if not finite.all():
        row, k = np.argwhere(~finite)[0]
        fail(row, PARAMETER_NAMES[k], "be a finite number")
    for name, (low, high) in _RANGES.items():
        column = table[:, _COLUMN[name]]
        bad = (column <= low) if name == "T" else (column < low) | (column > high)
        if bad.any():
            fail(int(np.argmax(bad)), name, "be > 0" if name == "T" else
                 f"lie in [{low:g}, {high:g}]" if np.isfinite(high) else f"be >= {low:g}")


def _parameter_table(param_sets: Sequence[CMRParameters | Mapping[str, float]] | npt.ArrayLike,
                     name: str = "param_sets") -> np.ndarray:
    """(P, K) float64, columns in PARAMETER_NAMES order, checked: from parameter sets or such a table itself (the
    argument ``name`` in messages)."""
    if isinstance(param_sets, np.ndarray) or (len(param_sets) and not isinstance(
            param_sets[0], (CMRParameters, Mapping))):
        table = np.asarray(param_sets, dtype=np.float64)
        if table.ndim != 2 or table.shape[1] != len(PARAMETER_NAMES) or not len(table):
            raise UsageError(f"{name} has shape {table.shape}: a table needs shape (sets >= 1, "
                             f"{len(PARAMETER_NAMES)}), columns {', '.join(PARAMETER_NAMES)}")
        _check_table(table, name)
        return table
    if not len(param_sets):
        raise UsageError(f"{name} is empty: give at least one parameter set")
    return np.array([astuple(CMRParameters.of(p)) for p in param_sets], dtype=np.float64)


def _drift(context: np.ndarray, c_in: np.ndarray, beta: np.ndarray) -> np.ndarray:
    """ρ c + β c_IN over the last axis (..., D), β (..., 1), with ρ keeping |c| = 1 for unit c and c_IN (or 0)."""
    dot = (context * c_in).sum(-1, keepdims=True)
    return _rho(dot, beta) * context + beta * c_in


def _rho(dot: np.ndarray, beta: np.ndarray) -> np.ndarray:
    """ρ = sqrt(1 + β²((c·c_IN)² - 1)) - β c·c_IN."""
    return np.sqrt(1 + beta**2 * (dot**2 - 1)) - beta * dot


def _unit_rows(m: np.ndarray) -> np.ndarray:
    """Each row (last axis) over its L2 norm; a row of zeros stays zero."""
    norm = np.sqrt((m**2).sum(-1, keepdims=True))
    return m / np.where(norm > 0, norm, 1.0)


class _Network(NamedTuple):
    """Each set's network after study, the same for every list: a and g for the first recall (P, L), H and G
    (P, L, L) (the module docstring)."""

    activation: np.ndarray
    overlap: np.ndarray
    h: np.ndarray
    g: np.ndarray


def _study(table: np.ndarray, n_items: int) -> _Network:
    """Study of a list of ``n_items`` by every parameter set of ``table`` (P, K)."""
    col = {name: table[:, k, None] for name, k in _COLUMN.items()}  # each P 1
    n_sets, items = len(table), np.arange(n_items)
    fc_pre = np.zeros((n_sets, n_items, n_items + 1))  # P L D: unit 0 is the start unit
    fc_pre[:, :, 1:] = col["Afc"][:, :, None]
    fc_pre[:, items, items + 1] += col["Dfc"]
    cf_pre = np.zeros((n_sets, n_items, n_items + 1))
    cf_pre[:, :, 1:] = col["Acf"][:, :, None]
    cf_pre[:, items, items + 1] += col["Dcf"]
    study_in = _unit_rows(fc_pre)  # P L D: item i's input at study, before it has learned anything

    context = np.zeros((n_sets, n_items + 1))  # P D
    context[:, 0] = 1.0
    contexts = np.empty((n_sets, n_items, n_items + 1))  # P L D: [:, i] is c_i, the context right after item i
    for i in range(n_items):  # each drift depends on the last: a loop of L small steps
        context = _drift(context, study_in[:, i], col["B_enc"])
        contexts[:, i] = context
    lcf = col["Lcf"] + col["P1"] * np.exp(-col["P2"] * items)  # P L: the primacy gradient
    m_cf = cf_pre + lcf[:, :, None] * contexts  # P L D
    recall_in = _unit_rows(fc_pre + col["Lfc"][:, :, None] * contexts)  # P L D
    start = np.zeros(n_items + 1)
    start[0] = 1.0
    context = _drift(context, start, col["B_start"])  # P D: cues the first recall
    return _Network(np.einsum("pld,pd->pl", m_cf, context), np.einsum("pld,pd->pl", recall_in, context),
                    recall_in @ m_cf.transpose(0, 2, 1), recall_in @ recall_in.transpose(0, 2, 1))


def _stop_probabilities(table: np.ndarray, n_items: int) -> np.ndarray:
    """p_stop (P, L + 1) by number of items recalled so far: clipped to [10⁻⁶, 1 - 10⁻⁶], then 1 once all are."""
    x1, x2 = table[:, _COLUMN["X1"], None], table[:, _COLUMN["X2"], None]
    stop = np.clip(x1 * np.exp(x2 * np.arange(n_items + 1)), MIN_STOP, 1 - MIN_STOP)
    stop[:, -1] = 1.0
    return stop


def _correct_recalls(positions: npt.ArrayLike, n_items: int) -> tuple[np.ndarray, np.ndarray]:
    """After checking ``positions`` (B, R): the correct recalls closed up to the left, padded with -1 (B, max(R, 1)),
    and their numbers (B,)."""
    if not isinstance(n_items, (int, np.integer)) or isinstance(n_items, bool) or n_items < 1:
        raise UsageError(f"n_items={n_items!r} is invalid: it must be an int >= 1 (the list length L)")
    positions = np.asarray(positions)
    if positions.ndim != 2 or positions.shape[0] == 0 or not np.issubdtype(positions.dtype, np.integer):
        raise UsageError(f"positions has shape {positions.shape} and dtype {positions.dtype}: it must be integers "
                         "of shape (lists >= 1, steps)")
    positions = positions.astype(np.int64)
    bad = (positions < PADDING_POSITION) | (positions >= n_items)
    if bad.any():
        b, r = np.argwhere(bad)[0]
        raise UsageError(f"positions[{b}, {r}]={positions[b, r]} is out of range: serial positions lie in "
                         f"[0, n_items - 1 = {n_items - 1}], or are {INTRUSION_POSITION} (intrusion) or "
                         f"{PADDING_POSITION} (padding)")
    padding = positions == PADDING_POSITION  # B R
    late = np.maximum.accumulate(padding, axis=1) & ~padding
    if late.any():
        b, r = np.argwhere(late)[0]
        raise UsageError(f"positions[{b}] has a recall at step {r} after padding: padding must only end a list")
    studied = positions >= 0  # B R
    onehot = studied[:, :, None] & (positions[:, :, None] == np.arange(n_items))  # B R L
    earlier = np.cumsum(onehot, axis=1) - onehot  # B R L: times each item was recalled before step r
    repeat = np.take_along_axis(earlier, np.maximum(positions, 0)[:, :, None], axis=2)[:, :, 0] > 0  # B R
    correct = studied & ~repeat
    order = np.argsort(~correct, axis=1, kind="stable")  # B R: correct recalls first, in output order
    closed = np.take_along_axis(positions, order, axis=1)
    counts = correct.sum(1)
    closed[np.arange(positions.shape[1]) >= counts[:, None]] = -1
    return (closed if closed.shape[1] else np.full((len(closed), 1), -1)), counts


class _Step(NamedTuple):
    """Output position r of the rows that have not stopped before it, a prefix of the rows (M of N = B·P): the
    unnormalised choice weights of the items (M, L) (0 for recalled ones) and their sum (M,), p_stop (M,), and the
    item each row recalls at r (M,; 0 for a row that stops at r)."""

    r: int
    odds: np.ndarray
    total: np.ndarray
    stop: np.ndarray
    item: np.ndarray


class _Recall:
    """The recall phase of M rows (a list under a parameter set each), all from the context after study: each item's
    choice weight, p_stop, and the drift after a recall, for rows that ``keep`` narrows as they stop. The state is
    a = M_CF c and g = M_FC_in c (the module docstring), not c itself."""

    def __init__(self, table: np.ndarray, n_items: int, n_lists: int) -> None:
        """Rows list-major over ``n_lists`` lists and the parameter sets of ``table`` (P, K): row b·P + p."""
        net = _study(table, n_items)
        n_sets = len(table)
        self.h, self.g = net.h.reshape(-1, n_items), net.g.reshape(-1, n_items)  # P·L L
        self.activation = np.tile(net.activation, (n_lists, 1))  # M L
        self.overlap = np.tile(net.overlap, (n_lists, 1))  # M L
        self.stop = np.tile(_stop_probabilities(table, n_items), (n_lists, 1))  # M L+1
        self.scale = np.tile(2.0 / np.maximum(table[:, _COLUMN["T"]], MIN_ACTIVATION), n_lists)[:, None]  # M 1: 2 / T
        self.beta = np.tile(table[:, _COLUMN["B_rec"]], n_lists)[:, None]  # M 1
        self.first_row = np.tile(np.arange(n_sets) * n_items, n_lists)  # M: the row's set's first row of h and g
        self.recalled = np.zeros((n_sets * n_lists, n_items))  # M L: 0, or -inf once recalled (added to the exponent)

    def keep(self, rows: slice | np.ndarray) -> None:
        """Go on with these rows only (a slice keeps views, an index array copies)."""
        for name in ("activation", "overlap", "stop", "scale", "beta", "first_row", "recalled"):
            setattr(self, name, getattr(self, name)[rows])

    def odds(self) -> tuple[np.ndarray, np.ndarray]:
        """Each item's choice weight e^(2 a / T) over the largest one's (M, L), 0 once recalled, and their sum (M,)."""
        exponent = np.maximum(self.activation, MIN_ACTIVATION) * self.scale + self.recalled  # M L: 2 a / T
        # less its largest available term, so e^x never overflows (a row with every item recalled keeps -inf)
        odds = np.exp(exponent - np.maximum(exponent.max(1, keepdims=True), np.finfo(np.float64).min))
        return odds, odds.sum(1)

    def recall(self, item: np.ndarray) -> None:
        """Each row recalls ``item`` (M,): its context drifts towards that item's recall input, with β = B_rec."""
        rows, at = np.arange(len(item)), self.first_row + item
        rho = _rho(self.overlap[rows, item, None], self.beta)  # M 1: c · c_IN is the overlap with the recalled item
        self.activation = rho * self.activation + self.beta * self.h[at]
        self.overlap = rho * self.overlap + self.beta * self.g[at]
        self.recalled[rows, item] = -np.inf


def _walk(table: np.ndarray, recalls: np.ndarray, counts: np.ndarray, n_items: int) -> Iterator[_Step]:
    """The recall phase of every list (B) under every parameter set (P, K), step by step. ``counts`` must be in
    decreasing order, so that the rows still recalling form a prefix that shrinks; rows are list-major (row b·P + p:
    list b, set p). A row recalls at steps r < its count and stops at r = its count."""
    state = _Recall(table, n_items, len(recalls))
    n_sets, steps = len(table), int(counts[0]) + 1
    items = np.zeros((len(recalls), steps), dtype=np.int64)  # B S (recalls has >= S - 1 columns)
    items[:, : steps - 1] = np.maximum(recalls[:, : steps - 1], 0)
    items = np.repeat(items, n_sets, axis=0)  # N S
    for r in range(steps):
        state.keep(slice(n_sets * int(np.count_nonzero(counts >= r))))  # rows that recall or stop at r
        odds, total = state.odds()
        yield _Step(r, odds, total, state.stop[:, r], items[: len(odds), r])
        m = n_sets * int(np.count_nonzero(counts > r))  # rows that recall at r
        if m == 0:
            break
        state.keep(slice(m))
        state.recall(items[:m, r])


def _by_count(positions: npt.ArrayLike, n_items: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The correct recalls (B, ≥ S - 1) and their numbers (B,) of ``positions``, lists in decreasing number of
    correct recalls (as ``_walk`` takes them), and that order (B,)."""
    recalls, counts = _correct_recalls(positions, n_items)
    order = np.argsort(-counts, kind="stable")
    return recalls[order], counts[order], order


def _log_likelihoods(table: np.ndarray, positions: npt.ArrayLike, n_items: int) -> np.ndarray:
    """(P, B): each list's log-likelihood under each parameter set."""
    recalls, counts, order = _by_count(positions, n_items)
    steps, n_sets = int(counts[0]) + 1, len(table)
    events = np.ones((n_sets * len(recalls), steps))  # N S: each step's event probability; 1 (log 0) after the stop
    with np.errstate(divide="ignore", invalid="ignore"):  # a row with every item recalled only stops: 0 / 0 unused
        for step in _walk(table, recalls, counts, n_items):
            events[: len(step.item), step.r] = step.odds[np.arange(len(step.item)), step.item] / step.total * (
                1 - step.stop)
    row_counts = np.repeat(counts, n_sets)  # N
    stop = np.tile(_stop_probabilities(table, n_items), (len(recalls), 1))  # N L+1
    events[np.arange(len(events)), row_counts] = stop[np.arange(len(events)), row_counts]  # after the last recall
    per_list = np.log(np.clip(events, MIN_PROBABILITY, 1.0)).sum(1).reshape(len(recalls), n_sets)  # B P, sorted
    unsorted = np.empty_like(per_list)
    unsorted[order] = per_list
    return unsorted.T


def cmr_list_log_likelihoods(params: CMRParameters | Mapping[str, float], positions: npt.ArrayLike,
                             n_items: int) -> np.ndarray:
    """The log-likelihood of each list (B,) float64 under CMR at ``params`` (cymr's names), as cymr computes it.

    positions: (B, R) integers, as ``free_recall.recall_positions`` gives them: the 0-based serial position of each
    output in order, -1 for an intrusion, -2 for padding after the list's last output (every list ends with a
    stop). Intrusions and repetitions are dropped first, as cymr does. n_items: L, the list length. Each list adds
    the log of the probability of each correct recall and of the stop after the last one, each probability at least
    10⁻⁵ (the module docstring has the equations).
    """
    return _log_likelihoods(_parameter_table([params]), positions, n_items)[0]


def cmr_log_likelihood(params: CMRParameters | Mapping[str, float], positions: npt.ArrayLike, n_items: int) -> float:
    """The log-likelihood of all the lists of ``positions`` (B, R): the sum of ``cmr_list_log_likelihoods``, what
    cymr's ``CMR.likelihood`` reports as a subject's ``logl``."""
    return float(cmr_list_log_likelihoods(params, positions, n_items).sum())


def cmr_log_likelihoods(param_sets: Sequence[CMRParameters | Mapping[str, float]] | npt.ArrayLike,
                        positions: npt.ArrayLike, n_items: int) -> np.ndarray:
    """``cmr_log_likelihood`` of the same lists under each of P parameter sets at once (P,) float64: what a
    population-based fit evaluates per generation. ``param_sets``: parameter sets, or a table (P, 14) whose columns
    are ``PARAMETER_NAMES`` in order. Much faster per set than one call each (the loop over output positions is
    shared)."""
    return _log_likelihoods(_parameter_table(param_sets), positions, n_items).sum(1)


def cmr_choice_probabilities(params: CMRParameters | Mapping[str, float], positions: npt.ArrayLike,
                             n_items: int) -> np.ndarray:
    """The probability of each choice at each step of each list (B, S, L + 1) float64: recalling item 0..L-1
    (columns 0..L-1) or stopping (column L), given the list's correct recalls before that step; each row sums to 1.
    Step s of list b exists up to its stop (s <= its number of correct recalls); later rows are NaN. Probabilities
    are before cymr's floor. ``positions`` (B, R) and ``n_items`` as in ``cmr_list_log_likelihoods``."""
    recalls, counts, order = _by_count(positions, n_items)
    choices = np.full((len(recalls), int(counts[0]) + 1, n_items + 1), np.nan)  # B S L+1, lists sorted
    for step in _walk(_parameter_table([params]), recalls, counts, n_items):
        total = np.where(step.total > 0, step.total, 1.0)[:, None]  # every item recalled: only the stop is left
        choices[: len(total), step.r, :n_items] = step.odds / total * (1 - step.stop[:, None])
        choices[: len(total), step.r, n_items] = step.stop
    unsorted = np.empty_like(choices)
    unsorted[order] = choices
    return unsorted


def cmr_person_log_likelihood(params: CMRParameters | Mapping[str, float], study: npt.ArrayLike,
                              recalls: npt.ArrayLike) -> float:
    """``cmr_log_likelihood`` of one person's lists as ``primacy.workflows.humans.people.Person`` holds them: study
    (B, L) item ids in study order, recalls (B, R) output item ids in order, padded with -1 (``recall_positions``
    turns them into serial positions; an unstudied item is an intrusion)."""
    study, recalls = torch.as_tensor(np.asarray(study)), torch.as_tensor(np.asarray(recalls))
    return cmr_log_likelihood(params, recall_positions(study, recalls).numpy(), study.shape[1])
