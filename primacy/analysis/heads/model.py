"""What the head analyses need from a model, and that view of a model trained by ``primacy fit``.

``analyze icl`` and ``analyze ablation`` see a model only through ``HeadModel``: its heads' attention on token
sequences, each head's OV circuit, head ablation and next-token losses, plus the vocabulary prompts are drawn from.
``RunHeads`` provides it for a primacy model with a TransformerBackbone;
``primacy.analysis.heads.pretrained.PretrainedHeads`` for a Hugging Face causal language model.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from typing import Protocol

import torch
from torch import nn

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


class RunHeads:
    """``HeadModel`` of a primacy model (LanguageModel or SequenceModel) with a TransformerBackbone."""

    def __init__(self, model: nn.Module, bos: int = BOS) -> None:
        backbone = getattr(model, "backbone", None)
        if not isinstance(backbone, TransformerBackbone):
            raise UsageError(f"backbone {type(backbone).__name__} has no attention heads: use a TransformerBackbone")
        self.model, self.backbone = model, backbone
        self.n_layers, self.n_heads = len(backbone.blocks), backbone.n_heads
        self.vocab_size, self.bos, self.allowed = model.hparams.vocab_size, bos, None
        self.predicts_tokens = hasattr(model, "token_losses")
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


def check_length(model: HeadModel, length: int, what: str) -> None:
    """A one-line error when inputs of ``length`` tokens (``what``) are longer than the model's positions."""
    if model.max_length is not None and length > model.max_length:
        raise UsageError(f"{what} have {length} tokens: the model's positions allow at most {model.max_length}")


def head_model(model: HeadModel | nn.Module, bos: int = BOS) -> HeadModel:
    """``model`` itself if it already is a HeadModel, else the ``RunHeads`` view of a primacy model."""
    return model if hasattr(model, "ov_circuit") else RunHeads(model, bos)
