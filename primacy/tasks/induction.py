"""Repeated random tokens (induction): next-token prediction on sequences that contain a repeated segment.

Training sequences are [BOS] followed by random tokens in which a segment of random length, starting at a random
offset, occurs a second time later on: only by copying what followed the earlier occurrence can a model predict
the second one. Varying the period and offsets keeps a model from solving it by position. Evaluation uses the
[BOS] r r prompt (``primacy.tasks.prompts.repeated_prompt``) with its own length. Token 0 is BOS.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import DataLoader

from primacy.checks import fits_in_memory, non_negative, positive
from primacy.errors import UsageError
from primacy.tasks.base import Task
from primacy.tasks.prompts import BOS, repeated_prompt
from primacy.tasks.sampling import stream_generator

TRAIN, VAL, TEST = 0, 1, 2  # stream ids for stream_generator


def repeated_segment_batch(batch_size: int, length: int, vocab_size: int, min_period: int,
                           generator: torch.Generator, distinct: bool = False) -> dict[str, torch.Tensor]:
    """tokens (B, length) int64: BOS, then random tokens 1..V-1 with a segment of period P in
    [min_period, (length - 1) // 2] copied from offset a to offset b >= a + P. Also returns ``repeat`` (B, length)
    bool, True where a token is a copy (predictable from context) — the second occurrence, first token excluded.

    With ``distinct`` the random tokens of a row are all different (it needs length <= vocab_size), so the copy is
    the only repetition, as in the [BOS] r r prompt; otherwise they are drawn independently and may repeat by
    chance (a token's earlier occurrence then often predicts nothing).
    """
    body = length - 1
    if distinct:
        keys = torch.rand(batch_size, vocab_size - 1, generator=generator)  # B V-1
        tokens = torch.cat([torch.full((batch_size, 1), BOS), keys.topk(body, dim=1).indices + 1], dim=1)  # B T
    else:
        tokens = torch.randint(1, vocab_size, (batch_size, length), generator=generator)  # B T
        tokens[:, 0] = BOS
    period = torch.randint(min_period, body // 2 + 1, (batch_size,), generator=generator)  # B
    # first start a in [1, body - 2P + 1], second start b in [a + P, body - P + 1]; uniform via scaled rand
    a = 1 + (torch.rand(batch_size, generator=generator) * (body - 2 * period + 1)).long()  # B
    b = a + period + (torch.rand(batch_size, generator=generator) * (body - period + 1 - (a + period) + 1)).long()
    position = torch.arange(length)[None, :]  # 1 T
    in_copy = (position >= b[:, None]) & (position < (b + period)[:, None])  # B T
    source = torch.where(in_copy, position - (b - a)[:, None], position)  # B T
    tokens = tokens.gather(1, source)
    repeat = in_copy & (position > b[:, None])  # the first copied token is not predictable
    return {"tokens": tokens, "repeat": repeat}


@dataclass(frozen=True)
class Prompts:
    """Evaluation prompts (P, T) and where they are predictable by induction (``repeat``, P x T)."""

    tokens: torch.Tensor
    repeat: torch.Tensor

    def batch(self, indices: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"tokens": self.tokens[indices], "repeat": self.repeat[indices]}


class InductionTask(Task):
    """Next-token prediction with repeated segments; validation on the [BOS] r r prompt.

    Args:
        vocab_size: tokens, BOS (0) included.
        length: training sequence length, BOS included.
        min_period: shortest repeated segment (the longest is (length - 1) // 2).
        prompt_items: n in the [BOS] r r validation prompt (length 2n + 1); choose it unlike the training periods.
        distinct: random tokens of a training sequence are all different, so only the copy repeats (needs
            length <= vocab_size); false draws them independently.
        batch_size: sequences per batch and process (N processes at B / N train on the data of one at B).
        num_val_prompts: validation prompts.
        num_test_prompts: test prompts (a stream disjoint from validation).
        seed: the data seed.
        num_workers: DataLoader workers; the data do not depend on it.
    """

    name = "induction"  # the results' task name (summary.json "task", results/<name>.csv)
    provides = frozenset({"tokens", "repeat"})

    def __init__(
        self,
        vocab_size: int = 128,
        length: int = 64,
        min_period: int = 4,
        prompt_items: int = 25,
        distinct: bool = False,
        batch_size: int = 64,
        num_val_prompts: int = 256,
        num_test_prompts: int = 256,
        seed: int = 0,
        num_workers: int = 0,
    ) -> None:
        super().__init__()
        if vocab_size < 3:
            raise UsageError(f"vocab_size={vocab_size} is invalid: it must be at least 3 (BOS and two tokens)")
        if not 1 <= min_period <= (length - 1) // 2:
            raise UsageError(f"min_period={min_period} is invalid for length={length}: it must lie in "
                             f"[1, (length - 1) // 2 = {(length - 1) // 2}]")
        if distinct and length > vocab_size:
            raise UsageError(f"length={length} is too long for vocab_size={vocab_size} with distinct=true: "
                             f"{length - 1} different tokens besides BOS need length <= vocab_size")
        if not 1 <= prompt_items < vocab_size:
            raise UsageError(f"prompt_items={prompt_items} is invalid: it must lie in [1, vocab_size - 1]")
        positive(batch_size=batch_size, num_val_prompts=num_val_prompts, num_test_prompts=num_test_prompts)
        non_negative(num_workers=num_workers)
        self.check_sequences(batch_size, length=length, prompt_items=prompt_items)
        rows = max(batch_size, num_val_prompts, num_test_prompts)  # the largest draw: one random key per token and row
        fits_in_memory("drawing random tokens", 8 * rows * max(length, vocab_size), batch_size=batch_size,
                       num_val_prompts=num_val_prompts, num_test_prompts=num_test_prompts, length=length,
                       vocab_size=vocab_size)
        self.vocab_size, self.length, self.min_period, self.prompt_items = vocab_size, length, min_period, prompt_items
        self.distinct = distinct
        self.batch_size, self.num_val_prompts, self.num_test_prompts = batch_size, num_val_prompts, num_test_prompts
        self.seed, self.num_workers = seed, num_workers
        self.save_hyperparameters(logger=False)  # the loggers get the whole config (RunConfig)

    @classmethod
    def sequence_length(cls, settings: dict[str, Any]) -> int:
        return max(settings["length"], 2 * settings["prompt_items"] + 1)  # training rows, [BOS] r r prompts

    def stream_batch(self, index: int, size: int) -> dict[str, torch.Tensor]:
        """Training batch ``index`` from generator (seed, train, index)."""
        return repeated_segment_batch(size, self.length, self.vocab_size, self.min_period,
                                      stream_generator(self.seed, TRAIN, index), self.distinct)

    def val_dataloader(self) -> DataLoader:
        return self._prompts(VAL, self.num_val_prompts)

    def test_dataloader(self) -> DataLoader:
        return self._prompts(TEST, self.num_test_prompts)

    def _prompts(self, stream: int, count: int) -> DataLoader:
        """[BOS] r r prompts in batches; ``repeat`` marks the second-repeat tokens after its first (predictable
        by induction)."""
        n = self.prompt_items
        tokens = repeated_prompt(n, self.vocab_size, BOS, count, stream_generator(self.seed, stream))  # P 2n+1
        repeat = torch.zeros_like(tokens, dtype=torch.bool)
        repeat[:, n + 2 :] = True
        return self.eval_loader(Prompts(tokens, repeat).batch, count)
