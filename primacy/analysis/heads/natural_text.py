"""Natural text for the head analyses of pretrained language models (Ji-An et al. 2024): the paper's in-context-
learning score on text windows, and the most frequent tokens of a text, which the paper's prompts are made of.

The paper's ICL score (Olsson et al. 2022, as Ji-An et al.'s ablation computes it) is the loss at token 500 minus the
loss at token 50 of a 512-token window, counted as their library counts it: a BOS token is put before the text and
loss index i is the prediction of token i + 1. In this package's convention (0-based positions in the window, BOS
included, naming the predicted token) that is ``late`` = 501 and ``early`` = 51. Documents shorter than the window
are skipped, longer ones give their first tokens, as theirs did on C4.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from primacy.checks import positive
from primacy.errors import UsageError

WINDOW = 512  # tokens per evaluation window, BOS included (the authors' min_len)
PAPER_EARLY, PAPER_LATE = 51, 501  # predicted tokens of the paper's ICL score in such a window


def text_windows(documents: Sequence[torch.Tensor], bos: int | None, length: int = WINDOW,
                 limit: int | None = None) -> torch.Tensor:
    """The first ``length`` tokens of each document long enough, BOS first when the model has one: (B, length) int64.

    ``documents`` are 1-D token tensors (a tokenizer's output, without special tokens); at most ``limit`` windows
    (None: every document long enough), in document order."""
    positive(length=length)
    body = length - (bos is not None)  # text tokens per window
    head = [] if bos is None else [torch.tensor([bos], dtype=torch.long)]
    windows = [torch.cat([*head, doc[:body].long()]) for doc in documents if len(doc) >= body]
    if limit is not None:
        windows = windows[:limit]
    if not windows:
        longest = max((len(doc) for doc in documents), default=0)
        raise UsageError(f"texts hold no document of at least {body} tokens (the longest has {longest}): the paper's "
                         f"ICL score needs {length}-token windows")
    return torch.stack(windows)  # B length


def frequent_tokens(documents: Sequence[torch.Tensor], vocab_size: int, count: int,
                    allowed: torch.Tensor | None = None) -> torch.Tensor:
    """The ``count`` most frequent tokens of ``documents`` (1-D token tensors), most frequent first, ties to the lower
    id: (count,) int64. Only ``allowed`` tokens ((vocab_size,) bool; None: every one) are counted."""
    positive(count=count)
    tokens = torch.cat([doc.long().flatten() for doc in documents]) if documents else torch.zeros(0, dtype=torch.long)
    if tokens.numel() and not 0 <= int(tokens.min()) <= int(tokens.max()) < vocab_size:
        raise UsageError(f"texts hold token ids outside [0, {vocab_size - 1}]: the tokenizer does not match the "
                         f"model's embedding of {vocab_size} tokens")
    counts = torch.bincount(tokens, minlength=vocab_size)  # V
    if allowed is not None:
        counts = counts * allowed
    seen = int((counts > 0).sum())
    if seen < count:
        raise UsageError(f"texts hold {seen} distinct prompt tokens: {count} most frequent ones were asked for "
                         f"(give more text or fewer items)")
    order = torch.argsort(-counts, stable=True)  # stable: equal counts keep the lower id first
    return order[:count]


def token_mask(tokens: torch.Tensor, vocab_size: int, allowed: torch.Tensor | None = None,
               name: str = "prompt_tokens") -> torch.Tensor:
    """The (vocab_size,) bool mask of ``tokens`` (1-D ids), for prompts drawn from a token list; every id must be in
    the vocabulary and, when ``allowed`` is given, one prompts may use (not a special token)."""
    tokens = tokens.long().flatten()
    if not tokens.numel():
        raise UsageError(f"{name} is empty: give at least one token id")
    outside = tokens[(tokens < 0) | (tokens >= vocab_size)]
    if outside.numel():
        raise UsageError(f"{name} holds token {int(outside[0])}, outside the model's vocabulary [0, {vocab_size - 1}]")
    mask = torch.zeros(vocab_size, dtype=torch.bool)
    mask[tokens] = True
    if allowed is not None and (mask & ~allowed).any():
        special = int(torch.nonzero(mask & ~allowed)[0])
        raise UsageError(f"{name} holds token {special}, which prompts may not use (a special token of the tokenizer)")
    return mask
