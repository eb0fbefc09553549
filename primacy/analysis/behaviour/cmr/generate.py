"""Free-recall sequences simulated from CMR as ``likelihood`` models them (cymr's ``generate_recall``): each list's
correct recalls in output order, drawn from exactly the choice probabilities ``cmr_choice_probabilities`` gives.

At output position r, with the items recalled so far set aside, a list stops with probability p_stop(r) (1 once every
item is recalled) and otherwise recalls item j with probability e^(2 a_j / T) / Σ_(k not recalled) e^(2 a_k / T); after
recalling j, context drifts towards j's recall input with β = B_rec (the equations are in ``likelihood``'s
docstring). Sampling is without replacement: no repetitions and no intrusions are generated.

Example: ``cmr_generate(CMRParameters(T=0.5, X1=0.1), n_lists=3, n_items=5, seed=0).tolist()`` is
``[[0, 2, 1, 3, -2], [-2, -2, -2, -2, -2], [4, 3, 0, 1, -2]]``: serial positions in output order, then -2 (padding);
the second list stopped before its first recall.

Every list and every parameter set is simulated at once; the loop is over output positions only. Shapes: P parameter
sets, B lists per set, M rows still recalling (of B·P, list-major), L study items.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from primacy.analysis.behaviour.cmr.likelihood import CMRParameters, _parameter_table, _Recall
from primacy.analysis.behaviour.free_recall import PADDING_POSITION
from primacy.errors import UsageError


def _rng(seed: int | np.random.Generator) -> np.random.Generator:
    """``seed`` itself if it is a Generator, else numpy's default generator seeded with the int ``seed``."""
    if isinstance(seed, np.random.Generator):
        return seed
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or seed < 0:
        raise UsageError(f"seed={seed!r} is invalid: it must be an int >= 0 or a numpy.random.Generator")
    return np.random.default_rng(int(seed))


def _count(name: str, value: int) -> int:
    """``value`` if it is an int >= 1, else a UsageError naming ``name``."""
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
        raise UsageError(f"{name}={value!r} is invalid: it must be an int >= 1")
    return int(value)


def cmr_generate_many(param_sets: Sequence[CMRParameters | Mapping[str, float]] | npt.ArrayLike, n_lists: int,
                      n_items: int, seed: int | np.random.Generator) -> np.ndarray:
    """``n_lists`` simulated lists of ``n_items`` under each of P parameter sets (P, n_lists, n_items) int64: the
    serial positions of each list's recalls in output order, then -2 (padding) after its stop.

    param_sets: parameter sets, or a table (P, 14) whose columns are ``PARAMETER_NAMES`` in order (as for
    ``cmr_log_likelihoods``). seed: an int, or a numpy Generator to draw from (it advances). The same seed gives the
    same lists; a set's lists depend on the other sets only through the shared stream of random numbers.
    """
    table = _parameter_table(param_sets)
    n_lists, n_items = _count("n_lists", n_lists), _count("n_items", n_items)
    rng = _rng(seed)
    n_sets = len(table)
    state = _Recall(table, n_items, n_lists)
    positions = np.full((n_lists * n_sets, n_items), PADDING_POSITION, dtype=np.int64)  # B·P L, list-major
    alive = np.arange(n_lists * n_sets)  # M: the rows of ``positions`` still recalling
    for r in range(n_items + 1):  # p_stop = 1 at r = L: every row has stopped after this loop
        odds, _ = state.odds()  # M L
        draws = rng.random((len(alive), 2))  # M 2: one to stop or not, one to choose the item
        goes_on = draws[:, 0] >= state.stop[:, r]  # P(stop) = p_stop(r) exactly
        if not goes_on.any():
            break
        odds, u = odds[goes_on], draws[goes_on, 1]
        cumulative = np.cumsum(odds, axis=1)  # M L
        # the first item whose cumulative weight exceeds u·total: item j with probability odds_j / total. A recalled
        # item adds 0, so it is never the first to exceed; the clip to the last available item only guards a rounding
        # of u·total up to total.
        item = np.count_nonzero(cumulative <= u[:, None] * cumulative[:, -1:], axis=1)  # M
        last = n_items - 1 - np.argmax(odds[:, ::-1] > 0, axis=1)  # M
        item = np.minimum(item, last)
        alive = alive[goes_on]
        positions[alive, r] = item
        state.keep(goes_on)
        state.recall(item)
    return positions.reshape(n_lists, n_sets, n_items).transpose(1, 0, 2).copy()


def cmr_generate(params: CMRParameters | Mapping[str, float], n_lists: int, n_items: int,
                 seed: int | np.random.Generator) -> np.ndarray:
    """``n_lists`` simulated lists of ``n_items`` under CMR at ``params`` (cymr's names) (n_lists, n_items) int64:
    the serial positions of each list's recalls in output order, then -2 (padding); what ``cmr_log_likelihood``
    scores. seed: an int, or a numpy Generator to draw from."""
    return cmr_generate_many([params], n_lists, n_items, seed)[0]
