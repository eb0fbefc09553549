"""The context maintenance and retrieval model (CMR) of free recall: its simulated lag-CRP, for one parameter set
(``cmr_crp``) or many at once (``cmr_crps``, what a fitting grid uses), in two variants.

Variant ``paper`` (what the code of Ji-An et al. 2024 simulates): n one-hot items studied in order, then an
absorbing end state (index n). The study context is a leaky trace with decay ρ = 1 - β_enc, and one matrix serves
both item -> context and context -> item associations:

    M[i, j] = ρ^(j - i - 1) for j > i, else 0          ((n+1) x (n+1), the end state included)

A recall chain starts from the context of one study position s (t = e_s, the previous item being s) and at each
step draws item j (or the end, which stops the chain) with probability a_j / Σa, a = Mᵀ t, sampling with
replacement; records the lag j - previous; and updates

    t_IN = normalise((1 - γ_FT) e_j + γ_FT M e_j),    t = normalise((1 - β_rec) t + β_rec t_IN)   (L2 norms).

Variant ``canonical`` (Howard & Kahana 2002; Polyn, Norman & Kahana 2009): a unit-norm context over a start
dimension d_0 and one dimension d_(i+1) per item i drifts as c ← ρ c + β c_IN, ρ = sqrt(1 + β²((c·c_IN)² - 1))
- β (c·c_IN), which keeps |c| = 1 (``drift``). Studying item i (c_IN = d_(i+1), orthogonal to c) gives the study
contexts c_(-1) = d_0, c_i = sqrt(1 - β_enc²) c_(i-1) + β_enc d_(i+1) (``study_contexts``). Item i is associated
with the context that preceded it, c_(i-1): M_CF = Σ f_i c_(i-1)ᵀ, M_FC = (1 - γ_FT) I + γ_FT Σ c_(i-1) f_iᵀ, I
mapping item i to d_(i+1). A chain starts from c = c_s (the context that cues item s + 1, previous item s), draws
item j with probability softmax(a / temperature), a = M_CF c (cosines in [0, 1]), and drifts with β_rec towards
c_IN = normalise(M_FC f_j). There is no end state: every chain draws exactly ``max_samples`` items.

Both variants count, per chain, the lags in [-max_lag, max_lag] divided by the chain's number of item draws;
average the chains of each start, normalise the curve to sum 1 and average the starts.

The fast path (``cmr_crps``) never forms a context. In both variants the activation vector a changes linearly,
a' = κ a + b·H[j], with per-chain scalars κ, b and a table H per parameter set (row j: a's change after recalling j),
and obeys a first-order recursion over item index that gives the one context component the scalars need: paper
a_(j+1) = ρ a_j + t_j; canonical a_(j+1) = ρ_enc a_j + β_enc c[d_(j+1)] (a_n = c_(n-1)·c kept as an extra entry).
So a chain step is O(n). The paper variant keeps cumsum(a) instead of a (cumsum is linear: the draw needs no
cumulative sum), and both keep the vector as a scale σ times a convex combination, σ'·â' = κσ·â + b·H[j], so that
one lerp updates it. Many chains of many parameter sets run as one batch, H rows gathered per chain; chains that
reached the end state are dropped. The random numbers are one uniform per chain and step, shared by all sets.
``reference_crp`` is the same simulation written plainly (float64, one set; explicit contexts and matrices for
``canonical``): the tests hold the fast path to it draw for draw, and float32 to float64 within Monte-Carlo noise.
"""

from __future__ import annotations

from typing import Unpack

import torch

# The settings live in simulation.py; their names stay importable from here, where they were defined before.
from primacy.analysis.behaviour.cmr.simulation import DEFAULT_SAMPLES as DEFAULT_SAMPLES
from primacy.analysis.behaviour.cmr.simulation import DEFAULT_TEMPERATURE as DEFAULT_TEMPERATURE
from primacy.analysis.behaviour.cmr.simulation import VARIANTS as VARIANTS
from primacy.analysis.behaviour.cmr.simulation import Simulation, SimulationSettings, check_simulation
from primacy.analysis.behaviour.cmr.simulation import Variant as Variant
from primacy.analysis.behaviour.cmr.simulation import draws_per_chain as draws_per_chain

_CHUNK_ROWS = 4096  # chains per batch: the activation and the gathered H rows (each rows × (n+2)) stay in cache


def association(n_items: int, beta_enc: float) -> torch.Tensor:
    """M (n+1, n+1) float64 of the paper variant: M[i, j] = (1 - β_enc)^(j - i - 1) for j > i; index n is the
    end state."""
    i = torch.arange(n_items + 1, dtype=torch.float64)
    gap = i[None, :] - i[:, None] - 1  # j - i - 1
    decay = torch.tensor(1.0 - beta_enc, dtype=torch.float64)
    return torch.where(gap >= 0, decay ** gap.clamp(min=0), torch.zeros((), dtype=torch.float64))


def study_contexts(n_items: int, beta_enc: float) -> torch.Tensor:
    """The canonical variant's study contexts (n+1, n+1) float64: row k is c_(k-1) (row 0 the start context d_0,
    row i+1 the context after item i), column 0 is d_0 and column i+1 is item i's dimension. Closed form of
    ``drift`` with c_IN = d_(i+1): c_(k-1)[0] = ρ^k, c_(k-1)[m] = β ρ^(k-m) for 1 <= m <= k, ρ = sqrt(1 - β²)."""
    k = torch.arange(n_items + 1, dtype=torch.float64)
    decay = torch.tensor(1.0 - beta_enc**2, dtype=torch.float64).sqrt()
    gap = k[:, None] - k[None, :]  # k - m
    contexts = torch.where(gap >= 0, beta_enc * decay ** gap.clamp(min=0), torch.zeros((), dtype=torch.float64))
    contexts[:, 0] = decay**k
    return contexts


def drift(context: torch.Tensor, c_in: torch.Tensor, beta: float | torch.Tensor) -> torch.Tensor:
    """The canonical context update (..., D): ρ c + β c_IN with ρ = sqrt(1 + β²((c·c_IN)² - 1)) - β (c·c_IN), which
    keeps |c| = 1 for unit c and c_IN."""
    dot = (context * c_in).sum(-1, keepdim=True)
    rho = (1 + beta**2 * (dot**2 - 1)).clamp(min=0).sqrt() - beta * dot
    return rho * context + beta * c_in


def _search(cdf: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Index per row (R,) of the first cdf entry above u · total, for u (R,) in [0, 1) in cdf's dtype. Rounded to
    nearest, u · total stays below the total, so an entry of zero weight (equal to the one before) is never picked."""
    return torch.searchsorted(cdf, u[:, None] * cdf[:, -1:], right=True)[:, 0]


def draw(weights: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One index per row with probability weights / row sum (R, S) -> (R,), by inverting the cumulative sum
    (several times faster than torch.multinomial here); one uniform per row from ``generator``."""
    u = torch.rand(len(weights), generator=generator, dtype=weights.dtype)  # R
    return _search(weights.cumsum(1), u)


def mean_lag_curve(per_start: torch.Tensor, chains: torch.Tensor) -> torch.Tensor:
    """(..., starts, lags) sums of per-chain curves and (..., starts) numbers of chains -> (..., lags): averaged
    per start, normalised to sum 1, averaged over the starts whose curve is not empty."""
    per_start = per_start / chains.clamp(min=1)[..., None]
    total = per_start.sum(-1, keepdim=True)  # ... starts 1
    usable = total > 0
    shares = torch.where(usable, per_start / torch.where(usable, total, 1.0), 0.0)
    return shares.sum(-2) / usable.sum(-2)


def cmr_crp(beta_enc: float, beta_rec: float, gamma_ft: float, simulation: Simulation | None = None,
            **settings: Unpack[SimulationSettings]) -> tuple[torch.Tensor, torch.Tensor]:
    """The simulated lag-CRP over lags -max_lag..+max_lag: (lags (2·max_lag+1,), crp (2·max_lag+1,) float64).

    Chains start at each of the first ``n_starts`` positions, ``n_chains`` each, at most ``max_samples`` draws
    (None: the variant's ``DEFAULT_SAMPLES``, 50, what made the authors' published grid; exactly that many in
    ``canonical``, which has no end state). Per chain, the counts of each lag are divided by its number of item
    draws; chains are averaged, the curve is normalised to sum 1 over the lags, and the start positions are
    averaged. Chains that end before drawing an item do not enter. ``temperature`` is the softmax temperature of
    ``canonical`` (unused by ``paper``). Deterministic given ``seed``; equal to the matching row of ``cmr_crps``.
    The settings are ``simulation`` (None: every default of ``Simulation``) with the keyword ``settings`` over it.
    """
    lags, crps = cmr_crps(torch.tensor([[beta_enc, beta_rec, gamma_ft]], dtype=torch.float64), simulation, **settings)
    return lags, crps[0]


def cmr_crps(
    params: torch.Tensor,
    simulation: Simulation | None = None,
    **settings: Unpack[SimulationSettings],
) -> tuple[torch.Tensor, torch.Tensor]:
    """``cmr_crp`` for every row (β_enc, β_rec, γ_FT) of ``params`` (G, 3) at once: (lags (K,), crps (G, K)).

    Every set uses the same random numbers (one uniform per chain and step from ``seed``), so row g equals
    ``cmr_crp(*params[g], seed=seed, ...)`` and neighbouring grid points differ by their parameters, not by noise.
    float32 is faster than float64; its curves differ only where a rounding moves a draw across a boundary.
    """
    params = torch.as_tensor(params, dtype=torch.float64).reshape(-1, 3)
    sim = check_simulation(params, simulation, **settings)
    variant, temperature, n_items, n_starts, max_lag, dtype = (
        sim.variant, sim.temperature, sim.n_items, sim.n_starts, sim.max_lag, sim.dtype)
    per_set = n_starts * sim.n_chains
    generator = torch.Generator().manual_seed(sim.seed)
    uniforms = torch.rand(sim.draws, per_set, generator=generator, dtype=torch.float64).to(dtype)  # T C
    below_one = torch.nextafter(torch.ones((), dtype=dtype), torch.zeros((), dtype=dtype))
    uniforms.clamp_(max=below_one)  # float64 -> float32 can round up to 1
    n_lags = sim.n_lags
    sums = torch.zeros(len(params) * n_starts, n_lags, dtype=torch.float64)  # (G · starts) K
    chains = torch.zeros(len(params) * n_starts, dtype=torch.float64)
    per_block = max(1, _CHUNK_ROWS // per_set)  # sets whose tables are built together: one set, or what fills a chunk
    for first in range(0, len(params), per_block):
        block = params[first : first + per_block]
        if variant == "paper":
            tables = _paper_tables(block, n_items, n_starts, dtype)
        else:
            tables = _canonical_tables(block, n_items, n_starts, dtype)
        for lo in range(0, len(block) * per_set, _CHUNK_ROWS):
            rows = torch.arange(lo, min(lo + _CHUNK_ROWS, len(block) * per_set))  # r: chain index in the block
            sets, within = rows // per_set, rows % per_set
            starts = within // sim.n_chains
            if variant == "paper":
                history = _run_paper(tables, sets, starts, uniforms[:, within])
            else:
                history = _run_canonical(tables, sets, starts, uniforms[:, within], temperature)
            counts, draws = _count_lags(history, starts, n_items if variant == "paper" else -1, max_lag)
            recalled = draws > 0
            group = ((first + sets) * n_starts + starts)[recalled]
            sums.index_add_(0, group, counts[recalled] / draws[recalled, None])
            chains.index_add_(0, group, torch.ones(len(group), dtype=torch.float64))
    crps = mean_lag_curve(sums.view(len(params), n_starts, n_lags), chains.view(len(params), n_starts))
    return sim.lags(), crps


def _count_lags(history: torch.Tensor, starts: torch.Tensor, end: int, max_lag: int) -> tuple[torch.Tensor, ...]:
    """From the items drawn (T, r) by chains starting at ``starts`` (r,): lag counts (r, K) and item draws (r,),
    float64. A chain's draws stop at its first ``end`` (the end state, also what chains dropped early hold; -1 for
    none)."""
    ended = history == end  # T r
    first_end = torch.where(ended.any(0), ended.to(torch.int8).argmax(0), len(history))  # r: argmax finds the first
    valid = torch.arange(len(history))[:, None] < first_end  # T r: draws before the end
    lag = history - torch.cat([starts[None], history[:-1]])  # T r
    counted = valid & (lag.abs() <= max_lag)
    n_lags = 2 * max_lag + 1
    cell = torch.arange(history.shape[1]) * n_lags + lag + max_lag  # T r: flat index into counts
    counts = torch.bincount(cell[counted], minlength=history.shape[1] * n_lags).view(-1, n_lags)  # r K
    return counts.double(), valid.sum(0).double()


def _paper_tables(params: torch.Tensor, n_items: int, n_starts: int, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Per set (P of them, S = n + 1 states). A cumulative sum has S + 2 columns: a leading 0, then the S partial
    sums, then the total again (so cum[j + 2] exists for every state j). ``start`` (P·starts, S+2): cumsum of
    Mᵀe_s; ``h`` (P·S, S+2): cumsum of row j of H = (1 - γ) M + γ MᵀM, i.e. of Mᵀ((1 - γ) e_j + γ M e_j); ``coef``
    (P·S, 4): t · t_IN after recalling j as a combination of cum[j], cum[j+1], cum[j+2], then 1 / |t_IN before
    normalising| = 1 / |(1 - γ) e_j + γ M e_j|; ``beta_rec`` (P,)."""
    start, h, coef = [], [], []
    for beta_enc, _, g in params.tolist():
        m = association(n_items, beta_enc)  # S S
        start.append(m[:n_starts].cumsum(1))
        h.append(((1 - g) * m + g * (m.T @ m)).cumsum(1))
        norm_in = torch.sqrt((1 - g) ** 2 + g**2 * (m**2).sum(0))  # S: M[j, j] = 0, so no cross term
        # t · t_IN = ((1 - γ) t_j + γ a_j) / norm_in with a_j = t · M e_j, t_j = a_{j+1} - ρ a_j (a_{j+1} = ρ a_j +
        # t_j: M is a first-order filter over item index) and a_j = cum[j+1] - cum[j].
        on_next, on_this = (1 - g) / norm_in, (g - (1 - g) * (1 - beta_enc)) / norm_in  # S
        coef.append(torch.stack([-on_this, on_this - on_next, on_next, 1 / norm_in], 1))

    def padded(x: list[torch.Tensor]) -> torch.Tensor:
        x = torch.cat(x)
        return torch.cat([torch.zeros(len(x), 1, dtype=x.dtype), x, x[:, -1:]], 1).to(dtype)

    return {"start": padded(start), "h": padded(h), "coef": torch.cat(coef).to(dtype),
            "beta_rec": params[:, 1].to(dtype)}


def _run_paper(tables: dict[str, torch.Tensor], sets: torch.Tensor, starts: torch.Tensor,
               uniforms: torch.Tensor) -> torch.Tensor:
    """The paper variant for chains of sets ``sets`` (r,) (rows of the tables) from ``starts`` (r,), one uniform per
    step and chain (T, r): the items drawn (T, r), n for the end state and after it. The state is cumsum(a) kept as
    scale · cum; chains that reach the end state are dropped once they are a quarter of the rest."""
    n_states = tables["h"].shape[1] - 2  # S = n + 1
    n_starts = len(tables["start"]) // len(tables["beta_rec"])
    history = torch.full(uniforms.shape, n_states - 1)  # T r
    row = torch.arange(len(sets))  # the chain's column in history
    base = sets * n_states  # r: the set's first row in h and coef
    cum = tables["start"][sets * n_starts + starts]  # r S+2
    scale = torch.ones(len(sets), dtype=cum.dtype)
    beta = tables["beta_rec"][sets]  # r
    keep = 1 - beta
    norm_base, norm_dot = keep**2 + beta**2, 2 * beta * keep  # r: |(1 - β) t + β t_IN|² = base + dot · (t · t_IN)
    active = torch.ones(len(sets), dtype=torch.bool)
    gathered = torch.empty_like(cum)  # r S+2: H rows, reused across steps
    offsets = torch.arange(3)

    for step in range(len(uniforms)):
        item = _search(cum, uniforms[step].index_select(0, row)) - 1  # r, in [0, n]: n is the end state
        history[step].index_copy_(0, row, item)
        active &= item != n_states - 1
        if step == len(uniforms) - 1:
            break
        alive = int(active.sum())
        if 4 * (len(row) - alive) > len(row):  # drop stopped chains
            if alive == 0:
                break
            index = active.nonzero()[:, 0]
            row, base, item, cum, scale, beta, keep, norm_base, norm_dot = (
                x[index] for x in (row, base, item, cum, scale, beta, keep, norm_base, norm_dot))
            active, gathered = active[index], gathered[:alive]

        at = base + item  # r: row of the set's h and coef for state j
        coef = tables["coef"].index_select(0, at)  # r 4
        near = cum.gather(1, item[:, None] + offsets)  # r 3: cum[j], cum[j+1], cum[j+2]
        dot = (near[:, 0] * coef[:, 0]).addcmul_(near[:, 1], coef[:, 1]).addcmul_(near[:, 2], coef[:, 2])
        dot *= scale  # r: t · t_IN (a sum over the short axis would be several times slower)
        norm = torch.addcmul(norm_base, norm_dot, dot).sqrt_()  # r
        pull = beta * coef[:, 3]  # r: β / |(1 - γ) e_j + γ M e_j|
        mix = torch.addcmul(pull, keep, scale)  # r: new scale · norm
        weight = torch.where(active, pull / mix, 0.0)  # r: stopped chains keep cum (their scale is never read)
        scale = mix / norm
        torch.index_select(tables["h"], 0, at, out=gathered)  # r S+2
        cum.lerp_(gathered, weight[:, None])  # scale' cum' = (1 - β) / norm · scale cum + β / (norm |..|) · cumsum H[j]
    return history


def _canonical_tables(params: torch.Tensor, n_items: int, n_starts: int, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Per set (P of them). Activations a_i = c_(i-1) · c for i = 0..n: entry n (the context after the last item)
    cues no item but completes the recursion a_(i+1) = ρ_enc a_i + β_enc c[d_(i+1)]. ``start`` (P·starts, n+1): a for
    c = c_s, rows s + 1 of the contexts' Gram matrix; ``h`` (P·n, n+1): a for c_IN(j) = normalise(M_FC f_j) =
    ((1 - γ) d_(j+1) + γ c_(j-1)) / sqrt((1 - γ)² + γ²) (c_(j-1) has no d_(j+1) component); ``coef`` (P, 2): c · c_IN
    as a combination of a_j, a_(j+1); ``beta_rec`` (P,)."""
    start, h = [], []
    beta_enc, g = params[:, 0], params[:, 2]
    norm_in = torch.sqrt((1 - g) ** 2 + g**2)  # P
    for (b, _, gamma), n_in in zip(params.tolist(), norm_in.tolist()):
        contexts = study_contexts(n_items, b)  # n+1 n+1: row k = c_(k-1)
        gram = contexts @ contexts.T
        start.append(gram[1 : n_starts + 1])
        h.append(((1 - gamma) * contexts[:, 1:].T + gamma * gram[:n_items]) / n_in)  # n n+1
    # c · c_IN = ((1 - γ) c[d_(j+1)] + γ a_j) / norm_in, with c[d_(j+1)] = (a_(j+1) - ρ_enc a_j) / β_enc.
    on_next = (1 - g) / (beta_enc * norm_in)
    on_this = (g - (1 - g) * torch.sqrt(1 - beta_enc**2) / beta_enc) / norm_in
    return {"start": torch.cat(start).to(dtype), "h": torch.cat(h).to(dtype),
            "coef": torch.stack([on_this, on_next], 1).to(dtype), "beta_rec": params[:, 1].to(dtype)}


def _run_canonical(tables: dict[str, torch.Tensor], sets: torch.Tensor, starts: torch.Tensor,
                   uniforms: torch.Tensor, temperature: float) -> torch.Tensor:
    """The canonical variant for chains of sets ``sets`` (r,) from ``starts`` (r,), one uniform per step and chain
    (T, r): the items drawn (T, r). The state is a = scale · act; items are drawn from softmax(a[:n] / T)."""
    n_items = tables["h"].shape[1] - 1
    n_starts = len(tables["start"]) // len(tables["beta_rec"])
    history = torch.empty(uniforms.shape, dtype=torch.long)  # T r
    base = sets * n_items  # r: the set's first row in h
    act = tables["start"][sets * n_starts + starts]  # r n+1
    scale = torch.ones(len(sets), dtype=act.dtype)
    coef, beta = tables["coef"][sets], tables["beta_rec"][sets]  # r 2, r
    beta_sq = beta**2
    gathered = torch.empty_like(act)  # r n+1
    offsets = torch.arange(2)

    for step in range(len(uniforms)):
        items = act[:, :n_items]  # r n
        odds = (items - items.amax(1, keepdim=True)).mul_((scale / temperature)[:, None]).exp_()  # r n
        item = _search(odds.cumsum_(1), uniforms[step])  # r
        history[step] = item
        if step == len(uniforms) - 1:
            break
        near = act.gather(1, item[:, None] + offsets)  # r 2: a_j, a_{j+1}, unscaled
        dot = (near[:, 0] * coef[:, 0]).addcmul_(near[:, 1], coef[:, 1]).mul_(scale)  # r: c · c_IN
        rho = torch.addcmul(1 - beta_sq, beta_sq, dot * dot).clamp_(min=0).sqrt_() - beta * dot  # r: keeps |c| = 1
        scale = torch.addcmul(beta, rho, scale)  # r: ρ scale + β
        torch.index_select(tables["h"], 0, base + item, out=gathered)  # r n+1
        act.lerp_(gathered, (beta / scale)[:, None])  # scale' act' = ρ scale act + β H[j]
    return history


