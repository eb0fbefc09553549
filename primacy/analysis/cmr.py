"""The context maintenance and retrieval model (CMR) of free recall, as the CRP simulation of Ji-An et al. (2024).

Variant ``paper`` (what the paper's code simulates): n one-hot items studied in order, then an absorbing end
state (index n). The study context is a leaky trace with decay ρ = 1 - β_enc, and one matrix serves both
item -> context and context -> item associations:

    M[i, j] = ρ^(j - i - 1) for j > i, else 0          ((n+1) x (n+1), the end state included)

A recall chain starts from the context of one study position s (t = e_s, the previous item being s) and at
each step draws item j (or the end, which stops the chain) with probability a_j / Σa, a = Mᵀ t, sampling with
replacement; records the lag j - previous; and updates

    t_IN = normalise((1 - γ_FT) e_j + γ_FT M e_j),    t = normalise((1 - β_rec) t + β_rec t_IN)   (L2 norms).

The simulation keeps only a = Mᵀt, never t or a matrix product with it. a follows t's linear update,
a' = ((1 - β_rec) a + β_rec Mᵀ t_IN) / |...|, where Mᵀ t_IN is a row of the precomputed (1 - γ_FT) M + γ_FT MᵀM;
the norm needs t·t_IN = ((1 - γ_FT) t_j + γ_FT a_j) / |(1 - γ_FT) e_j + γ_FT M e_j|, and t_j = a_{j+1} - ρ a_j
because a_{j+1} = ρ a_j + t_j (M is a first-order recursive filter over item index). Each step costs O(n) per
chain.
"""

from __future__ import annotations

from typing import Literal

import torch

from primacy.errors import UsageError

Variant = Literal["paper"]


def association(n_items: int, beta_enc: float) -> torch.Tensor:
    """M (n+1, n+1) float64: M[i, j] = (1 - β_enc)^(j - i - 1) for j > i; index n is the end state."""
    i = torch.arange(n_items + 1, dtype=torch.float64)
    gap = i[None, :] - i[:, None] - 1  # j - i - 1
    decay = torch.tensor(1.0 - beta_enc, dtype=torch.float64)
    return torch.where(gap >= 0, decay ** gap.clamp(min=0), torch.zeros((), dtype=torch.float64))


def draw(weights: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One index per row with probability weights / row sum (R, S) -> (R,), by inverting the cumulative sum
    (several times faster than torch.multinomial here)."""
    cdf = weights.cumsum(1)  # R S
    u = torch.rand(len(weights), 1, generator=generator, dtype=weights.dtype) * cdf[:, -1:]  # R 1
    return torch.searchsorted(cdf, u, right=True)[:, 0].clamp(max=weights.shape[1] - 1)


def _check(beta_enc: float, beta_rec: float, gamma_ft: float, variant: str) -> None:
    if variant != "paper":
        raise UsageError(f"variant={variant!r} is unknown: choose paper")
    if not 0 < beta_enc <= 1:
        raise UsageError(f"beta_enc={beta_enc} is invalid: it must lie in (0, 1]")
    for name, value in (("beta_rec", beta_rec), ("gamma_ft", gamma_ft)):
        if not 0 <= value <= 1:
            raise UsageError(f"{name}={value} is invalid: it must lie in [0, 1]")


def cmr_crp(
    beta_enc: float,
    beta_rec: float,
    gamma_ft: float,
    *,
    variant: Variant = "paper",
    seed: int = 0,
    n_items: int = 100,
    n_starts: int = 20,
    n_chains: int = 1000,
    max_samples: int = 50,
    max_lag: int = 8,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The simulated lag-CRP over lags -max_lag..+max_lag: (lags (2·max_lag+1,), crp (2·max_lag+1,) float64).

    Chains start at each of the first ``n_starts`` positions, ``n_chains`` each, at most ``max_samples`` draws.
    Per chain, the counts of each lag are divided by its number of item draws; chains are averaged, the curve is
    normalised to sum 1 over the lags, and the start positions are averaged. Chains that end before drawing an
    item do not enter. Deterministic given ``seed``.
    """
    _check(beta_enc, beta_rec, gamma_ft, variant)
    if not 1 <= n_starts <= n_items:
        raise UsageError(f"n_starts={n_starts} is invalid: it must lie in [1, n_items={n_items}]")
    generator = torch.Generator().manual_seed(seed)
    m = association(n_items, beta_enc)  # S S, S = n + 1 states
    g, rho = gamma_ft, 1.0 - beta_enc
    # Row j of H is Mᵀ((1 - γ) e_j + γ M e_j): MᵀM is symmetric, so its row j is Mᵀ(M e_j).
    h = (1 - g) * m + g * (m.T @ m)  # S S
    norm_in = torch.sqrt((1 - g) ** 2 + g**2 * (m**2).sum(0))  # S: |(1 - γ) e_j + γ M e_j|, as M[j, j] = 0

    starts = torch.arange(n_starts).repeat_interleave(n_chains)  # R: R = starts · chains
    rows = torch.arange(len(starts))
    a = m[starts].clone()  # R S: Mᵀ e_s = row s of M
    previous = starts.clone()
    active = torch.ones(len(starts), dtype=torch.bool)
    counts = torch.zeros(len(starts), 2 * max_lag + 1, dtype=torch.float64)  # R lags
    draws = torch.zeros(len(starts), dtype=torch.float64)  # R

    for _ in range(max_samples):
        j = draw(a, generator)  # R
        active &= j != n_items  # the end state absorbs
        lag = j - previous
        counted = active & (lag.abs() <= max_lag)
        counts[rows[counted], (lag[counted] + max_lag)] += 1.0
        draws += active.double()
        if not active.any():
            break

        j_next = (j + 1).clamp(max=n_items)  # j < n for every active chain
        t_j = a[rows, j_next] - rho * a[rows, j]  # R: a_{j+1} = ρ a_j + t_j, so t is never stored
        dot = ((1 - g) * t_j + g * a[rows, j]) / norm_in[j]  # R: t · t_IN, with a_j = t · M e_j
        norm = torch.sqrt((1 - beta_rec) ** 2 + beta_rec**2 + 2 * beta_rec * (1 - beta_rec) * dot)  # R
        scale_t = torch.where(active, (1 - beta_rec) / norm, 1.0)[:, None]  # R 1: stopped chains keep a
        scale_in = torch.where(active, beta_rec / (norm * norm_in[j]), 0.0)[:, None]  # R 1
        a.mul_(scale_t).addcmul_(h[j], scale_in)  # R S: Mᵀ t for the new t
        previous = torch.where(active, j, previous)

    recalled = draws > 0
    per_chain = counts[recalled] / draws[recalled, None]  # R' lags
    per_start = torch.zeros(n_starts, 2 * max_lag + 1, dtype=torch.float64).index_add_(0, starts[recalled], per_chain)
    per_start /= torch.bincount(starts[recalled], minlength=n_starts).clamp(min=1)[:, None].double()
    total = per_start.sum(1, keepdim=True)
    usable = total[:, 0] > 0
    crp = (per_start[usable] / total[usable]).mean(0)
    return torch.arange(-max_lag, max_lag + 1), crp
