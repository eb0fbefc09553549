"""Free recall: study L distinct items, see the recall cue, then output the studied items in any order, one per step,
and stop.

A trial is L study items (tokens 0..K-1), the cue K, then the study items again in a random order, the teacher-forcing
order: the input at output step r + 1 is the item "recalled" at step r. Output step r (r = 0..L) reads the model at
sequence position L + r (the cue, then each fed item); its right answers are the study items not fed before it, and at
step L, all fed, the answer is stop K + 1. ``study`` is the study list, ``order`` the study positions in the fed order
and ``index`` the trial's number: its set's index in the evaluation design, or its row in the training stream.

Example (L = 3, K = 8; cue 8, stop 9), fed in the order 6, 5, 1::

    tokens = [5, 1, 6,  8,  6, 5, 1]   study = [5, 1, 6]   order = [2, 0, 1]
    output steps read positions 3..6:  answers {5, 1, 6}, {5, 1}, {1}, stop
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

import torch

from primacy.checks import fits_in_memory, non_negative, positive
from primacy.errors import UsageError
from primacy.tasks.base import Batch, HeldOutTask
from primacy.tasks.sampling import TRAIN, HeldOut, check_held_out, distinct_sets, draw_distinct, stream_generator


@dataclass(frozen=True)
class Tokens:
    """The token ids of a free-recall task: items 0..K-1, then the recall cue and stop."""

    vocab_size: int

    @property
    def cue(self) -> int:
        return self.vocab_size

    @property
    def stop(self) -> int:
        return self.vocab_size + 1

    def __len__(self) -> int:
        return self.vocab_size + 2


def trials(study: torch.Tensor, order: torch.Tensor, index: torch.Tensor, tokens: Tokens) -> Batch:
    """Sequences for study lists (B, L), the study positions in the fed order (B, L) and the trials' numbers (B,).

    Returns tokens (B, 2L + 1), study (B, L), order (B, L), index (B,), int64.
    """
    cue = torch.full((study.shape[0], 1), tokens.cue, dtype=torch.long)  # B 1
    sequence = torch.cat([study, cue, study.gather(1, order)], dim=1)  # B 2L+1
    return {"tokens": sequence, "study": study, "order": order, "index": index}


@dataclass(frozen=True)
class FreeRecallDesign:
    """The evaluation trials: one per held-out set s, its items fed in the order ``orders[s]``. Trial index = s."""

    study: torch.Tensor  # S L
    orders: torch.Tensor  # S L
    tokens: Tokens

    def __len__(self) -> int:
        return self.study.shape[0]

    def batch(self, index: torch.Tensor) -> Batch:
        return trials(self.study[index], self.orders[index], index, self.tokens)


class FreeRecallTask(HeldOutTask):
    """Free recall: L study items, the cue, then the items in a random teacher-forcing order (see the module's
    docstring).

    Args:
        n_items: study list length L.
        vocab_size: number of item tokens K (the model also embeds the cue and stop: K + 2 tokens).
        batch_size: trials per batch and process (N processes at B / N train on the data of one at B).
        num_held_out: study sets kept out of training; test and validation sets come from them.
        num_test_sets: held-out sets the test uses, one trial each.
        num_val_sets: held-out sets validation uses, disjoint from the test sets.
        seed: the data's seed; training, held-out and design streams are derived from it.
        num_workers: DataLoader workers; the data do not depend on it.
    """

    name = "free_recall"  # the results' task name (summary.json "task", results/<name>.csv)
    provides = frozenset({"tokens", "study", "order", "index"})

    def __init__(
        self,
        n_items: int = 12,
        vocab_size: int = 32,
        batch_size: int = 64,
        num_held_out: int = 1024,
        num_test_sets: int = 256,
        num_val_sets: int = 16,
        seed: int = 0,
        num_workers: int = 0,
    ) -> None:
        super().__init__()
        positive(n_items=n_items, vocab_size=vocab_size, batch_size=batch_size, num_test_sets=num_test_sets,
                 num_val_sets=num_val_sets)
        if vocab_size < n_items:
            raise UsageError(f"vocab_size={vocab_size} is too small for n_items={n_items}: a list of distinct items "
                             f"needs vocab_size >= {n_items}")
        non_negative(num_workers=num_workers)
        self.check_sequences(batch_size, n_items=n_items)
        fits_in_memory("drawing item sets", 4 * vocab_size * max(batch_size, num_held_out), vocab_size=vocab_size,
                       batch_size=batch_size, num_held_out=num_held_out)
        what = f"vocab_size={vocab_size} and n_items={n_items}"
        check_held_out(num_held_out, num_test_sets, num_val_sets, distinct_sets(vocab_size, n_items), what)
        self.save_hyperparameters(logger=False)  # the loggers get the whole config (RunConfig)
        self.n_items, self.vocab_size = n_items, vocab_size
        self.batch_size, self.num_held_out = batch_size, num_held_out
        self.num_test_sets, self.num_val_sets = num_test_sets, num_val_sets
        self.seed, self.num_workers = seed, num_workers
        self.tokens = Tokens(vocab_size)
        draw = partial(draw_distinct, n=n_items, vocab_size=vocab_size)
        self._held_out = HeldOut(draw, num_held_out, n_items, vocab_size, seed, what)

    @classmethod
    def model_vocabulary(cls, settings: dict[str, Any]) -> int:
        return len(Tokens(settings["vocab_size"]))

    @classmethod
    def sequence_length(cls, settings: dict[str, Any]) -> int:
        return 2 * settings["n_items"] + 1  # study, cue, the fed items

    def stream_batch(self, index: int, size: int) -> Batch:
        """Training batch ``index`` from generator (seed, train, index); held-out sets are never drawn, and each
        trial's items are fed in a uniformly random order."""
        generator = stream_generator(self.seed, TRAIN, index)
        study = self._held_out.avoided(self._held_out.draw(size, generator), generator)  # B L
        order = torch.rand(size, self.n_items, generator=generator).argsort(dim=1)  # B L
        rows = index * size + torch.arange(size)  # B: the trial's row in the stream, whatever the processes
        return trials(study, order, rows, self.tokens)

    def design(self, rows: torch.Tensor, orders: torch.Tensor) -> FreeRecallDesign:
        return FreeRecallDesign(rows, orders, self.tokens)
