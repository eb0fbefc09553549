"""Every attention head of a model on the [BOS] r r prompt: induction, duplicate-token, previous-token and copying
scores, the attention lag-CRP, and its CMR and Gaussian fits (Ji-An et al. 2024, Fig. 5 and 6)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import torch
from torch import nn

from primacy.analysis.cmr_grid import CMRGrid
from primacy.analysis.fits import fit_cmr, fit_gaussian
from primacy.analysis.heads import (
    attention_lag_crp,
    copying_score,
    duplicate_token_score,
    induction_score,
    previous_token_score,
)
from primacy.errors import UsageError

CMR_LIKE = 0.5  # CMR distance below which a head counts as CMR-like (the paper's threshold)


@dataclass(frozen=True)
class HeadResult:
    """One head's scores and fits; the columns of heads.csv. Layers and heads are 0-based."""

    layer: int
    head: int
    induction: float
    duplicate_token: float
    previous_token: float
    copying: float  # NaN when the model has no unembedding (the verification model's readout is one logit)
    lag_crp_peak: int  # the lag of the lag-CRP's maximum
    cmr_distance: float  # NaN when the lag-CRP is flat
    beta_enc: float
    beta_rec: float
    gamma_ft: float
    inv_temperature: float
    gaussian_distance: float

    @property
    def cmr_like(self) -> bool:
        return bool(self.cmr_distance < CMR_LIKE)

    def row(self) -> dict:
        return {**asdict(self), "cmr_like": self.cmr_like}


@dataclass(frozen=True)
class HeadAnalysis:
    """All heads of a model: the table, the lag-CRPs (layers, heads, lags) and the prompt-averaged attention."""

    heads: list[HeadResult]
    lags: np.ndarray  # (K,)
    lag_crps: np.ndarray  # (layers, heads, K) mean pre-softmax score by lag
    cmr_fits: np.ndarray  # (layers, heads, K) the scaled CMR CRP, comparable with lag_crp - its minimum
    gaussian_fits: np.ndarray  # (layers, heads, K)
    attention: np.ndarray  # (layers, heads, T, T) post-softmax weights of the first prompt
    prompt: np.ndarray  # (T,) the first prompt's tokens
    n_items: int

    def by_induction(self) -> list[HeadResult]:
        """Heads by induction score, highest first."""
        return sorted(self.heads, key=lambda h: -h.induction)


def capture(model: nn.Module, prompts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Pre- and post-softmax attention of every layer on ``prompts`` (B, T): (layers, B, heads, T, T) each."""
    backbone = getattr(model, "backbone", None)
    if not hasattr(backbone, "capture_attention"):
        raise UsageError(f"backbone {type(backbone).__name__} has no attention to capture: use a TransformerBackbone")
    with torch.no_grad(), backbone.capture_attention() as layers:
        model.backbone(model.embedding(prompts))
    return torch.stack([a.scores for a in layers]), torch.stack([a.weights for a in layers])


def analyze_heads(model: nn.Module, prompts: torch.Tensor, n_items: int, grid: CMRGrid,
                  alignment: str = "peak") -> HeadAnalysis:
    """Scores and fits of every head on [BOS] r r prompts (B, 2n + 1), averaged over prompts; ``alignment`` is
    how CMR CRPs are mapped onto a lag-CRP (``fit_cmr``)."""
    if prompts.shape[1] != 2 * n_items + 1:
        raise UsageError(f"prompts have length {prompts.shape[1]}: a [BOS] r r prompt of n_items={n_items} "
                         f"has length {2 * n_items + 1}")
    scores, weights = capture(model, prompts)  # layers B heads T T
    lags, crps = attention_lag_crp(scores, n_items)  # K, (layers B heads K)
    crps = crps.mean(1).double().numpy()  # layers heads K
    per_head = {
        "induction": induction_score(weights, n_items).mean(1),
        "duplicate_token": duplicate_token_score(weights, n_items).mean(1),
        "previous_token": previous_token_score(weights).mean(1),
    }  # each (layers, heads)
    closed = isinstance(getattr(model, "unembedding", None), nn.Linear)  # an OV circuit needs W_U
    lags = lags.numpy()
    heads, cmr_fits, gauss_fits = [], np.full_like(crps, np.nan), np.full_like(crps, np.nan)
    with torch.no_grad():
        for layer in range(crps.shape[0]):
            for head in range(crps.shape[1]):
                curve = crps[layer, head]
                copying = float("nan")
                if closed:
                    w_v, w_o = model.backbone.ov_weights(layer, head)
                    copying = float(copying_score(model.embedding.weight, w_v, w_o, model.unembedding.weight.T))
                fits = {"cmr_distance": np.nan, "beta_enc": np.nan, "beta_rec": np.nan, "gamma_ft": np.nan,
                        "inv_temperature": np.nan, "gaussian_distance": np.nan}
                if np.ptp(curve) > 0:
                    cmr, gauss = fit_cmr(curve, lags, grid, alignment=alignment), fit_gaussian(curve, lags)
                    fits = {"cmr_distance": cmr.distance, "beta_enc": cmr.beta_enc, "beta_rec": cmr.beta_rec,
                            "gamma_ft": cmr.gamma_ft, "inv_temperature": cmr.inv_temperature,
                            "gaussian_distance": gauss.distance}
                    cmr_fits[layer, head], gauss_fits[layer, head] = cmr.fitted, gauss.fitted
                heads.append(HeadResult(
                    layer=layer, head=head, copying=copying, lag_crp_peak=int(lags[curve.argmax()]),
                    **{k: float(v[layer, head]) for k, v in per_head.items()}, **fits))
    return HeadAnalysis(heads, lags, crps, cmr_fits, gauss_fits, weights[:, 0].numpy(), prompts[0].numpy(), n_items)


def summary(analysis: HeadAnalysis, top: int = 4) -> dict:
    """summary.json: the prompt, counts of CMR-like heads per layer and the top heads by induction score."""
    layers = sorted({h.layer for h in analysis.heads})
    return {
        "n_items": analysis.n_items,
        "n_layers": len(layers),
        "n_heads": len(analysis.heads) // len(layers),
        "cmr_like_threshold": CMR_LIKE,
        "cmr_like_share_by_layer": [float(np.mean([h.cmr_like for h in analysis.heads if h.layer == layer]))
                                    for layer in layers],
        "top_induction_heads": [h.row() for h in analysis.by_induction()[:top]],
        "lags": analysis.lags.tolist(),
    }
