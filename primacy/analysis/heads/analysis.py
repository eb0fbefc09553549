"""Every attention head of a model on the [BOS] r r prompt: induction, duplicate-token, previous-token and copying
scores, the attention lag-CRP, and its CMR and Gaussian fits (Ji-An et al. 2024, Fig. 5 and 6)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
import torch
from torch import nn

from primacy.analysis.behaviour.cmr.fits import FIT_LAGS, CMRFit, GaussianFit, fit_cmr, fit_gaussian, is_flat
from primacy.analysis.behaviour.cmr.grid import CMRGrid
from primacy.analysis.heads.model import HeadModel, check_layers, head_model
from primacy.analysis.heads.scores import (
    QUERY_WINDOWS,
    attention_lag_crp,
    duplicate_token_score,
    induction_score,
    ov_copying_score,
    previous_token_score,
    shortest_prompt,
    unembed_embed,
)
from primacy.checks import one_of
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
    cmr_distance: float  # NaN when the lag-CRP is flat (``is_flat``)
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
    """The analysed heads of a model: the table, the lag-CRPs (layers, heads, lags) and the first prompt's
    attention. Axis 0 of the arrays runs over ``layers``, the model layers analysed."""

    heads: list[HeadResult]
    lags: np.ndarray  # (K,)
    lag_crps: np.ndarray  # (layers, heads, K) mean pre-softmax score by lag
    cmr_fits: np.ndarray  # (layers, heads, K) the scaled CMR CRP, comparable with lag_crp - its minimum
    gaussian_fits: np.ndarray  # (layers, heads, K)
    attention: np.ndarray  # (layers, heads, T, T) post-softmax weights of the first prompt
    prompt: np.ndarray  # (T,) the first prompt's tokens
    n_items: int
    layers: tuple[int, ...] = ()  # model layer of each row of the arrays; () means 0, 1, ...
    start: int = 1  # position of r's first token: 1 after BOS, 0 for a model without one

    def by_induction(self) -> list[HeadResult]:
        """Heads by induction score, highest first."""
        return sorted(self.heads, key=lambda h: -h.induction)

    def at(self, head: HeadResult) -> tuple[int, int]:
        """Index of ``head`` into the (layers, heads, ...) arrays."""
        return (self.layers.index(head.layer) if self.layers else head.layer), head.head


def check_prompt_items(n_items: int, window: str = "paper") -> None:
    """n, the length of r, is long enough for the lag-CRP: a second-repeat query at every lag (``QUERY_WINDOWS``)."""
    one_of("query_window", window, QUERY_WINDOWS)
    shortest = shortest_prompt(int(FIT_LAGS.max()), window)
    if n_items < shortest:
        raise UsageError(f"n_items={n_items} is invalid: the lag-CRP over lags ±{FIT_LAGS.max()} with "
                         f"query_window={window!r} needs n_items >= {shortest}")


FIT_COLUMNS = ("cmr_distance", "beta_enc", "beta_rec", "gamma_ft", "inv_temperature", "gaussian_distance")


def fit_head(curve: np.ndarray, lags: np.ndarray, grid: CMRGrid,
             alignment: str = "peak") -> tuple[dict[str, float], CMRFit | None, GaussianFit | None]:
    """A head's fit columns of the table (``FIT_COLUMNS``) and its CMR and Gaussian fits, from its lag-CRP (K,) on
    ``lags`` (K,). A flat lag-CRP (``is_flat``: constant up to rounding) has no fit: every column NaN, both fits None,
    so the head is not CMR-like."""
    if is_flat(curve):
        return dict.fromkeys(FIT_COLUMNS, float("nan")), None, None
    cmr, gauss = fit_cmr(curve, lags, grid, alignment=alignment), fit_gaussian(curve, lags)
    columns = {"cmr_distance": cmr.distance, "beta_enc": cmr.beta_enc, "beta_rec": cmr.beta_rec,
               "gamma_ft": cmr.gamma_ft, "inv_temperature": cmr.inv_temperature, "gaussian_distance": gauss.distance}
    return columns, cmr, gauss


def capture(model: HeadModel | nn.Module, prompts: torch.Tensor,
            layers: Sequence[int] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Pre- and post-softmax attention of ``layers`` (None: every layer) on ``prompts`` (B, T): (layers, B, heads,
    T, T) each."""
    model = head_model(model)
    return model.attention(prompts, check_layers(layers, model.n_layers))


@dataclass(frozen=True)
class HeadScores:
    """Every head's scores on the prompts, averaged over them, and its fits. Axis 0 runs over ``layers``."""

    layers: tuple[int, ...]  # the model layers scored
    start: int  # position of r's first token: 1 after BOS, 0 for a model without one
    lags: np.ndarray  # (K,)
    induction: np.ndarray  # (layers, heads)
    duplicate_token: np.ndarray  # (layers, heads)
    previous_token: np.ndarray  # (layers, heads)
    lag_crps: np.ndarray  # (layers, heads, K) mean pre-softmax score by lag
    fits: dict[str, np.ndarray]  # FIT_COLUMNS -> (layers, heads); NaN for a flat lag-CRP
    cmr_fits: np.ndarray  # (layers, heads, K) the scaled CMR CRP, comparable with lag_crp - its minimum; NaN if flat
    gaussian_fits: np.ndarray  # (layers, heads, K)
    attention: np.ndarray  # (layers, heads, T, T) post-softmax weights of the first prompt

    @property
    def lag_crp_peak(self) -> np.ndarray:
        """(layers, heads) int64: the lag of each lag-CRP's maximum."""
        return self.lags[self.lag_crps.argmax(-1)].astype(np.int64)


def score_heads(model: HeadModel | nn.Module, prompts: torch.Tensor, n_items: int, grid: CMRGrid,
                alignment: str = "peak", layers: Sequence[int] | None = None, batch_size: int = 64,
                window: str = "paper") -> HeadScores:
    """The induction, duplicate-token and previous-token scores and the attention lag-CRP of every head of ``layers``
    (None: all) on [BOS] r r prompts (P, 2n + 1), or r r (P, 2n) for a model without BOS, averaged over prompts in
    float64, and each lag-CRP's CMR and Gaussian fits (``fit_head``). The one scoring of heads: ``analyze_heads`` and
    ``HeadScoreTracker`` both use it. ``alignment`` is how CMR CRPs are mapped onto a lag-CRP (``fit_cmr``),
    ``window`` which queries each lag of the lag-CRP averages (``QUERY_WINDOWS``). Prompts run ``batch_size`` at a
    time and only per-head sums are kept, so memory does not grow with their number."""
    model = head_model(model)
    start = 0 if model.bos is None else 1
    check_prompt_items(n_items, window)
    if prompts.shape[1] != 2 * n_items + start:
        what = "an r r prompt (the model has no BOS)" if start == 0 else "a [BOS] r r prompt"
        raise UsageError(f"prompts have length {prompts.shape[1]}: {what} of n_items={n_items} has length "
                         f"{2 * n_items + start}")
    chosen = check_layers(layers, model.n_layers)
    sums: dict[str, torch.Tensor] = {}
    for begin in range(0, len(prompts), batch_size):
        scores, weights = model.attention(prompts[begin : begin + batch_size], chosen)  # layers b heads T T
        lags, crps = attention_lag_crp(scores.double(), n_items, start=start, window=window)  # K, (layers b heads K)
        batch = {"lag_crp": crps, "induction": induction_score(weights, n_items, start),
                 "duplicate_token": duplicate_token_score(weights, n_items, start),
                 "previous_token": previous_token_score(weights)}  # each (layers, b, heads, ...)
        for key, value in batch.items():
            sums[key] = sums.get(key, 0) + value.double().sum(1)
        if begin == 0:
            first = weights[:, 0].float().cpu().numpy()  # layers heads T T
    means = {key: (value / len(prompts)).cpu().numpy() for key, value in sums.items()}
    crps, lags = means.pop("lag_crp"), lags.numpy()  # layers heads K
    fits = {column: np.full(crps.shape[:2], np.nan) for column in FIT_COLUMNS}
    cmr_fits, gauss_fits = np.full_like(crps, np.nan), np.full_like(crps, np.nan)
    for head in np.ndindex(crps.shape[:2]):
        columns, cmr, gauss = fit_head(crps[head], lags, grid, alignment)
        for column, value in columns.items():
            fits[column][head] = value
        if cmr is not None:
            cmr_fits[head], gauss_fits[head] = cmr.fitted, gauss.fitted
    return HeadScores(tuple(chosen), start, lags, means["induction"], means["duplicate_token"],
                      means["previous_token"], crps, fits, cmr_fits, gauss_fits, first)


def analyze_heads(model: HeadModel | nn.Module, prompts: torch.Tensor, n_items: int, grid: CMRGrid,
                  alignment: str = "peak", layers: Sequence[int] | None = None, batch_size: int = 64,
                  window: str = "paper") -> HeadAnalysis:
    """``score_heads`` of every head of ``layers`` (None: all), with each head's copying score (NaN for a model
    without an unembedding), as the table of heads and its arrays."""
    model = head_model(model)
    scored = score_heads(model, prompts, n_items, grid, alignment, layers, batch_size, window)
    peaks, heads, ue = scored.lag_crp_peak, [], None
    with torch.no_grad():
        for row, layer in enumerate(scored.layers):
            for head in range(model.n_heads):
                copying, circuit = float("nan"), model.ov_circuit(layer, head)
                if circuit is not None:
                    w_e, w_v, w_o, w_u = circuit
                    ue = unembed_embed(w_e, w_u) if ue is None else ue  # the same for every head
                    copying = float(ov_copying_score(w_v, w_o, ue))
                heads.append(HeadResult(
                    layer=layer, head=head, copying=copying, lag_crp_peak=int(peaks[row, head]),
                    induction=float(scored.induction[row, head]),
                    duplicate_token=float(scored.duplicate_token[row, head]),
                    previous_token=float(scored.previous_token[row, head]),
                    **{column: float(values[row, head]) for column, values in scored.fits.items()}))
    return HeadAnalysis(heads, scored.lags, scored.lag_crps, scored.cmr_fits, scored.gaussian_fits, scored.attention,
                        prompts[0].cpu().numpy(), n_items, scored.layers, scored.start)


def summary(analysis: HeadAnalysis, top: int = 4) -> dict:
    """summary.json: the prompt, counts of CMR-like heads per layer and the top heads by induction score."""
    layers = sorted({h.layer for h in analysis.heads})
    return {
        "n_items": analysis.n_items,
        "bos": analysis.start == 1,
        "layers": layers,
        "n_layers": len(layers),
        "n_heads": len(analysis.heads) // len(layers),
        "cmr_like_threshold": CMR_LIKE,
        "cmr_like_share_by_layer": [float(np.mean([h.cmr_like for h in analysis.heads if h.layer == layer]))
                                    for layer in layers],
        "top_induction_heads": [h.row() for h in analysis.by_induction()[:top]],
        "lags": analysis.lags.tolist(),
    }
