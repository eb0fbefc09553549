"""The grid cells Ji-An et al. (2024) compute in closed form instead of simulating them: the paper variant with
γ_FT = 0 and β_rec = 0 or 1. Their published grid holds these values, so a grid meant to be the paper's does too
(``CMRGrid.build(closed_form=True)``, the default for the paper variant).

With M = ``association(n, β_enc)`` ((n+1) x (n+1), the end state included), start s and lags d = 1..max_lag:

* β_rec = 0: the context never moves from e_s, so every draw comes from p = M[s] / Σ M[s]; the curve at lag d is
  the chance that two independent draws differ by d, Σ_i p_i p_(i+d) (and at -d, Σ_i p_i p_(i-d); at 0, Σ p_i²).
* β_rec = 1: the context becomes the recalled item itself; the curve at lag d > 0 is Σ_i q_i r_i(d), with q the row
  s of M^d normalised to sum 1 and r_i(d) = M[i, i + d] / Σ_j M[i, j], the chance of stepping d forward from i (0
  where i + d is past the end state); negative lags and lag 0 are 0 (M only reaches forward).

Each start's curve is normalised to sum 1 over -max_lag..max_lag and the starts are averaged, as the simulation's are.
"""

from __future__ import annotations

import numpy as np
import torch

from primacy.analysis.behaviour.cmr.simulate import association


def has_closed_form(beta_rec: float, gamma_ft: float) -> bool:
    """Whether the authors compute the cell (β_rec, γ_FT) in closed form."""
    return gamma_ft == 0.0 and beta_rec in (0.0, 1.0)


def closed_form_crp(beta_enc: float, beta_rec: float, n_items: int, n_starts: int, max_lag: int) -> np.ndarray:
    """The authors' closed-form lag-CRP (2·max_lag + 1,) float64 of a cell where ``has_closed_form``."""
    if not has_closed_form(beta_rec, 0.0):
        raise ValueError(f"beta_rec={beta_rec} has no closed form: only 0 and 1 (with gamma_ft 0) have one")
    m = association(n_items, beta_enc).numpy()  # n+1 n+1
    states = m.shape[0]
    curves = np.zeros((n_starts, 2 * max_lag + 1))
    for s in range(n_starts):
        curve = curves[s]
        if beta_rec == 0.0:
            p = m[s] / m[s].sum()  # n+1
            curve[max_lag] = np.sum(p * p)
            for d in range(1, min(states - 1, max_lag + 1)):
                curve[max_lag + d] = np.sum(p[:-d] * p[d:])
                curve[max_lag - d] = np.sum(p[d:] * p[:-d])
        else:
            power, totals = np.eye(states), m.sum(axis=1)  # totals: n+1, 0 for the end state
            for d in range(1, max_lag + 1):
                power = power @ m
                q = power[s] / power[s].sum()
                step = np.zeros(states)
                step[: max(states - d, 0)] = np.diagonal(m, offset=d) / totals[: max(states - d, 0)]
                curve[max_lag + d] = np.sum(q * step)
        curves[s] = curve / curve.sum()
    return curves.mean(axis=0)


def closed_form_crps(params: torch.Tensor | np.ndarray, n_items: int, n_starts: int, max_lag: int
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Which rows (β_enc, β_rec, γ_FT) of ``params`` (G, 3) have a closed form (G,) bool, and their curves (C, K)."""
    params = np.asarray(params, dtype=np.float64).reshape(-1, 3)
    rows = np.array([has_closed_form(b, g) for _, b, g in params], dtype=bool)
    curves = [closed_form_crp(e, b, n_items, n_starts, max_lag) for e, b, _ in params[rows]]
    return rows, np.array(curves).reshape(-1, 2 * max_lag + 1)
