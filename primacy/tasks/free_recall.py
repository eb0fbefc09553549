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

The classic manipulations put distractor tokens (ids the items never use) into the study phase: ``gap`` of them after
every study item but the last and ``delay`` between the last item and the cue. Immediate free recall is gap = delay = 0
(the default), delayed free recall (Glanzer & Cunitz 1966) delay > 0, continual-distractor free recall (Bjork &
Whitten 1974) gap = delay > 0. The distractors are drawn uniformly, with repeats, from ``distractor_vocab`` tokens
K..K+M-1; the cue and stop follow them (K + M and K + M + 1), so stop stays the model's last token. Output step r then
reads position T - L - 1 + r of a T-token sequence: the recall phase is always the last L + 1 positions, and the
distractors, before the cue, are input the model sees but is never scored on.

Example (L = 3, K = 8, M = 2, gap 1, delay 2; distractors 8 and 9, cue 10, stop 11)::

    tokens = [5, 9, 1, 8, 6,  9, 9,  10,  6, 5, 1]   study = [5, 1, 6]   order = [2, 0, 1]
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

import torch

from primacy.checks import non_negative, positive
from primacy.errors import UsageError
from primacy.tasks.base import Batch, HeldOutStream, HeldOutTask
from primacy.tasks.sampling import HeldOut, draw_distinct


@dataclass(frozen=True)
class Tokens:
    """The token ids of a free-recall task: items 0..K-1, the distractors K..K+M-1, then the recall cue and stop."""

    vocab_size: int
    distractor_vocab: int = 0

    @property
    def cue(self) -> int:
        return self.vocab_size + self.distractor_vocab

    @property
    def stop(self) -> int:
        return self.cue + 1

    def __len__(self) -> int:
        return self.stop + 1


def trials(study: torch.Tensor, order: torch.Tensor, index: torch.Tensor, tokens: Tokens,
           distractors: torch.Tensor | None = None, gap: int = 0) -> Batch:
    """Sequences for study lists (B, L), the study positions in the fed order (B, L) and the trials' numbers (B,);
    ``distractors`` (B, (L - 1) * gap + delay), distractor indices 0..M-1, fill the gaps after each study item but the
    last, ``gap`` each, then the delay before the cue (None: none).

    Returns tokens (B, 2L + 1 + (L - 1) * gap + delay), study (B, L), order (B, L), index (B,), int64.
    """
    rows, n = study.shape
    studied = study
    if distractors is not None and distractors.shape[1] > 0:
        ids = distractors + tokens.vocab_size  # B (L-1)*gap+delay
        between = ids[:, : (n - 1) * gap].view(rows, n - 1, gap)  # B L-1 gap
        spaced = torch.cat([study[:, :-1, None], between], dim=2).reshape(rows, (n - 1) * (gap + 1))
        studied = torch.cat([spaced, study[:, -1:], ids[:, (n - 1) * gap :]], dim=1)  # B L+(L-1)*gap+delay
    cue = torch.full((rows, 1), tokens.cue, dtype=torch.long)  # B 1
    sequence = torch.cat([studied, cue, study.gather(1, order)], dim=1)  # B T
    return {"tokens": sequence, "study": study, "order": order, "index": index}


@dataclass(frozen=True)
class FreeRecallDesign:
    """The evaluation trials: one per held-out set s, its items fed in the order ``orders[s]``, its study phase filled
    with ``distractors[s]`` (None: none). Trial index = s."""

    study: torch.Tensor  # S L
    orders: torch.Tensor  # S L
    tokens: Tokens
    distractors: torch.Tensor | None = None  # S (L-1)*gap+delay
    gap: int = 0

    def __len__(self) -> int:
        return self.study.shape[0]

    def batch(self, index: torch.Tensor) -> Batch:
        distractors = None if self.distractors is None else self.distractors[index]
        return trials(self.study[index], self.orders[index], index, self.tokens, distractors, self.gap)


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
        delay: distractor tokens between the last study item and the cue (a filled delay); 0: immediate recall.
        gap: distractor tokens after each study item but the last; gap = delay > 0 is the continual-distractor
            schedule.
        distractor_vocab: M, the distractor token ids (K..K+M-1, never items); the model embeds K + M + 2 tokens.
            Needed (>= 1) when delay or gap is; with neither it only widens the vocabulary (to match a model trained
            with distractors).
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
        delay: int = 0,
        gap: int = 0,
        distractor_vocab: int = 0,
    ) -> None:
        super().__init__()
        positive(n_items=n_items, vocab_size=vocab_size)
        # declared here rather than taken as **stream: saved configs hold delay, gap and distractor_vocab after them
        settings = HeldOutStream(batch_size, num_held_out, num_test_sets, num_val_sets, seed, num_workers)
        if vocab_size < n_items:
            raise UsageError(f"vocab_size={vocab_size} is too small for n_items={n_items}: a list of distinct items "
                             f"needs vocab_size >= {n_items}")
        non_negative(delay=delay, gap=gap, distractor_vocab=distractor_vocab)
        if (delay or gap) and not distractor_vocab:
            named = f"delay={delay}" if delay else f"gap={gap}"
            raise UsageError(f"{named} needs distractor tokens, but distractor_vocab=0: set distractor_vocab >= 1 (the "
                             "distractors' own token ids, never items)")
        self.check_sequences(batch_size, n_items=n_items, delay=delay, gap=gap)
        draw = partial(draw_distinct, n=n_items, vocab_size=vocab_size)
        self.hold_out(HeldOut(draw, num_held_out, n_items, vocab_size, seed), settings)
        self.save_hyperparameters(logger=False)  # the loggers get the whole config (RunConfig)
        self.vocab_size, self.delay, self.gap, self.distractor_vocab = vocab_size, delay, gap, distractor_vocab
        self.tokens = Tokens(vocab_size, distractor_vocab)

    @classmethod
    def model_vocabulary(cls, settings: dict[str, Any]) -> int:
        return len(Tokens(settings["vocab_size"], settings.get("distractor_vocab") or 0))

    @classmethod
    def sequence_length(cls, settings: dict[str, Any]) -> int:
        n, gap, delay = settings["n_items"], settings.get("gap") or 0, settings.get("delay") or 0
        return 2 * n + 1 + (n - 1) * gap + delay  # study (with its distractors), cue, the fed items

    @property
    def n_distractors(self) -> int:
        """The distractors of a trial: ``gap`` after each study item but the last, then the ``delay``."""
        return (self.n_items - 1) * self.gap + self.delay

    def draw_distractors(self, rows: int, generator: torch.Generator) -> torch.Tensor | None:
        """Each trial's distractors (rows, n_distractors), indices 0..M-1 drawn uniformly with repeats; None when a
        trial has none (then nothing is drawn, so the immediate condition's data are those of a task without the
        manipulations)."""
        if not self.n_distractors:
            return None
        return torch.randint(self.distractor_vocab, (rows, self.n_distractors), generator=generator)

    def stream_batch(self, index: int, size: int) -> Batch:
        """Training batch ``index`` from generator (seed, train, index); held-out sets are never drawn, and each
        trial's items are fed in a uniformly random order."""
        study, generator = self.training_rows(index, size)  # B L
        order = torch.rand(size, self.n_items, generator=generator).argsort(dim=1)  # B L
        distractors = self.draw_distractors(size, generator)  # B (L-1)*gap+delay, or None
        rows = index * size + torch.arange(size)  # B: the trial's row in the stream, whatever the processes
        return trials(study, order, rows, self.tokens, distractors, self.gap)

    def design(self, rows: torch.Tensor, orders: torch.Tensor,
               distractors: torch.Tensor | None = None) -> FreeRecallDesign:
        return FreeRecallDesign(rows, orders, self.tokens, distractors, self.gap)

    def draw_design(self, rows: torch.Tensor, generator: torch.Generator) -> FreeRecallDesign:
        """HeldOutTask's design (one random order per set), then each set's distractors from the same stream."""
        orders = torch.rand(rows.shape[0], self.n_items, generator=generator).argsort(dim=1)  # S L
        return self.design(rows, orders, self.draw_distractors(rows.shape[0], generator))
