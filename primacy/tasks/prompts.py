"""Prompts shared by the induction task and the head analyses: BOS, token 0 of every primacy vocabulary that has
one, and the repeated-token prompt [BOS] r r (Olsson et al. 2022; Ji-An et al. 2024)."""

from __future__ import annotations

import torch

from primacy.errors import UsageError

BOS = 0


def repeated_prompt(n: int, vocab_size: int, bos: int | None, batch: int, generator: torch.Generator,
                    allowed: torch.Tensor | None = None) -> torch.Tensor:
    """[BOS] r r with r of ``n`` distinct random tokens: (batch, 2n + 1) int64, or r r (batch, 2n) when ``bos`` is
    None. Tokens are drawn from ``allowed`` (a (vocab_size,) bool mask, e.g. a tokenizer's vocabulary without its
    special tokens), by default every token but ``bos``; ``bos`` is never drawn."""
    usable = torch.ones(vocab_size, dtype=torch.bool) if allowed is None else allowed.clone()  # V
    if bos is not None:
        usable[bos] = False
    if not 1 <= n <= int(usable.sum()):
        raise UsageError(f"n={n} is invalid: it needs 1 <= n <= {int(usable.sum())}, the number of tokens prompts "
                         f"may draw (distinct tokens; BOS and special tokens excluded)")
    keys = torch.rand(batch, vocab_size, generator=generator)  # B V
    keys[:, ~usable] = -1.0  # never drawn
    r = keys.topk(n, dim=1).indices  # B n, distinct per row
    head = [] if bos is None else [torch.full((batch, 1), bos, dtype=torch.long)]
    return torch.cat([*head, r, r], dim=1)
