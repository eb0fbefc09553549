"""Attention-head scores on the repeated-token prompt [BOS] r r (Olsson et al. 2022; Ji-An et al. 2024).

Positions are 0-based: BOS is 0, the first repeat of the n tokens occupies 1..n and the second n+1..2n, so a
query q of the second repeat saw the same token before at p(q) = q - n. A model without a BOS token gets r r: every
function takes ``start``, the position of r's first token (1 after BOS, 0 without). Attention matrices are
(..., T, T), query by key, as captured by ``TransformerBackbone.capture_attention``.
"""

from __future__ import annotations

import torch

# Which second-repeat queries a lag of the attention lag-CRP averages: "paper" (Ji-An et al.'s appendix) takes, per
# lag k, the queries whose first occurrence s (1-based within the repeat) lies in (|k|, n - |k|], so s + k stays in
# the first repeat; "common" takes one query set for every lag, those with every lag's key in the causal window
# (keys may fall in the second repeat at positive lags).
QUERY_WINDOWS = ("paper", "common")


def shortest_prompt(max_lag: int, window: str = "paper") -> int:
    """The smallest n whose lag-CRP over lags ±max_lag has a query at every lag."""
    return 2 * max_lag + 1 if window == "paper" else max_lag + 1


def second_repeat(n: int, start: int = 1) -> torch.Tensor:
    """Query positions of the second repeat, start+n..start+2n-1 (n+1..2n after BOS): (n,)."""
    return torch.arange(start + n, start + 2 * n)


def induction_score(weights: torch.Tensor, n: int, start: int = 1) -> torch.Tensor:
    """Mean post-softmax attention from each second-repeat query q to p(q) + 1, the token that followed the earlier
    occurrence: (..., T, T) -> (...). A perfect induction head scores 1. Only second-repeat rows enter."""
    q = second_repeat(n, start)
    return weights[..., q, q - n + 1].mean(-1)


def duplicate_token_score(weights: torch.Tensor, n: int, start: int = 1) -> torch.Tensor:
    """Mean attention from each second-repeat query q to p(q), the earlier occurrence of its own token."""
    q = second_repeat(n, start)
    return weights[..., q, q - n].mean(-1)


def previous_token_score(weights: torch.Tensor) -> torch.Tensor:
    """Mean attention from every position q >= 1 to q - 1."""
    q = torch.arange(1, weights.shape[-1])
    return weights[..., q, q - 1].mean(-1)


def lag_profile(scores: torch.Tensor, queries: torch.Tensor, anchors: torch.Tensor, lags: torch.Tensor,
                start: int = 1) -> torch.Tensor:
    """Mean of scores[q, anchor(q) + lag] over queries, for each lag: (..., T, T) -> (..., len(lags)).

    A key is valid when start <= anchor + lag <= q (a token of the sequence, not BOS, and not in the query's future).
    Only queries for which every lag is valid enter, so every lag averages the same queries and masked entries
    never do. Raises if no query qualifies.
    """
    keys = anchors[:, None] + lags[None, :]  # Q lags
    valid = ((keys >= start) & (keys <= queries[:, None])).all(dim=1)  # Q
    if not valid.any():
        raise ValueError(f"no query has every lag {lags.tolist()} within its causal window")
    q, k = queries[valid], keys[valid]  # Q', Q' lags
    return scores[..., q[:, None], k].mean(-2)


def attention_lag_crp(scores: torch.Tensor, n: int, max_lag: int = 5, start: int = 1,
                      window: str = "paper") -> tuple[torch.Tensor, torch.Tensor]:
    """The attention lag-CRP: mean pre-softmax score at p(q) + lag over second-repeat queries q, lags -max..+max,
    over the queries ``window`` (``QUERY_WINDOWS``) gives each lag.

    Returns (lags (2·max_lag + 1,), profile (..., 2·max_lag + 1)). An induction head peaks at +1.
    """
    lags = torch.arange(-max_lag, max_lag + 1)
    if window == "common":
        q = second_repeat(n, start)
        return lags, lag_profile(scores, q, q - n, lags, start)
    if window != "paper":
        raise ValueError(f"window={window!r} is unknown: choose one of {QUERY_WINDOWS}")
    if n < shortest_prompt(max_lag):
        raise ValueError(f"n={n} is too short for the paper's query window at lags ±{max_lag}: it needs n >= "
                         f"{shortest_prompt(max_lag)}")
    profile = []
    for k in lags.tolist():
        s = torch.arange(abs(k) + 1, n - abs(k) + 1)  # the first occurrence's index in the repeat, 1-based
        first = start + s - 1  # its position
        profile.append(scores[..., first + n, first + k].mean(-1))
    return lags, torch.stack(profile, dim=-1)


def copying_score(w_e: torch.Tensor, w_v: torch.Tensor, w_o: torch.Tensor, w_u: torch.Tensor) -> torch.Tensor:
    """Σλ / Σ|λ| over the eigenvalues λ of a head's full OV circuit W_E W_V W_O W_U (V x V), in [-1, 1].

    w_e (V, D) embedding, w_v (D, d_head) the head's value map, w_o (d_head, D) its output map, w_u (D, V)
    unembedding (row-vector convention: a token's logits are e W_V W_O W_U). The non-zero eigenvalues of X Y equal
    those of Y X, so the d_head x d_head product W_O W_U W_E W_V is decomposed instead of the V x V one.
    Positive means the head copies the attended token to the output.
    """
    return ov_copying_score(w_v, w_o, unembed_embed(w_e, w_u)).to(w_e.dtype)


def unembed_embed(w_e: torch.Tensor, w_u: torch.Tensor, chunk: int = 8192) -> torch.Tensor:
    """W_U W_E (D, D) in float32, summed over vocabulary chunks so no float32 copy of a large vocabulary is made;
    shared by every head's copying score."""
    total = torch.zeros(w_u.shape[0], w_e.shape[1], dtype=torch.float32, device=w_e.device)  # D D
    for begin in range(0, w_e.shape[0], chunk):
        total += w_u[:, begin : begin + chunk].float() @ w_e[begin : begin + chunk].float()
    return total


def ov_copying_score(w_v: torch.Tensor, w_o: torch.Tensor, ue: torch.Tensor) -> torch.Tensor:
    """``copying_score`` from a head's W_V (D, d_head), W_O (d_head, D) and ``unembed_embed`` (D, D), in float64."""
    small = w_o.double() @ ue.double() @ w_v.double()  # d_head d_head
    eig = torch.linalg.eigvals(small)
    return eig.sum().real / eig.abs().sum()
