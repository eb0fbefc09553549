"""Delayed reconstruction (the copying memory task): study L items, wait D blank tokens, then recall every item.

A trial is L study items (tokens 0..K-1), D blank tokens, then L query positions at which the model must emit the
studied items. Condition ``forward`` asks for them in study order: the first query token is the recall cue and the
others are blanks (with ``teacher_forcing``, the previous studied item instead, so the model recalls the next one
from its predecessor). Condition ``cued`` names the study position asked at each query position with a position
token, in a random order during training and in the cyclic design at test (every study position at every query
position once per set and delay). ``study_pos`` is the study position asked at each query position, ``query_index``
where the query sits in the sequence; sequences of shorter delay end in blanks, which a causal model never sees
before answering.

Example (L = 3, K = 8, D = 2; blank 8, cue 9, "position j" 10 + j)::

    forward:  tokens = [5, 1, 6,  8, 8,  9, 8, 8]      targets = [5, 1, 6]   study_pos = [0, 1, 2]
    cued:     tokens = [5, 1, 6,  8, 8,  12, 10, 11]   targets = [6, 5, 1]   study_pos = [2, 0, 1]
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from numbers import Integral
from typing import Any, Literal

import numpy as np
import torch

from primacy.checks import one_of, positive
from primacy.errors import UsageError
from primacy.tasks.base import Batch, HeldOutStream, HeldOutTask
from primacy.tasks.sampling import HeldOut, cyclic_orders, draw_distinct

Condition = Literal["forward", "cued"]
CONDITIONS = ("forward", "cued")


@dataclass(frozen=True)
class Tokens:
    """The token ids of a reconstruction task: items 0..K-1, then blank, the recall cue and (cued) L position cues."""

    vocab_size: int
    n_items: int
    condition: str

    @property
    def blank(self) -> int:
        return self.vocab_size

    @property
    def cue(self) -> int:
        return self.vocab_size + 1

    @property
    def first_position(self) -> int:
        return self.vocab_size + 2

    def __len__(self) -> int:
        return self.vocab_size + 2 + (self.n_items if self.condition == "cued" else 0)


def draw_items(rows: int, n_items: int, vocab_size: int, repeats: bool, generator: torch.Generator) -> torch.Tensor:
    """Study lists (rows, L): distinct items in random order, or with ``repeats`` independent uniform draws."""
    if repeats:
        return torch.randint(0, vocab_size, (rows, n_items), generator=generator)
    return draw_distinct(rows, n_items, vocab_size, generator)


def trials(study: torch.Tensor, order: torch.Tensor, delay: torch.Tensor, tokens: Tokens, teacher_forcing: bool,
           max_delay: int) -> Batch:
    """Sequences for study lists (B, L), the study position asked at each query position (B, L) and delays (B,).

    Returns tokens (B, 2L + max_delay), query_index (B, L), targets (B, L), study_pos (B, L), delay (B,), int64.
    """
    batch, n_items = study.shape
    query_index = n_items + delay[:, None] + torch.arange(n_items)[None, :]  # B L
    if tokens.condition == "cued":
        queries = tokens.first_position + order  # B L: "position j" tokens
    else:
        queries = torch.full_like(study, tokens.blank)
        if teacher_forcing:
            queries[:, 1:] = study[:, :-1]
        queries[:, 0] = tokens.cue
    sequence = torch.full((batch, 2 * n_items + max_delay), tokens.blank, dtype=torch.long)
    sequence[:, :n_items] = study
    sequence.scatter_(1, query_index, queries)
    return {"tokens": sequence, "query_index": query_index, "targets": study.gather(1, order), "study_pos": order,
            "delay": delay}


@dataclass(frozen=True)
class ReconstructionDesign:
    """The evaluation trials: for every set s and delay k, the forward order, or (cued) the L cyclic shifts of the
    set's random order ``perm``, so each (study position, query position) pair occurs once per set and delay.
    Trial index = (s * D + k) * shifts + shift."""

    study: torch.Tensor  # S L
    perm: torch.Tensor  # S L
    delays: tuple[int, ...]
    tokens: Tokens
    teacher_forcing: bool

    @property
    def shifts(self) -> int:
        return self.study.shape[1] if self.tokens.condition == "cued" else 1

    def __len__(self) -> int:
        return self.study.shape[0] * len(self.delays) * self.shifts

    def batch(self, index: torch.Tensor) -> Batch:
        shift = index % self.shifts  # B
        k = (index // self.shifts) % len(self.delays)  # B
        s = index // (self.shifts * len(self.delays))  # B
        if self.tokens.condition == "cued":
            order = cyclic_orders(self.perm, s, shift)
        else:
            order = torch.arange(self.study.shape[1]).expand(len(index), -1)
        delay = torch.tensor(self.delays)[k]
        return trials(self.study[s], order, delay, self.tokens, self.teacher_forcing, max(self.delays))


class ReconstructionTask(HeldOutTask):
    """Delayed reconstruction: L study items, D blanks, then recall of every item (see the module's docstring).

    Args:
        n_items: study list length L.
        vocab_size: number of item tokens K (the model also embeds the blank, the cue and, cued, L position tokens).
        repeats: study items drawn with replacement (an item may occur twice); false: L distinct items.
        delay: D, the blanks between study and recall; [min, max] draws it uniformly per training trial.
        test_delays: the delays evaluation uses, each at every set; null: ``delay``, or for a range four evenly
            spaced delays from its min to its max.
        condition: ``forward`` (recall in study order) or ``cued`` (a position cue at each query, cyclic design).
        teacher_forcing: (forward) the query after the cue is the previous studied item instead of a blank.
        **stream: the data's settings (batch_size, num_held_out, num_test_sets, num_val_sets, seed, num_workers):
            ``HeldOutStream``. A held-out set is a study list; it gives one test trial per delay, times L when cued.
    """

    name = "reconstruction"  # the results' task name (summary.json "task", results/<name>.csv)
    provides = frozenset({"tokens", "query_index", "targets:token", "study_pos", "delay"})  # targets: tokens to emit

    def __init__(
        self,
        n_items: int = 32,
        vocab_size: int = 512,
        repeats: bool = False,
        delay: int | tuple[int, int] = 0,
        test_delays: list[int] | None = None,
        condition: Condition = "forward",
        teacher_forcing: bool = False,
        **stream: Any,
    ) -> None:
        super().__init__()
        positive(n_items=n_items, vocab_size=vocab_size)
        if not repeats and vocab_size < n_items:
            raise UsageError(f"vocab_size={vocab_size} is too small for n_items={n_items}: a list of distinct items "
                             f"needs vocab_size >= {n_items} (or repeats=true)")
        one_of("condition", condition, CONDITIONS)
        if teacher_forcing and condition != "forward":
            raise UsageError("teacher_forcing=true is for condition='forward': cued queries are position tokens")
        settings = HeldOutStream(**stream)
        self.delay_range = delay_range(delay)
        self.test_delays = resolve_test_delays(delay, test_delays)
        self.check_sequences(settings.batch_size, n_items=n_items, delay=delay, test_delays=test_delays)
        draw = partial(draw_items, n_items=n_items, vocab_size=vocab_size, repeats=repeats)
        held_out = HeldOut(draw, settings.num_held_out, n_items, vocab_size, settings.seed, repeats=repeats)
        self.hold_out(held_out, settings)
        self.save_hyperparameters(logger=False)  # the loggers get the whole config (RunConfig)
        self.vocab_size, self.repeats, self.condition = vocab_size, repeats, condition
        self.teacher_forcing = teacher_forcing
        self.tokens = Tokens(vocab_size, n_items, condition)

    @classmethod
    def model_vocabulary(cls, settings: dict[str, Any]) -> int:
        return len(Tokens(settings["vocab_size"], settings["n_items"], settings["condition"]))

    @classmethod
    def eval_delays(cls, settings: dict[str, Any]) -> list[int]:
        return resolve_test_delays(settings["delay"], settings["test_delays"])

    @classmethod
    def sequence_length(cls, settings: dict[str, Any]) -> int:
        longest_delay = max(delay_range(settings["delay"])[1], *cls.eval_delays(settings))
        return 2 * settings["n_items"] + longest_delay

    def stream_batch(self, index: int, size: int) -> Batch:
        """Training batch ``index`` from generator (seed, train, index); held-out sets are never drawn."""
        study, generator = self.training_rows(index, size)  # B L
        lo, hi = self.delay_range
        delay = torch.randint(lo, hi + 1, (size,), generator=generator)  # B
        if self.condition == "cued":
            order = torch.rand(size, self.n_items, generator=generator).argsort(dim=1)  # B L
        else:
            order = torch.arange(self.n_items).expand(size, -1)
        return trials(study, order, delay, self.tokens, self.teacher_forcing, hi)

    def design(self, rows: torch.Tensor, orders: torch.Tensor) -> ReconstructionDesign:
        return ReconstructionDesign(rows, orders, tuple(self.test_delays), self.tokens, self.teacher_forcing)


def delay_range(delay: int | tuple[int, int] | list[int]) -> tuple[int, int]:
    """(min, max) of a ``delay`` setting, a number or a [min, max] pair; a negative or reversed one is a UsageError."""
    bounds = (delay, delay) if isinstance(delay, Integral) else tuple(delay) if isinstance(delay, (list, tuple)) else ()
    integers = len(bounds) == 2 and all(isinstance(d, Integral) for d in bounds)
    if not integers or bounds[0] < 0 or bounds[1] < bounds[0]:
        raise UsageError(f"delay={delay} is invalid: give D >= 0 blanks, or a range [min, max] with 0 <= min <= max")
    return int(bounds[0]), int(bounds[1])


def resolve_test_delays(delay: int | tuple[int, int] | list[int], test_delays: list[int] | None) -> list[int]:
    """The evaluation delays: ``test_delays`` sorted, else the single ``delay``, or four evenly spaced over a range."""
    lo, hi = delay_range(delay)
    if test_delays is None:
        return sorted({int(round(d)) for d in np.linspace(lo, hi, 4)})
    if not test_delays or min(test_delays) < 0 or len(set(test_delays)) != len(test_delays):
        raise UsageError(f"test_delays={test_delays} is invalid: give distinct delays >= 0 (or null for the delay's)")
    return sorted(int(d) for d in test_delays)
