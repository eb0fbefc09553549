"""Multi-query associative recall as Zoology draws it (Arora et al. 2023, "Zoology: measuring and improving recall
in efficient language models"): L key-value pairs, then a stretch of noise in which each key is asked once, at a
distance from the pairs drawn from a power law, so that most queries come soon after the pairs and a few late.

The sequence has ``length`` tokens: the pairs k_0 v_0 ... k_{L-1} v_{L-1} (2L tokens), then the query region, whose
slots are its even offsets. Query slot g (offset 2g, g < G = (length - 2L) // 2) is drawn with probability
p(g) ∝ a (g + 1)^(a - 1) (Zoology's power law, a = ``power_a``), without replacement, one slot per pair; every other
token of the region is noise, drawn from the whole vocabulary (keys and values alike, as in Zoology). At a query the
model must emit the value paired with the key there. Keys (0..n_keys-1) and values (n_keys..) are disjoint; the keys
of a trial are distinct.

Accuracy is counted by study position (the pair asked) and query position, here the query's rank in time (the j-th
query of the trial): ``query_index`` (B, L) are the queries' token positions in increasing order and ``study_pos``
the pair each asks. The test asks the pairs in the cyclic design (every pair at every rank once per set), each trial
with its own slots and noise from the design stream.

Example (L = 2, length 10, keys 0..7, values 8..11; slots g = 2 and 0)::

    tokens      = [5, 9,  1, 8,  1, 3, 6, 10, 5, 2]   # pairs (5, 9) (1, 8); queries 1 at offset 0, 5 at offset 4
    query_index = [4, 8];  targets = [8, 9];  study_pos = [1, 0]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from primacy.checks import positive
from primacy.errors import UsageError
from primacy.tasks.associative_recall import held_out_pairs
from primacy.tasks.base import Batch, HeldOutStream, HeldOutTask, LengthSetting
from primacy.tasks.sampling import cyclic_orders


def slot_weights(slots: int, power_a: float) -> torch.Tensor:
    """p(g) ∝ a (g + 1)^(a - 1) over query slots g = 0 .. slots - 1 (Zoology's power law), as unnormalised weights."""
    return power_a * torch.arange(1, slots + 1, dtype=torch.float64) ** (power_a - 1)


@dataclass(frozen=True)
class Layout:
    """Token ids (keys 0..n_keys-1, values n_keys..) and where queries go in a sequence of ``length``."""

    n_items: int
    n_keys: int
    n_values: int
    length: int
    power_a: float

    @property
    def vocab_size(self) -> int:
        return self.n_keys + self.n_values

    @property
    def slots(self) -> int:
        return (self.length - 2 * self.n_items) // 2

    def trials(self, rows: torch.Tensor, order: torch.Tensor, generator: torch.Generator) -> Batch:
        """Sequences from ``draw_pairs`` rows (B, 2L), the pair asked at each query rank (B, L), slots and noise from
        ``generator``. Returns tokens (B, length), query_index, targets and study_pos (B, L), int64."""
        n, batch = self.n_items, rows.shape[0]
        keys, values = rows[:, :n], rows[:, n:] + self.n_keys  # B L each, as tokens
        weights = slot_weights(self.slots, self.power_a).expand(batch, -1)  # B G
        slots = torch.multinomial(weights, n, replacement=False, generator=generator).sort(dim=1).values  # B L
        query_index = 2 * n + 2 * slots  # B L, increasing: query rank j sits at slot slots[:, j]
        tokens = torch.randint(0, self.vocab_size, (batch, self.length), generator=generator)  # noise everywhere
        tokens[:, : 2 * n] = torch.stack([keys, values], dim=2).flatten(1)  # k v k v ...
        tokens.scatter_(1, query_index, keys.gather(1, order))
        return {"tokens": tokens, "query_index": query_index, "targets": values.gather(1, order), "study_pos": order}


@dataclass(frozen=True)
class MQARDesign:
    """The test trials: trial (s, k) = s * L + k asks, at query rank j, pair ``perm[s, (j + k) % L]`` of held-out set
    s; its slots and noise come from the design stream, drawn for every trial at once so a trial is the same whatever
    batch it is in."""

    rows: torch.Tensor  # S 2L, draw_pairs rows
    perm: torch.Tensor  # S L
    layout: Layout
    trials_: Batch  # every trial, drawn once

    @classmethod
    def draw(cls, rows: torch.Tensor, perm: torch.Tensor, layout: Layout, generator: torch.Generator) -> MQARDesign:
        n = layout.n_items
        index = torch.arange(rows.shape[0] * n)
        order = cyclic_orders(perm, index // n, index % n)  # S·L L
        return cls(rows, perm, layout, layout.trials(rows[index // n], order, generator))

    def __len__(self) -> int:
        return self.rows.shape[0] * self.layout.n_items

    def batch(self, index: torch.Tensor) -> Batch:
        return {key: value[index] for key, value in self.trials_.items()}


@dataclass(frozen=True)
class MQARStream(HeldOutStream):
    """MQAR's data settings: ``HeldOutStream`` with 64 test sets by default."""

    num_test_sets: int = 64


class MQARTask(LengthSetting, HeldOutTask):
    """Zoology's multi-query associative recall, with primacy's position-resolved accuracy (module docstring).

    Args:
        n_items: key-value pairs L per trial.
        length: tokens per sequence; the query region (length - 2L) must hold L slots, so length >= 4L.
        n_keys: key vocabulary, at least L.
        n_values: value vocabulary, disjoint from the keys'.
        power_a: the exponent a of the query slots' power law p(g) ∝ (g + 1)^(a - 1), in (0, 1]: near 0, most queries
            come right after the pairs (Zoology's default, 0.01); 1 spreads them uniformly.
        **stream: the data's settings (batch_size, num_held_out, num_test_sets, num_val_sets, seed, num_workers):
            ``MQARStream``. A held-out set is a set of keys (with any values); it gives L test trials.
    """

    name = "mqar"  # the results' task name (summary.json "task", results/<name>.csv)
    provides = frozenset({"tokens", "query_index", "targets:token", "study_pos"})

    def __init__(
        self,
        n_items: int = 8,
        length: int = 64,
        n_keys: int = 128,
        n_values: int = 128,
        power_a: float = 0.01,
        **stream: Any,
    ) -> None:
        super().__init__()
        positive(n_items=n_items, n_keys=n_keys, n_values=n_values)
        if length < 4 * n_items:
            raise UsageError(f"length={length} is too short for n_items={n_items}: the pairs take 2L tokens and the "
                             f"queries L slots of two, so it must be at least 4L = {4 * n_items}")
        if n_keys < n_items:
            raise UsageError(f"n_keys={n_keys} is too small for n_items={n_items}: a trial's keys are distinct")
        if not 0.0 < power_a <= 1.0:
            raise UsageError(f"power_a={power_a} is invalid: it must lie in (0, 1]")
        settings = MQARStream(**stream)
        self.check_sequences(settings.batch_size, length=length)
        self.hold_out(held_out_pairs(settings.num_held_out, n_items, n_keys, n_values, settings.seed, unseen=False),
                      settings, drawing="key")
        self.save_hyperparameters(logger=False)  # the loggers get the whole config (RunConfig)
        self.length, self.n_keys, self.n_values, self.power_a = length, n_keys, n_values, power_a
        self.layout = Layout(n_items, n_keys, n_values, length, power_a)

    @classmethod
    def model_vocabulary(cls, settings: dict[str, Any]) -> int:
        return settings["n_keys"] + settings["n_values"]

    def stream_batch(self, index: int, size: int) -> Batch:
        """Training batch ``index`` from generator (seed, train, index); held-out key sets are never drawn."""
        rows, generator = self.training_rows(index, size)  # B 2L
        order = torch.rand(size, self.n_items, generator=generator).argsort(dim=1)  # B L: the pair at each rank
        return self.layout.trials(rows, order, generator)

    def draw_design(self, rows: torch.Tensor, generator: torch.Generator) -> MQARDesign:
        """The cyclic design over held-out ``rows`` (S, 2L): one order of the pairs per set, then every trial's slots
        and noise, all from ``generator`` (a design stream)."""
        orders = torch.rand(rows.shape[0], self.n_items, generator=generator).argsort(dim=1)  # S L
        return MQARDesign.draw(rows, orders, self.layout, generator)
