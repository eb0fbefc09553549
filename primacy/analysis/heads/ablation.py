"""Head ablation and the in-context-learning score: does removing the most CMR-like heads hurt ICL more than
removing as many random heads? (Ji-An et al. 2024, after Olsson et al. 2022.)

Olsson et al.'s ICL score is the loss at token 500 minus the loss at token 50 of natural text: negative when a model
predicts late tokens better from their longer context. Without natural text, the evaluation sequences here are
repeated random tokens, [BOS] r r ... r (``repeated_tokens``): in the first repeat nothing can be copied, in later
ones everything can. ``icl_positions`` puts ``early`` at the last token of the first repeat (the most context a
token can have without any copy to draw on) and ``late`` at the last token of the sequence (the most repeats
before it), so the score measures how much the model gains from copying earlier context. Positions are 0-based
in the sequence and name the predicted token.
"""

from __future__ import annotations

import itertools
import math
import operator
from collections import Counter
from dataclasses import asdict, dataclass

import numpy as np
import torch
from torch import nn

from primacy.analysis.heads.model import Head, HeadModel, head_model
from primacy.checks import positive
from primacy.errors import UsageError
from primacy.tasks.prompts import repeated_prompt


def repeated_tokens(n: int, repeats: int, vocab_size: int, bos: int | None, batch: int,
                    generator: torch.Generator, allowed: torch.Tensor | None = None) -> torch.Tensor:
    """[BOS] followed by ``repeats`` copies of r, n distinct random tokens (never ``bos``): (batch, 1 + n·repeats);
    without BOS (``bos`` None) just the copies.

    r is drawn as by ``repeated_prompt`` (from ``allowed``), so ``repeats=2`` gives the same prompts from the same
    generator state.
    Example::

        repeated_tokens(3, 3, vocab_size=10, bos=0, batch=1, generator=torch.Generator().manual_seed(0))
        == tensor([[0, 7, 1, 5, 7, 1, 5, 7, 1, 5]])
    """
    if repeats < 2:
        raise UsageError(f"repeats={repeats} is invalid: it must be at least 2 (a first sight and a copy)")
    prompt = repeated_prompt(n, vocab_size, bos, batch, generator, allowed)  # B 2n(+1)
    start = 0 if bos is None else 1
    return torch.cat([prompt[:, :start], prompt[:, start : start + n].repeat(1, repeats)], dim=1)  # B 1+n·repeats


def icl_positions(tokens: torch.Tensor, start: int = 1) -> tuple[int, int]:
    """(early, late) for [BOS] r r ... sequences (B, T) (r r ... with ``start=0``, a model without BOS): the last
    token of the first repeat and the last token.

    The repeat length n is the shortest period of tokens[:, start:] shared by every row; at least two repeats (the
    last may be cut short) must fit. Raises UsageError for sequences without such a period.
    """
    body = tokens[:, start:]  # B T-start
    for n in range(1, body.shape[1] // 2 + 1):
        if torch.equal(body[:, n:], body[:, :-n]):
            return start + n - 1, tokens.shape[1] - 1
    raise UsageError(f"tokens of shape {tuple(tokens.shape)} are not [BOS] r r ... sequences with one repeat length "
                     f"in every row: pass early and late explicitly")


def icl_scores(model: HeadModel | nn.Module, tokens: torch.Tensor, early: int, late: int,
               batch_size: int = 64) -> torch.Tensor:
    """Per-sequence ICL score, loss at token ``late`` minus loss at token ``early``: tokens (B, T) -> (B,).

    Positions are 0-based and name the predicted token (1..T-1). Runs without gradients in eval mode, restoring
    the model's mode afterwards, ``batch_size`` sequences at a time. Negative means later tokens are predicted better
    from their context.
    """
    t = tokens.shape[1]
    for name, value in (("early", early), ("late", late)):
        if not 1 <= value <= t - 1:
            raise UsageError(f"{name}={value} is invalid: it must lie in [1, {t - 1}] for sequences of length {t}")
    model = head_model(model)
    scores = []
    for begin in range(0, len(tokens), batch_size):
        loss = model.token_losses(tokens[begin : begin + batch_size], (early, late))  # b 2
        scores.append(loss[:, 1] - loss[:, 0])
    return torch.cat(scores)


@dataclass(frozen=True)
class PairedStats:
    """Paired comparison of per-sequence values, always ``second - first``.

    mean_difference and standard_error (sample SD / √n) of the differences; ci_low, ci_high the percentile
    bootstrap 95% interval of their mean; p_value two-sided, from flipping the sign of each difference at random
    (exact over all 2ⁿ sign patterns when there are at most ``resamples`` of them); n the number of pairs.
    """

    mean_difference: float
    standard_error: float
    ci_low: float
    ci_high: float
    p_value: float
    n: int


def paired_stats(first: np.ndarray | torch.Tensor, second: np.ndarray | torch.Tensor, resamples: int = 10_000,
                 seed: int = 0) -> PairedStats:
    """Mean difference, its SE, bootstrap CI and sign-flip permutation p-value of ``second - first`` (pairs)."""
    a = np.asarray(first, dtype=np.float64)
    b = np.asarray(second, dtype=np.float64)
    if a.ndim != 1 or a.shape != b.shape:
        raise UsageError(f"first {a.shape} and second {b.shape} are invalid: they must be 1-D of the same length")
    if len(a) < 2:
        raise UsageError(f"{len(a)} pairs are too few: paired statistics need at least 2")
    positive(resamples=resamples)
    d = b - a  # n
    n = len(d)
    rng = np.random.default_rng(seed)
    boot = d[rng.integers(0, n, size=(resamples, n))].mean(axis=1)  # resamples
    ci_low, ci_high = np.percentile(boot, [2.5, 97.5])
    observed = abs(d.mean())
    if 2**n <= resamples:  # every sign pattern once: the exact p-value, the observed pattern included
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=n)))  # 2ⁿ n
        flipped = np.abs(signs @ d / n)
        p = np.mean(flipped >= observed - 1e-12 * max(1.0, observed))
    else:  # Monte Carlo, counting the observed pattern so that p > 0
        signs = rng.choice((1.0, -1.0), size=(resamples, n))  # resamples n
        flipped = np.abs(signs @ d / n)
        p = (1 + np.sum(flipped >= observed - 1e-12 * max(1.0, observed))) / (1 + resamples)
    return PairedStats(float(d.mean()), float(d.std(ddof=1) / math.sqrt(n)), float(ci_low), float(ci_high),
                       float(p), n)


def _summary(scores: torch.Tensor) -> dict[str, float]:
    return {"mean": scores.mean().item(), "se": (scores.std() / math.sqrt(len(scores))).item()}


def ablated_count(fraction: float, n_heads: int) -> int:
    """How many heads the top ``fraction`` of ``n_heads`` is: ⌊fraction · n_heads⌋, as the authors count (14 of
    GPT-2 small's 144 heads, 4 of Pythia-70m's 48), and at least one (a model of 8 heads ablates 1)."""
    return max(1, math.floor(fraction * n_heads + 1e-9))  # tolerance: a product such as 0.1 · 30 may round below 3


def ablation_study(
    model: HeadModel | nn.Module,
    tokens: torch.Tensor,
    ranked_heads: list[Head],
    fraction: float = 0.1,
    n_random: int = 20,
    seed: int = 0,
    early: int | None = None,
    late: int | None = None,
    resamples: int = 10_000,
    batch_size: int = 64,
    named: str = "ranked_heads",
) -> dict:
    """ICL scores of the intact model, with the top ``fraction`` of ``ranked_heads`` ablated, and with as many
    random heads ablated; JSON-serialisable.

    Args:
        model: a LanguageModel whose backbone has attention or an exact influence (``head_model``), or any
            HeadModel with next-token losses.
        tokens: evaluation sequences (B, T), e.g. ``repeated_tokens``; B >= 2.
        ranked_heads: (layer, head) pairs, best first (e.g. most CMR-like first); at least one, no duplicates.
        fraction: share of ``ranked_heads`` to ablate, in (0, 1]; ⌊fraction · len(ranked_heads)⌋ heads (k), at
            least one: the authors' count (14 of GPT-2 small's 144 heads, 4 of Pythia-70m's 48).
        n_random: draws of k distinct heads from ``ranked_heads`` (every head of the model when all are ranked); the
            first draw alone is the authors' baseline (they drew once).
        seed: seeds the random draws and the resampling of the paired statistics.
        early, late: ICL-score positions; None takes them from ``icl_positions(tokens)``.
        resamples: bootstrap and permutation resamples of each paired comparison.
        batch_size: sequences per forward pass.
        named: what refusals of ``ranked_heads`` call it (a command names its option and file: ``heads=FILE``).

    Returns a dict with ``early``, ``late``, ``k``, ``top_heads`` and ``random_heads`` (lists of [layer, head]),
    ``scores`` (per-sequence ICL scores for ``intact``, ``top``, ``random`` and ``random_single``; ``random``
    averages the draws per sequence, ``random_single`` is the first draw alone, the authors' single draw),
    ``summary`` (mean and SE over sequences of each), ``random_draws`` (each draw's mean ICL score, ``per_draw``,
    and their mean and SE over draws: how much the baseline depends on which heads were drawn), and
    ``comparisons``: ``top_minus_intact``, ``random_minus_intact``, ``top_minus_random`` and
    ``top_minus_random_single`` as PairedStats fields. A positive difference means the ablation raised the score,
    i.e. hurt in-context learning.
    """
    model = head_model(model)
    every = [(layer, head) for layer in range(model.n_layers) for head in range(model.n_heads)]
    try:
        ranked = [(operator.index(layer), operator.index(head)) for layer, head in ranked_heads]
    except (TypeError, ValueError):
        raise UsageError(f"{named} is invalid: it must be a list of (layer, head) pairs of integers, not "
                         f"{ranked_heads!r}") from None
    if not ranked:
        raise UsageError(f"{named} is empty: it must name at least one (layer, head)")
    unknown = [head for head in ranked if head not in every]
    if unknown:
        shown = f"{unknown}" if len(unknown) <= 4 else f"{unknown[:4]} and {len(unknown) - 4} more"
        raise UsageError(f"{named} names {shown}, not heads of this model: layer must lie in "
                         f"[0, {model.n_layers - 1}] and head in [0, {model.n_heads - 1}]")
    twice = sorted(head for head, times in Counter(ranked).items() if times > 1)
    if twice:
        raise UsageError(f"{named} is invalid: it names {twice} more than once")
    if not 0 < fraction <= 1:
        raise UsageError(f"fraction={fraction} is invalid: it must lie in (0, 1]")
    positive(n_random=n_random)
    if len(tokens) < 2:
        raise UsageError(f"tokens has {len(tokens)} sequences: paired statistics need at least 2")
    if early is None or late is None:
        default_early, default_late = icl_positions(tokens, 0 if model.bos is None else 1)
        early = default_early if early is None else early
        late = default_late if late is None else late
    early, late = operator.index(early), operator.index(late)

    k = ablated_count(fraction, len(ranked))
    top = ranked[:k]
    generator = torch.Generator().manual_seed(seed)
    pool = sorted(ranked)  # every head in layer order when all are ranked
    draws = [[pool[i] for i in torch.randperm(len(pool), generator=generator)[:k].tolist()] for _ in range(n_random)]

    intact = icl_scores(model, tokens, early, late, batch_size)  # B
    with model.ablate_heads(top):
        ablated = icl_scores(model, tokens, early, late, batch_size)  # B
    per_draw = []
    for heads in draws:
        with model.ablate_heads(heads):
            per_draw.append(icl_scores(model, tokens, early, late, batch_size))
    draw_scores = torch.stack(per_draw)  # draws B
    random = draw_scores.mean(0)  # B
    draw_means = draw_scores.mean(1).double()  # draws
    spread = draw_means.std().item() / math.sqrt(n_random) if n_random > 1 else float("nan")

    def compare(first: torch.Tensor, second: torch.Tensor) -> dict:
        return asdict(paired_stats(first.cpu().double().numpy(), second.cpu().double().numpy(), resamples, seed))

    scores = {"intact": intact, "top": ablated, "random": random, "random_single": per_draw[0]}
    return {
        "early": early, "late": late, "k": k,
        "top_heads": [list(head) for head in top],
        "random_heads": [[list(head) for head in heads] for heads in draws],
        "scores": {name: s.tolist() for name, s in scores.items()},
        "summary": {name: _summary(s) for name, s in scores.items()},
        "random_draws": {"mean": draw_means.mean().item(), "se": spread, "n": n_random,
                         "per_draw": draw_means.tolist()},
        "comparisons": {
            "top_minus_intact": compare(intact, ablated),
            "random_minus_intact": compare(intact, random),
            "top_minus_random": compare(random, ablated),
            "top_minus_random_single": compare(per_draw[0], ablated),
        },
    }
