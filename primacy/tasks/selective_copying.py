"""Selective copying (Gu & Dao 2023, the Mamba paper's synthetic task): L tokens scattered at random places among
noise, then L markers at which the model must emit them in order. Unlike plain copying, where the tokens sit is
random, so a time-invariant model cannot copy by a fixed lag: it must select what to keep by content.

The sequence has ``length`` tokens: the first length - L hold the L data tokens at distinct random positions (in
order) and the ``noise`` token everywhere else; the last L are the ``marker`` token. At marker j the model must emit
data token j. Data tokens are 0..vocab_size-1, drawn independently (a list may repeat one, as in the paper), noise
is vocab_size and the marker vocab_size + 1.

Accuracy is counted by study position (the token's place in the list, j) and query position (the marker, j again:
the study x query matrix is diagonal and its diagonal is the serial-position curve). Test and validation lists are
held out; each held-out list is one test trial, with its own positions from the design stream.

Example (L = 3, length 10, vocabulary 4: noise 4, marker 5)::

    tokens      = [4, 2, 4, 4, 0, 4, 2, 5, 5, 5]   # data 2 0 2 at positions 1, 4, 6
    query_index = [7, 8, 9];  targets = [2, 0, 2];  study_pos = [0, 1, 2]
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

import torch

from primacy.checks import fits_in_memory, positive
from primacy.errors import UsageError
from primacy.tasks.base import Batch, HeldOutStream, HeldOutTask, LengthSetting
from primacy.tasks.reconstruction import draw_items
from primacy.tasks.sampling import HeldOut


@dataclass(frozen=True)
class Layout:
    """Token ids (data 0..vocab_size-1, then noise and marker) and the sequence's length."""

    n_items: int
    vocab_size: int
    length: int

    @property
    def noise(self) -> int:
        return self.vocab_size

    @property
    def marker(self) -> int:
        return self.vocab_size + 1

    def trials(self, items: torch.Tensor, generator: torch.Generator) -> Batch:
        """Sequences of the lists ``items`` (B, L), the data tokens' positions drawn from ``generator``. Returns
        tokens (B, length), query_index, targets and study_pos (B, L), int64."""
        batch, n = items.shape
        region = self.length - n
        places = torch.rand(batch, region, generator=generator).topk(n, dim=1).indices.sort(dim=1).values  # B L
        tokens = torch.full((batch, self.length), self.noise, dtype=torch.long)
        tokens.scatter_(1, places, items)
        tokens[:, region:] = self.marker
        return {"tokens": tokens, "query_index": (region + torch.arange(n)).expand(batch, -1), "targets": items,
                "study_pos": torch.arange(n).expand(batch, -1)}


@dataclass(frozen=True)
class CopyDesign:
    """The test trials: trial s is held-out list s at positions drawn once, for every trial, from the design stream."""

    trials_: Batch

    def __len__(self) -> int:
        return self.trials_["tokens"].shape[0]

    def batch(self, index: torch.Tensor) -> Batch:
        return {key: value[index] for key, value in self.trials_.items()}


@dataclass(frozen=True)
class SelectiveCopyingStream(HeldOutStream):
    """Selective copying's data settings: ``HeldOutStream`` with 512 test and 64 validation sets by default (a set
    gives one trial)."""

    num_test_sets: int = 512
    num_val_sets: int = 64


class SelectiveCopyingTask(LengthSetting, HeldOutTask):
    """The Mamba paper's selective copying, with primacy's position-resolved accuracy (module docstring).

    Args:
        n_items: data tokens L to copy.
        length: tokens per sequence, the L markers included; at least 2L.
        vocab_size: data tokens (the model's vocabulary is vocab_size + 2: noise and marker).
        **stream: the data's settings (batch_size, num_held_out, num_test_sets, num_val_sets, seed, num_workers):
            ``SelectiveCopyingStream``. A held-out set is a list (as a multiset of tokens); it gives one test trial.
    """

    name = "selective_copying"  # the results' task name (summary.json "task", results/<name>.csv)
    provides = frozenset({"tokens", "query_index", "targets:token", "study_pos"})

    def __init__(
        self,
        n_items: int = 16,
        length: int = 128,
        vocab_size: int = 16,
        **stream: Any,
    ) -> None:
        super().__init__()
        positive(n_items=n_items, vocab_size=vocab_size)
        if length < 2 * n_items:
            raise UsageError(f"length={length} is too short for n_items={n_items}: the data tokens and the markers "
                             f"take L places each, so it must be at least 2L = {2 * n_items}")
        settings = SelectiveCopyingStream(**stream)
        self.check_sequences(settings.batch_size, length=length)
        fits_in_memory("the test trials", 8 * length * max(settings.num_test_sets, settings.num_val_sets),
                       length=length, num_test_sets=settings.num_test_sets)
        # a list is L independent tokens, drawn without a key per token: the test trials are what may not fit
        draw = partial(draw_items, n_items=n_items, vocab_size=vocab_size, repeats=True)
        self.hold_out(HeldOut(draw, settings.num_held_out, n_items, vocab_size, settings.seed, repeats=True), settings,
                      drawing=None)
        self.save_hyperparameters(logger=False)  # the loggers get the whole config (RunConfig)
        self.length, self.vocab_size = length, vocab_size
        self.layout = Layout(n_items, vocab_size, length)

    @classmethod
    def model_vocabulary(cls, settings: dict[str, Any]) -> int:
        return settings["vocab_size"] + 2

    def stream_batch(self, index: int, size: int) -> Batch:
        """Training batch ``index`` from generator (seed, train, index); held-out lists are never drawn."""
        items, generator = self.training_rows(index, size)  # B L
        return self.layout.trials(items, generator)

    def draw_design(self, rows: torch.Tensor, generator: torch.Generator) -> CopyDesign:
        """Held-out lists ``rows`` (S, L), one trial each, their positions from ``generator`` (a design stream)."""
        return CopyDesign(self.layout.trials(rows, generator))
