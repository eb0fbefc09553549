"""Binary memory verification (serial probe recognition): pure generators and their DataModule.

A trial shows L distinct study items, then L queries; for each query the model answers "old" (it was
studied) or "new" (a distractor). Positions are 0-based; ``study_pos`` is -1 for distractors.

Example (L = 3, K = 8; tokens are item ids)::

    tokens    = [5, 1, 6,   1, 0, 5]     # study 5 1 6, then queries 1 0 5
    targets   = [1, 0, 1]                # 1 = old, 0 = new
    study_pos = [1, -1, 0]               # where each query was studied; -1 for a distractor
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any, Literal

import torch

from primacy.checks import one_of, positive
from primacy.errors import UsageError
from primacy.tasks.base import HeldOutStream, HeldOutTask
from primacy.tasks.sampling import TEST_DESIGN, TRAIN, HeldOut, avoiding, draw_distinct, stream_generator

Condition = Literal["half", "uniform"]
CONDITIONS = ("half", "uniform")

def check_sizes(n_items: int, vocab_size: int) -> None:
    """Reject sizes for which a trial cannot be built: L distinct study items plus L distinct distractors."""
    positive(n_items=n_items)
    if vocab_size < 2 * n_items:
        raise UsageError(
            f"vocab_size={vocab_size} is too small for n_items={n_items}: a trial needs n_items study items "
            f"and n_items distinct distractors, so vocab_size must be at least {2 * n_items}"
        )


def sample_items(n_sets: int, n_items: int, vocab_size: int,
                 generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw, per row, ``n_items`` study items and ``n_items`` distractors, all 2L distinct.

    Returns (study, pool), each (B, L) int64; ``study`` is in random (presentation) order.
    """
    items = draw_distinct(n_sets, 2 * n_items, vocab_size, generator)  # B 2L: a uniformly random ordered 2L-subset
    return items[:, :n_items], items[:, n_items:]


def training_batch(
    batch_size: int,
    n_items: int,
    vocab_size: int,
    p_distractor: float,
    generator: torch.Generator,
    excluded: torch.Tensor | None = None,
    token_hash: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """A batch of training trials: queries are the study items shuffled, each replaced by a distractor with
    probability ``p_distractor``. Rows whose study set hashes into ``excluded`` (sorted (S,) int64) are redrawn.

    Returns tokens (B, 2L) int64, targets (B, L) float, study_pos (B, L) int64.
    """
    def draw(rows: int) -> torch.Tensor:
        return draw_distinct(rows, 2 * n_items, vocab_size, generator)  # B 2L: study items, then distractors

    items = avoiding(draw(batch_size), draw, n_items, excluded, token_hash)
    study, pool = items[:, :n_items], items[:, n_items:]
    order = torch.rand(batch_size, n_items, generator=generator).argsort(dim=1)  # B L: study pos per query
    is_new = torch.rand(batch_size, n_items, generator=generator) < p_distractor  # B L
    queries = torch.where(is_new, pool, study.gather(1, order))  # B L
    return {
        "tokens": torch.cat([study, queries], dim=1),
        "targets": (~is_new).float(),
        "study_pos": torch.where(is_new, -1, order),
    }


def draw_study(rows: int, n_items: int, vocab_size: int, generator: torch.Generator) -> torch.Tensor:
    """(rows, L): study lists drawn as a training trial draws its items (2L distinct items, of which the first L are
    studied), so the held-out stream advances as it always has."""
    return draw_distinct(rows, 2 * n_items, vocab_size, generator)[:, :n_items]


def held_out(n_sets: int, n_items: int, vocab_size: int, seed: int) -> HeldOut:
    """The held-out study sets of a verification task (not drawn until used): rows (S, L), distinct sets."""
    draw = partial(draw_study, n_items=n_items, vocab_size=vocab_size)
    return HeldOut(draw, n_sets, n_items, vocab_size, seed, f"n_items={n_items} and vocab_size={vocab_size}")


def held_out_sets(n_sets: int, n_items: int, vocab_size: int, seed: int) -> torch.Tensor:
    """``n_sets`` distinct study sets (S, L), each in its own random presentation order."""
    return held_out(n_sets, n_items, vocab_size, seed).rows


@dataclass(frozen=True)
class CyclicDesign:
    """Every (study position, query position) pair exactly once per set (Morita 2025, test design).

    For set s, shift k and variant v, query position j asks for the study item at position
    ``perm[s, (j + k) % L]``. Condition ``half``: variant 0 replaces the even query positions by
    distractors, variant 1 the odd ones. Condition ``uniform``: variant 0 is all old, variant 1 all new.
    """

    study: torch.Tensor  # S L: study items in presentation order
    perm: torch.Tensor  # S L: the set's base query order (study positions)
    pool: torch.Tensor  # S L: distractors, distinct and never studied
    condition: Condition

    @classmethod
    def build(cls, study: torch.Tensor, vocab_size: int, seed: int, condition: Condition,
              index: int = 0) -> CyclicDesign:
        """Draw the query orders and distractors for ``study`` from design stream ``index`` of ``seed``."""
        return cls.draw(study, vocab_size, condition, stream_generator(seed, TEST_DESIGN, index))

    @classmethod
    def draw(cls, study: torch.Tensor, vocab_size: int, condition: Condition,
             generator: torch.Generator) -> CyclicDesign:
        """Draw the query orders, then the distractors, for ``study`` (S, L) from ``generator``."""
        one_of("condition", condition, CONDITIONS)
        n_sets, n_items = study.shape
        perm = torch.rand(n_sets, n_items, generator=generator).argsort(dim=1)  # as HeldOutTask.draw_design's orders
        keys = torch.rand(n_sets, vocab_size, generator=generator)  # S K
        keys.scatter_(1, study, -1.0)  # studied items are never drawn as distractors
        pool = keys.topk(n_items, dim=1).indices
        return cls(study, perm, pool, condition)

    def __len__(self) -> int:
        return self.study.shape[0] * self.study.shape[1] * 2

    def batch(self, index: torch.Tensor) -> dict[str, torch.Tensor]:
        """Trials for flat indices (B,) in [0, len): index = (s * L + k) * 2 + v."""
        n_items = self.study.shape[1]
        variant = index % 2  # B
        shift = (index // 2) % n_items  # B
        s = index // (2 * n_items)  # B
        j = torch.arange(n_items)  # L
        col = (j[None, :] + shift[:, None]) % n_items  # B L
        order = self.perm[s].gather(1, col)  # B L: study position asked at each query position
        study = self.study[s]  # B L
        if self.condition == "half":
            is_new = (j[None, :] % 2) == variant[:, None]  # B L
        else:
            is_new = variant[:, None].bool().expand(-1, n_items)
        distractors = self.pool[s].gather(1, col)  # B L: rotate the pool with the queries
        queries = torch.where(is_new, distractors, study.gather(1, order))
        return {
            "tokens": torch.cat([study, queries], dim=1),
            "targets": (~is_new).float(),
            "study_pos": torch.where(is_new, -1, order),
        }


class VerificationTask(HeldOutTask):
    """Serial probe recognition: L study items, then L old/new queries (Morita 2025).

    Args:
        n_items: study list length L (input length 2L).
        vocab_size: number of item tokens K; at least 2L.
        p_distractor: probability that a training query is replaced by a distractor.
        batch_size: trials per batch and process (N processes at B / N train on the data of one at B).
        num_held_out: item sets kept out of training; test and validation sets come from them.
        num_test_sets: held-out sets the test uses (each gives 2L trials).
        num_val_sets: held-out sets validation uses, disjoint from the test sets.
        condition: test design, ``half`` (Fig. 3: odd or even queries are distractors) or ``uniform``.
        seed: the data's seed; training, held-out and design streams are derived from it.
        num_workers: DataLoader workers; the data do not depend on it.
    """

    name = "verification"  # the results' task name (summary.json "task", results/<name>.csv)
    provides = frozenset({"tokens", "targets:old_new", "study_pos"})  # targets: 1.0 old, 0.0 new

    def __init__(
        self,
        n_items: int = 32,
        vocab_size: int = 512,
        p_distractor: float = 0.5,
        batch_size: int = 64,
        num_held_out: int = 1024,
        num_test_sets: int = 256,
        num_val_sets: int = 16,
        condition: Condition = "half",
        seed: int = 0,
        num_workers: int = 0,
    ) -> None:
        super().__init__()
        check_sizes(n_items, vocab_size)
        # declared here rather than taken as **stream: saved configs hold condition between num_val_sets and seed
        settings = HeldOutStream(batch_size, num_held_out, num_test_sets, num_val_sets, seed, num_workers)
        if not 0.0 <= p_distractor <= 1.0:
            raise UsageError(f"p_distractor={p_distractor} is invalid: it must lie in [0, 1]")
        self.check_sequences(batch_size, n_items=n_items)
        self.hold_out(held_out(num_held_out, n_items, vocab_size, seed), settings)
        one_of("condition", condition, CONDITIONS)
        self.save_hyperparameters(logger=False)  # the loggers get the whole config (RunConfig)
        self.vocab_size, self.p_distractor, self.condition = vocab_size, p_distractor, condition

    @classmethod
    def sequence_length(cls, settings: dict[str, Any]) -> int:
        return 2 * settings["n_items"]  # study, then queries

    def stream_batch(self, index: int, size: int) -> dict[str, torch.Tensor]:
        """Training batch ``index`` from generator (seed, train, index); held-out sets are never drawn."""
        return training_batch(size, self.n_items, self.vocab_size, self.p_distractor,
                              stream_generator(self.seed, TRAIN, index), self._held_out.hashes,
                              self._held_out.token_hash)

    def draw_design(self, rows: torch.Tensor, generator: torch.Generator) -> CyclicDesign:
        """The cyclic design over held-out study sets ``rows`` (S, L): query orders, then distractors, from
        ``generator``; the test's trials 0 .. 2L·s - 1 are those of its first s sets."""
        return CyclicDesign.draw(rows, self.vocab_size, self.condition, generator)
