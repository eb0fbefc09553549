"""Associative recall (multi-query associative recall, as in the Zoology benchmark): study L key-value pairs, then
answer L queries by key with the paired value.

Keys (tokens 0..n_keys-1) and values (n_keys..n_keys+n_values-1) come from disjoint vocabularies; the L keys of a
trial are distinct, values are drawn independently (two pairs may share one). The L queries follow the last pair; at
each the model must emit the value studied with the queried key, or the ``none`` token for a key that was not
studied (with ``p_unseen`` > 0: the recognition analogue of verification's distractors). During training the
queries ask the pairs in a random order; the test asks them in the cyclic design of the verification task, so every
pair is asked at every query position once per set. ``study_pos`` is the pair asked (-1 for an unseen key).

Example (L = 3, 8 keys, 4 values (tokens 8..11), none = 12)::

    tokens    = [5, 9,  1, 8,  6, 9,   1, 3, 5]      # pairs (5, 9) (1, 8) (6, 9), then queries 1 3 5
    targets   = [8, 12, 9]                          # key 3 was not studied: none
    study_pos = [1, -1, 0]
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any, Literal

import torch

from primacy.checks import one_of, positive
from primacy.errors import UsageError
from primacy.tasks.base import Batch, HeldOutStream, HeldOutTask
from primacy.tasks.sampling import HeldOut, cyclic_orders, draw_distinct

Condition = Literal["seen", "half"]
CONDITIONS = ("seen", "half")


def draw_pairs(rows: int, n_items: int, n_keys: int, n_values: int, unseen: bool,
               generator: torch.Generator) -> torch.Tensor:
    """(rows, L [+ L] + L): L distinct study keys, (with ``unseen``) L more keys never studied in the row, then the L
    values (0-based within the value vocabulary)."""
    keys = draw_distinct(rows, 2 * n_items if unseen else n_items, n_keys, generator)
    values = torch.randint(0, n_values, (rows, n_items), generator=generator)
    return torch.cat([keys, values], dim=1)


def held_out_pairs(n_sets: int, n_items: int, n_keys: int, n_values: int, seed: int, unseen: bool) -> HeldOut:
    """The held-out key sets of a task that draws ``draw_pairs`` rows (not drawn until used): ``n_sets`` distinct
    sets of ``n_items`` keys, each row with its values (and with ``unseen``, its unseen keys)."""
    draw = partial(draw_pairs, n_items=n_items, n_keys=n_keys, n_values=n_values, unseen=unseen)
    return HeldOut(draw, n_sets, n_items, n_keys, seed, setting="n_keys")


@dataclass(frozen=True)
class Layout:
    """Token ids: keys 0..n_keys-1, values n_keys.., then ``none``."""

    n_items: int
    n_keys: int
    n_values: int

    @property
    def none(self) -> int:
        return self.n_keys + self.n_values

    def __len__(self) -> int:
        return self.n_keys + self.n_values + 1

    def trials(self, rows: torch.Tensor, order: torch.Tensor, unseen: torch.Tensor) -> Batch:
        """Sequences from ``draw_pairs`` rows (B, M), the pair asked at each query position (B, L) and where an unseen
        key is asked instead (B, L bool; the unseen key of query position j is the row's j-th).

        Returns tokens (B, 3L), query_index (B, L), targets (B, L), study_pos (B, L), int64.
        """
        n = self.n_items
        keys, values = rows[:, :n], rows[:, -n:] + self.n_keys  # B L each, as tokens
        study = torch.stack([keys, values], dim=2).flatten(1)  # B 2L: k v k v ...
        queries = keys.gather(1, order)  # B L
        answers = values.gather(1, order)  # B L
        if unseen.any():
            queries = torch.where(unseen, rows[:, n : 2 * n], queries)
            answers = torch.where(unseen, self.none, answers)
        batch = rows.shape[0]
        return {"tokens": torch.cat([study, queries], dim=1),
                "query_index": (2 * n + torch.arange(n)).expand(batch, -1),
                "targets": answers, "study_pos": torch.where(unseen, -1, order)}


@dataclass(frozen=True)
class RecallDesign:
    """The test trials: for set s, shift k (and in ``half`` variant v), query position j asks pair
    ``perm[s, (j + k) % L]``; ``half`` asks an unseen key instead at the even (v = 0) or odd (v = 1) query positions,
    so every (pair, query position) cell is asked once per set either way. Trial index = (s * L + k) * V + v."""

    rows: torch.Tensor  # S M, draw_pairs rows
    perm: torch.Tensor  # S L
    layout: Layout
    condition: str

    @property
    def variants(self) -> int:
        return 2 if self.condition == "half" else 1

    def __len__(self) -> int:
        return self.rows.shape[0] * self.layout.n_items * self.variants

    def batch(self, index: torch.Tensor) -> Batch:
        n = self.layout.n_items
        variant = index % self.variants  # B
        shift = (index // self.variants) % n  # B
        s = index // (self.variants * n)  # B
        order = cyclic_orders(self.perm, s, shift)  # B L
        rows = self.rows[s]  # B M
        unseen = torch.zeros(len(index), n, dtype=torch.bool)
        if self.condition == "half":
            unseen = (torch.arange(n)[None, :] % 2) == variant[:, None]  # B L
            col = n + (torch.arange(n)[None, :] + shift[:, None]) % n  # B L: rotate the unseen keys with the queries
            rows = torch.cat([rows[:, :n], rows.gather(1, col), rows[:, 2 * n :]], dim=1)
        return self.layout.trials(rows, order, unseen)


class AssociativeRecallTask(HeldOutTask):
    """Associative recall: L key-value pairs, then L queries by key (see the module's docstring).

    Args:
        n_items: pairs per trial L (input length 3L).
        n_keys: key vocabulary; at least L, or 2L with unseen keys.
        n_values: value vocabulary (disjoint from the keys').
        p_unseen: probability that a training query asks an unseen key (answer ``none``) instead of a pair.
        condition: test design, ``seen`` (every query asks a pair) or ``half`` (every other query asks an unseen key;
            needs p_unseen > 0).
        **stream: the data's settings (batch_size, num_held_out, num_test_sets, num_val_sets, seed, num_workers):
            ``HeldOutStream``. A held-out set is a set of keys (with any values); it gives L test trials, 2L in
            ``half``.
    """

    name = "recall"  # the results' task name (summary.json "task", results/<name>.csv)
    provides = frozenset({"tokens", "query_index", "targets:token", "study_pos"})  # targets: the tokens to emit

    def __init__(
        self,
        n_items: int = 32,
        n_keys: int = 256,
        n_values: int = 256,
        p_unseen: float = 0.0,
        condition: Condition = "seen",
        **stream: Any,
    ) -> None:
        super().__init__()
        positive(n_items=n_items, n_keys=n_keys, n_values=n_values)
        if not 0.0 <= p_unseen < 1.0:
            raise UsageError(f"p_unseen={p_unseen} is invalid: it must lie in [0, 1)")
        unseen = p_unseen > 0
        if n_keys < (2 if unseen else 1) * n_items:
            need = "2 * n_items: n_items distinct study keys and n_items unseen ones" if unseen else \
                "n_items distinct keys"
            raise UsageError(f"n_keys={n_keys} is too small for n_items={n_items}" +
                             (f" with p_unseen={p_unseen}" if unseen else "") + f": it must be at least {need}")
        one_of("condition", condition, CONDITIONS)
        if condition == "half" and not unseen:
            raise UsageError("condition='half' asks unseen keys, which a model trained with p_unseen=0 never meets: "
                             "set p_unseen > 0 or condition='seen'")
        settings = HeldOutStream(**stream)
        self.check_sequences(settings.batch_size, n_items=n_items)
        self.hold_out(held_out_pairs(settings.num_held_out, n_items, n_keys, n_values, settings.seed, unseen), settings,
                      drawing="key")
        self.save_hyperparameters(logger=False)  # the loggers get the whole config (RunConfig)
        self.n_keys, self.n_values, self.p_unseen, self.condition = n_keys, n_values, p_unseen, condition
        self.layout = Layout(n_items, n_keys, n_values)

    @classmethod
    def model_vocabulary(cls, settings: dict[str, Any]) -> int:
        return len(Layout(settings["n_items"], settings["n_keys"], settings["n_values"]))

    @classmethod
    def sequence_length(cls, settings: dict[str, Any]) -> int:
        return 3 * settings["n_items"]

    def stream_batch(self, index: int, size: int) -> Batch:
        """Training batch ``index`` from generator (seed, train, index); held-out key sets are never drawn."""
        rows, generator = self.training_rows(index, size)  # B M
        order = torch.rand(size, self.n_items, generator=generator).argsort(dim=1)  # B L: the pair asked
        unseen = torch.rand(size, self.n_items, generator=generator) < self.p_unseen  # B L
        return self.layout.trials(rows, order, unseen)

    def design(self, rows: torch.Tensor, orders: torch.Tensor) -> RecallDesign:
        return RecallDesign(rows, orders, self.layout, self.condition)
