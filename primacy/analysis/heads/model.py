"""What the head analyses need from a model, and that view of a model trained by ``primacy fit``.

``analyze icl`` and ``analyze ablation`` see a model only through ``HeadModel``: its heads' attention on token
sequences, each head's OV circuit, head ablation and next-token losses, plus the vocabulary prompts are drawn from.
``RunHeads`` provides it for a primacy model with a TransformerBackbone; ``InfluenceHeads`` for a primacy model
whose backbone has an exact token-to-token influence (S4, S4D, Mamba, xLSTM's mLSTM blocks: ``Backbone.influence``),
its units (channels, inner channels, heads) in the role of heads; ``primacy.analysis.heads.pretrained.PretrainedHeads``
for a Hugging Face causal language model (``PretrainedMamba`` for a Hugging Face Mamba).

A unit without softmax has no attention probabilities and no pre-softmax scores. ``InfluenceHeads`` puts in their
place each query's share of absolute influence, share[t, s] = |w[t, s]| / Σ_{s' ≤ t} |w[t, s']| (in [0, 1], summing
to 1 over sources, as attention does), and its logarithm: the score whose softmax over sources is the share, as
attention's pre-softmax score is (up to a constant per query, which a lag-CRP's shape does not see).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from typing import Protocol

import torch
from torch import nn

from primacy.backbones.influence import unit_pair
from primacy.backbones.transformer import TransformerBackbone
from primacy.errors import UsageError
from primacy.tasks.prompts import BOS

Head = tuple[int, int]  # (layer, head), 0-based
OVCircuit = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]  # W_E (V, D), W_V, W_O, W_U (D, V)


class HeadModel(Protocol):
    """A causal model whose attention heads can be scored, fitted and ablated.

    ``bos`` is the token that starts every prompt (None: prompts start with r); ``allowed`` marks the tokens prompts
    may draw ((vocab_size,) bool; None: every token but BOS); ``predicts_tokens`` whether ``token_losses`` exist;
    ``max_length`` the longest input its positions allow (None: no limit).
    """

    n_layers: int
    n_heads: int
    vocab_size: int
    bos: int | None
    allowed: torch.Tensor | None
    predicts_tokens: bool
    max_length: int | None

    def attention(self, tokens: torch.Tensor, layers: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Pre- and post-softmax attention of ``layers`` on ``tokens`` (B, T): (len(layers), B, heads, T, T) each,
        float32; entries above the diagonal are masked (a large negative score, weight 0)."""
        ...

    def ov_circuit(self, layer: int, head: int) -> OVCircuit | None:
        """W_E, W_V (D, d_head), W_O (d_head, D), W_U of a head in the row-vector convention; None without an
        unembedding."""
        ...

    def ablate_heads(self, heads: Iterable[Head]) -> AbstractContextManager[None]:
        """While open, the heads contribute nothing to their layer's output projection."""
        ...

    def token_losses(self, tokens: torch.Tensor, predicted: Sequence[int] | None = None) -> torch.Tensor:
        """Cross-entropy of predicting the tokens at positions ``predicted`` (each in 1..T-1; None: all of them), no
        gradients: (B, len(predicted)) or (B, T-1); only if ``predicts_tokens``."""
        ...


def check_layers(layers: Sequence[int] | None, n_layers: int) -> list[int]:
    """``layers`` (None: all), sorted and checked against a model of ``n_layers``."""
    if layers is None:
        return list(range(n_layers))
    wrong = [layer for layer in layers if not 0 <= layer < n_layers]
    if wrong or not layers:
        raise UsageError(f"layers={list(layers)} is invalid: the model has {n_layers} layers, give distinct layers "
                         f"in [0, {n_layers - 1}]")
    return sorted(set(layers))


class _RunModel:
    """What a ``HeadModel`` of a primacy model (LanguageModel or SequenceModel) shares: its vocabulary and its
    next-token losses."""

    def __init__(self, model: nn.Module, bos: int) -> None:
        self.model, self.backbone = model, model.backbone
        self.vocab_size, self.bos, self.allowed = model.hparams.vocab_size, bos, None
        self.predicts_tokens = hasattr(model, "token_losses")

    def token_losses(self, tokens: torch.Tensor, predicted: Sequence[int] | None = None) -> torch.Tensor:
        if not self.predicts_tokens:
            raise UsageError(f"{type(self.model).__name__} makes no next-token predictions: the ICL score needs a "
                             f"language model")
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                loss = self.model.token_losses({"tokens": tokens})[0]  # B T-1; column i predicts token i + 1
        finally:
            self.model.train(was_training)
        return loss if predicted is None else loss[:, [p - 1 for p in predicted]]


class RunHeads(_RunModel):
    """``HeadModel`` of a primacy model (LanguageModel or SequenceModel) with a TransformerBackbone."""

    def __init__(self, model: nn.Module, bos: int = BOS) -> None:
        backbone = getattr(model, "backbone", None)
        if not isinstance(backbone, TransformerBackbone):
            raise UsageError(f"backbone {type(backbone).__name__} has no attention heads: use a TransformerBackbone")
        super().__init__(model, bos)
        self.n_layers, self.n_heads = len(backbone.blocks), backbone.n_heads
        self.max_length = backbone.max_length  # learned positions only; sinusoidal ones have no limit

    def attention(self, tokens: torch.Tensor, layers: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.no_grad(), self.backbone.capture_attention() as captured:
            self.backbone(self.model.embedding(tokens))
        chosen = [captured[layer] for layer in layers]
        return torch.stack([a.scores for a in chosen]), torch.stack([a.weights for a in chosen])

    def ov_circuit(self, layer: int, head: int) -> OVCircuit | None:
        unembedding = getattr(self.model, "unembedding", None)
        if not isinstance(unembedding, nn.Linear):  # the verification model's readout is one logit
            return None
        w_v, w_o = self.backbone.ov_weights(layer, head)
        return self.model.embedding.weight, w_v, w_o, unembedding.weight.T

    def ablate_heads(self, heads: Iterable[Head]) -> AbstractContextManager[None]:
        return self.backbone.ablate_heads(heads)


SHARE_FLOOR = 1e-12  # shares below it count as it in the log-share score, so that no score is -inf


def influence_shares(weights: torch.Tensor, group: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-share scores and shares of exact influence weights (B, C, T, T), ``group`` consecutive units summed into
    one: (B, C / group, T, T) each, float32. share[t, s] = Σ_group |w[t, s]| / Σ_{s' ≤ t} Σ_group |w[t, s']| (0 for
    s > t; a row without influence has shares 0); the score is log max(share, SHARE_FLOOR) for s ≤ t and -inf above
    the diagonal, as attention's masked scores."""
    batch, units, length, _ = weights.shape
    magnitude = weights.abs().double().view(batch, units // group, group, length, length).sum(2)  # B U T T
    total = magnitude.sum(-1, keepdim=True)  # B U T 1
    share = torch.where(total > 0, magnitude / total.clamp(min=torch.finfo(torch.float64).tiny), 0.0)
    future = torch.ones(length, length, dtype=torch.bool, device=weights.device).triu(1)  # T T
    scores = share.clamp(min=SHARE_FLOOR).log().masked_fill(future, float("-inf"))
    return scores.float(), share.float()


class InfluenceHeads(_RunModel):
    """``HeadModel`` of a primacy model whose backbone has an exact influence (``Backbone.influence``): its units,
    ``group`` consecutive ones merged, are the heads of every analysis; attention is the units' share of absolute
    influence (module docstring), ablating a head ablates its units (``Backbone.ablate``); no OV circuit (copying NaN).
    Every influence layer must have the same number of units, a multiple of ``group``."""

    def __init__(self, model: nn.Module, bos: int = BOS, group: int = 1) -> None:
        backbone = getattr(model, "backbone", None)
        name = type(backbone).__name__
        if not callable(getattr(backbone, "influence", None)) or not callable(getattr(backbone, "ablate", None)):
            raise UsageError(f"backbone {name} has no exact token-to-token influence: the head analyses need "
                             "attention or an exact mixing form (Transformer, S4, S4D, Mamba, xLSTM with mLSTM "
                             "blocks); an LSTM or sLSTM recurrence has none and is not approximated")
        if group < 1:
            raise UsageError(f"group={group} is invalid: it must be at least 1 (units merged into one head)")
        super().__init__(model, bos)
        self.group = group
        probe = torch.zeros(1, 2, dtype=torch.long, device=model.embedding.weight.device)
        with torch.no_grad():
            layers = backbone.influence(model.embedding(probe))
        self.units, self.unit = [layer.weights.shape[1] for layer in layers], layers[0].unit
        if len(set(self.units)) > 1 or self.units[0] % group:
            raise UsageError(f"backbone {name} has {self.units} units per influence layer: group={group} needs the "
                             f"same number in every layer, a multiple of group")
        self.n_layers, self.n_heads = len(self.units), self.units[0] // group
        self.max_length = getattr(backbone, "max_length", None)

    def attention(self, tokens: torch.Tensor, layers: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                influence = self.backbone.influence(self.model.embedding(tokens))
        finally:
            self.model.train(was_training)
        shares = [influence_shares(influence[layer].weights, self.group) for layer in layers]
        return torch.stack([scores for scores, _ in shares]), torch.stack([share for _, share in shares])

    def ov_circuit(self, layer: int, head: int) -> OVCircuit | None:
        return None

    def ablate_heads(self, heads: Iterable[Head]) -> AbstractContextManager[None]:
        sizes = [self.n_heads] * self.n_layers
        chosen = [unit_pair(item, sizes, "head") for item in heads]
        return self.backbone.ablate([(layer, head * self.group + i) for layer, head in chosen
                                     for i in range(self.group)])


def check_length(model: HeadModel, length: int, what: str) -> None:
    """A one-line error when inputs of ``length`` tokens (``what``) are longer than the model's positions."""
    if model.max_length is not None and length > model.max_length:
        raise UsageError(f"{what} have {length} tokens: the model's positions allow at most {model.max_length}")


def head_model(model: HeadModel | nn.Module, bos: int = BOS, group: int = 1) -> HeadModel:
    """``model`` itself if it already is a HeadModel, else the view of a primacy model: ``RunHeads`` for a
    Transformer, ``InfluenceHeads`` (``group`` units per head) for a backbone with an exact influence; a one-line
    UsageError for any other."""
    if hasattr(model, "ov_circuit"):
        return model
    if isinstance(getattr(model, "backbone", None), TransformerBackbone):
        if group != 1:
            raise UsageError(f"group={group} is invalid for a TransformerBackbone: its heads are its units (group 1)")
        return RunHeads(model, bos)
    return InfluenceHeads(model, bos, group)
