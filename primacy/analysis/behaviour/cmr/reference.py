"""The CMR simulation of ``primacy.analysis.behaviour.cmr.simulate`` written plainly (float64, one parameter set,
explicit contexts and matrices for the canonical variant): the reference the tests hold the fast path to, draw for
draw."""

from __future__ import annotations

from typing import Unpack

import torch

from primacy.analysis.behaviour.cmr.simulate import association, draw, drift, mean_lag_curve
from primacy.analysis.behaviour.cmr.simulation import Simulation, SimulationSettings, check_simulation


def reference_crp(beta_enc: float, beta_rec: float, gamma_ft: float, simulation: Simulation | None = None,
                  **settings: Unpack[SimulationSettings]) -> tuple[torch.Tensor, torch.Tensor]:
    """``cmr_crp`` written plainly, float64, one set: the check on the fast path (same draws for the same seed).
    ``paper``: the simulation before the batched path (about 0.5 s per set at the paper's size on an idle core,
    5 to 6 times the batched float32 path): a = Mᵀt kept whole, updated from rows of (1 - γ) M + γ MᵀM, a cumulative
    sum per draw (the tests check it against explicit context vectors t).
    ``canonical``: explicit study contexts built by ``drift``, explicit M_CF and M_FC, explicit contexts per chain.
    The settings are ``simulation``'s with the keyword ``settings`` over it; its dtype is not used."""
    sim = check_simulation(torch.tensor([[beta_enc, beta_rec, gamma_ft]], dtype=torch.float64), simulation,
                           **settings)
    variant, temperature, n_items, n_starts, max_lag = (sim.variant, sim.temperature, sim.n_items, sim.n_starts,
                                                        sim.max_lag)
    generator = torch.Generator().manual_seed(sim.seed)
    starts = torch.arange(n_starts).repeat_interleave(sim.n_chains)  # R: R = starts · chains
    rows = torch.arange(len(starts))
    counts = torch.zeros(len(starts), sim.n_lags, dtype=torch.float64)  # R lags
    draws = torch.zeros(len(starts), dtype=torch.float64)  # R
    previous = starts.clone()
    active = torch.ones(len(starts), dtype=torch.bool)
    g = gamma_ft

    if variant == "paper":
        m = association(n_items, beta_enc)  # S S, S = n + 1 states
        h = (1 - g) * m + g * (m.T @ m)  # S S: row j is Mᵀ((1 - γ) e_j + γ M e_j)
        norm_in = torch.sqrt((1 - g) ** 2 + g**2 * (m**2).sum(0))  # S
        a = m[starts].clone()  # R S: Mᵀ e_s = row s of M
    else:
        context = torch.zeros(n_items + 1, dtype=torch.float64)
        context[0] = 1.0
        contexts = [context]
        for i in range(n_items):
            context = drift(context, torch.eye(n_items + 1, dtype=torch.float64)[i + 1], beta_enc)
            contexts.append(context)
        m_cf = torch.stack(contexts[:n_items])  # n n+1: Σ f_i c_(i-1)ᵀ
        m_fc = (1 - g) * torch.eye(n_items + 1, dtype=torch.float64)[:, 1:] + g * m_cf.T  # n+1 n
        c = torch.stack(contexts)[starts + 1]  # R n+1: c_s

    for _ in range(sim.draws):
        if variant == "paper":
            item = draw(a, generator)  # R
            active &= item != n_items  # the end state absorbs
        else:
            a = c @ m_cf.T  # R n
            item = draw(torch.exp((a - a.amax(1, keepdim=True)) / temperature), generator)
        lag = item - previous
        counted = active & (lag.abs() <= max_lag)
        counts[rows[counted], (lag[counted] + max_lag)] += 1.0
        draws += active.double()
        if not active.any():
            break
        if variant == "paper":
            t_j = a[rows, (item + 1).clamp(max=n_items)] - (1 - beta_enc) * a[rows, item]  # R: a_{j+1} = ρ a_j + t_j
            dot = ((1 - g) * t_j + g * a[rows, item]) / norm_in[item]  # R: t · t_IN, with a_j = t · M e_j
            norm = torch.sqrt((1 - beta_rec) ** 2 + beta_rec**2 + 2 * beta_rec * (1 - beta_rec) * dot)  # R
            scale_t = torch.where(active, (1 - beta_rec) / norm, 1.0)[:, None]  # R 1: stopped chains keep a
            scale_in = torch.where(active, beta_rec / (norm * norm_in[item]), 0.0)[:, None]  # R 1
            a = scale_t * a + scale_in * h[item]  # R S: Mᵀ t for the new t
        else:
            c_in = m_fc[:, item].T  # R n+1
            c = drift(c, c_in / c_in.norm(dim=1, keepdim=True), beta_rec)
        previous = torch.where(active, item, previous)

    recalled = draws > 0
    per_chain = counts[recalled] / draws[recalled, None]  # R' lags
    per_start = torch.zeros(n_starts, sim.n_lags, dtype=torch.float64).index_add_(0, starts[recalled], per_chain)
    chains = torch.bincount(starts[recalled], minlength=n_starts).double()
    return sim.lags(), mean_lag_curve(per_start, chains)
