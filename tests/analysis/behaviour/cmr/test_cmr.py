"""CMR's simulated lag-CRP: the special cases the model implies, the batched O(n) path against the plain reference
(draw for draw) and against explicit context vectors, float32 against float64."""

import functools

import numpy as np
import pytest
import torch

import primacy.analysis.behaviour.cmr.simulate as cmr
from primacy.analysis.behaviour.cmr import association, cmr_crp, cmr_crps, draw, drift, reference_crp, study_contexts
from primacy.analysis.behaviour.cmr.closed_form import closed_form_crp, has_closed_form
from primacy.analysis.behaviour.cmr.grid import CMRGrid
from primacy.errors import UsageError

SMALL = {"n_items": 40, "n_starts": 5, "n_chains": 300, "max_samples": 30}
PARAMS = [(0.3, 0.6, 0.2), (0.8, 0.1, 0.9), (0.05, 1.0, 0.5), (1.0, 1.0, 0.0), (0.5, 0.0, 0.0), (0.05, 0.05, 1.0)]


def naive_crp(beta_enc, beta_rec, gamma_ft, seed, n_items, n_starts, n_chains, max_samples, max_lag=8):
    """The same simulation written directly: explicit vectors, a = Mᵀ t by a matrix product, one chain at a time
    in spirit (all chains advance together only so the random draws line up with cmr_crp's)."""
    generator = torch.Generator().manual_seed(seed)
    m = association(n_items, beta_enc)
    starts = torch.arange(n_starts).repeat_interleave(n_chains)
    t = torch.nn.functional.one_hot(starts, n_items + 1).double()
    previous, active = starts.clone(), torch.ones(len(starts), dtype=torch.bool)
    lags = [[] for _ in starts]
    draws = torch.zeros(len(starts))
    for _ in range(max_samples):
        a = t @ m  # R S: (Mᵀ t) per chain
        j = draw(a, generator)
        active &= j != n_items
        for r in torch.nonzero(active)[:, 0].tolist():
            lags[r].append(int(j[r] - previous[r]))
        draws += active
        if not active.any():
            break
        e = torch.nn.functional.one_hot(j, n_items + 1).double()
        t_in = (1 - gamma_ft) * e + gamma_ft * m[:, j].T
        t_in /= t_in.norm(dim=1, keepdim=True)
        new = (1 - beta_rec) * t + beta_rec * t_in
        t = torch.where(active[:, None], new / new.norm(dim=1, keepdim=True), t)
        previous = torch.where(active, j, previous)
    curves = torch.zeros(n_starts, 2 * max_lag + 1, dtype=torch.float64)
    chains = torch.zeros(n_starts)
    for r, chain in enumerate(lags):
        if chain:
            for lag in chain:
                if abs(lag) <= max_lag:
                    curves[starts[r], lag + max_lag] += 1 / len(chain)
            chains[starts[r]] += 1
    curves /= chains[:, None]
    return (curves / curves.sum(1, keepdim=True)).mean(0)


def test_draw_follows_the_weights_and_never_picks_a_zero_weight():
    weights = torch.tensor([[0.0, 1.0, 0.0, 3.0]], dtype=torch.float64).expand(40000, 4)
    picks = draw(weights, torch.Generator().manual_seed(0))
    freq = torch.bincount(picks, minlength=4) / len(picks)
    assert freq[0] == 0 and freq[2] == 0
    assert freq[3].item() == pytest.approx(0.75, abs=0.01)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_uniform_just_below_one_never_reaches_a_trailing_zero_weight(dtype):
    totals = torch.rand(10000, generator=torch.Generator().manual_seed(0), dtype=dtype) * 1000
    cdf = torch.stack([totals / 3, totals, totals], 1)  # the last entry has zero weight
    u = torch.nextafter(torch.ones(10000, dtype=dtype), torch.zeros((), dtype=dtype))
    assert (cmr._search(cdf, u) == 1).all()


def test_association_is_the_leaky_forward_trace():
    m = association(3, 0.25)
    assert m.shape == (4, 4)
    assert torch.allclose(m[0], torch.tensor([0, 1, 0.75, 0.5625], dtype=torch.float64))
    assert (m.tril() == 0).all()


@pytest.mark.parametrize("params", [(0.3, 0.6, 0.2), (0.8, 0.1, 0.9), (0.05, 1.0, 0.5)])
def test_the_o_n_update_equals_explicit_context_vectors(params):
    slow = naive_crp(*params, seed=3, **SMALL)
    assert torch.allclose(cmr_crp(*params, seed=3, **SMALL)[1], slow, atol=1e-12)
    assert torch.allclose(reference_crp(*params, seed=3, **SMALL)[1], slow, atol=1e-12)


@functools.cache
def reference(params: tuple[float, float, float], variant: str) -> torch.Tensor:
    """``reference_crp`` on SMALL, seed 2 (the slow plain simulation, once per worker for each set and variant)."""
    return reference_crp(*params, variant=variant, seed=2, **SMALL)[1]


@pytest.mark.parametrize("variant", ["paper", "canonical"])
@pytest.mark.parametrize("params", PARAMS)
def test_the_batched_path_matches_the_reference_draw_for_draw(variant, params):
    fast = cmr_crp(*params, variant=variant, seed=2, **SMALL)[1]
    assert torch.allclose(fast, reference(params, variant), atol=1e-12)


def test_chains_that_end_at_once_or_all_together_match_the_reference(monkeypatch):
    monkeypatch.setattr(cmr, "_CHUNK_ROWS", 100)  # so that some chunks stop entirely
    sim = {"n_items": 10, "n_starts": 10, "n_chains": 50, "max_samples": 20}  # start 9 can only reach the end
    for params in [(1.0, 0.5, 0.0), (0.05, 0.3, 0.5)]:
        lags, fast = cmr_crp(*params, **sim)
        assert torch.allclose(fast, reference_crp(*params, **sim)[1], atol=1e-12) and not fast.isnan().any()


@pytest.mark.parametrize("variant", ["paper", "canonical"])
@pytest.mark.parametrize("chunk_rows", [512, 4096])  # a set (5 · 300 chains) over several chunks; sets sharing one
def test_a_batch_of_sets_equals_the_sets_one_by_one(variant, chunk_rows, monkeypatch):
    monkeypatch.setattr(cmr, "_CHUNK_ROWS", chunk_rows)
    lags, batch = cmr_crps(torch.tensor(PARAMS), variant=variant, seed=2, **SMALL)
    assert batch.shape == (len(PARAMS), len(lags))
    for params, row in zip(PARAMS, batch):
        assert torch.allclose(row, reference(params, variant), atol=1e-12)


@pytest.mark.parametrize("variant", ["paper", "canonical"])
def test_float32_agrees_with_float64_far_within_monte_carlo_noise(variant):
    sim = {"n_items": 60, "n_starts": 10, "n_chains": 200, "max_samples": 40, "variant": variant}
    params = torch.tensor(PARAMS)
    double = [cmr_crps(params, seed=seed, **sim)[1] for seed in (0, 1)]
    single = [cmr_crps(params, seed=seed, dtype=torch.float32, **sim)[1] for seed in (0, 1)]
    noise = (double[0] - double[1]).abs().amax(1).median()  # what another seed changes: about 3e-3 here
    assert noise > 1e-3
    for d, s in zip(double, single):
        assert (d - s).abs().max() < 0.1 * noise  # same seed: the same draws but for rare roundings


def test_crp_is_a_distribution_over_lags_minus_8_to_8():
    lags, crp = cmr_crp(0.5, 0.5, 0.5, **SMALL)
    assert lags.tolist() == list(range(-8, 9))
    assert crp.sum().item() == pytest.approx(1.0) and (crp >= 0).all()


def test_full_encoding_and_retrieval_drift_without_feedback_puts_all_mass_at_plus_one():
    lags, crp = cmr_crp(1.0, 1.0, 0.0, **SMALL)
    assert crp[lags == 1].item() == pytest.approx(1.0)


def test_item_feedback_moves_mass_to_lag_zero_and_backwards():
    lags, without = cmr_crp(0.5, 0.5, 0.0, **SMALL)
    _, feedback = cmr_crp(0.5, 0.5, 0.95, **SMALL)
    assert feedback[lags <= 0].sum() > without[lags <= 0].sum() + 0.2
    assert feedback[lags == 0] > without[lags == 0]


def test_no_retrieval_drift_gives_a_symmetric_curve_peaked_at_zero():
    lags, crp = cmr_crp(0.3, 0.0, 0.0, n_items=60, n_starts=10, n_chains=1000, max_samples=40)
    assert lags[crp.argmax()] == 0
    assert torch.allclose(crp, crp.flip(0), atol=0.01)


@pytest.mark.parametrize("beta", [0.0, 0.3, 0.9, 1.0])
def test_canonical_drift_keeps_the_context_on_the_unit_sphere(beta):
    generator = torch.Generator().manual_seed(0)
    vectors = torch.randn(2, 500, 12, generator=generator, dtype=torch.float64)  # dot products of both signs
    context, c_in = torch.nn.functional.normalize(vectors, dim=-1)
    assert torch.allclose(drift(context, c_in, beta).norm(dim=-1), torch.ones(500, dtype=torch.float64), atol=1e-12)


def test_study_contexts_are_the_drift_recursion_over_orthonormal_items():
    contexts = study_contexts(6, 0.4)
    context = torch.eye(7, dtype=torch.float64)[0]  # the start context
    for k in range(7):
        assert torch.allclose(contexts[k], context, atol=1e-12)
        if k < 6:
            context = drift(context, torch.eye(7, dtype=torch.float64)[k + 1], 0.4)
    gap = (torch.arange(7.0)[:, None] - torch.arange(7.0)).abs().double()
    assert torch.allclose(contexts @ contexts.T, 0.84 ** (gap / 2), atol=1e-12)  # c_i · c_k = sqrt(1 - β²)^|i - k|


def test_canonical_full_drift_and_a_low_temperature_put_all_mass_at_plus_one():
    lags, crp = cmr_crp(1.0, 1.0, 0.0, variant="canonical", temperature=0.01, **SMALL)
    assert crp[lags == 1].item() == pytest.approx(1.0)


def test_canonical_item_feedback_moves_mass_to_lag_zero_and_backwards():
    lags, without = cmr_crp(0.5, 0.5, 0.0, variant="canonical", **SMALL)
    _, feedback = cmr_crp(0.5, 0.5, 0.95, variant="canonical", **SMALL)
    assert feedback[lags <= 0].sum() > without[lags <= 0].sum() + 0.2
    assert feedback[lags == 0] > without[lags == 0]


def test_canonical_without_retrieval_drift_gives_a_symmetric_curve_peaked_at_zero():
    lags, crp = cmr_crp(0.3, 0.0, 0.0, variant="canonical", n_items=60, n_starts=10, n_chains=1000, max_samples=40)
    assert lags[crp.argmax()] == 0
    assert torch.allclose(crp, crp.flip(0), atol=0.01)


def test_canonical_temperature_sharpens_the_curve():
    lags, cold = cmr_crp(0.5, 0.5, 0.5, variant="canonical", temperature=0.05, **SMALL)
    _, hot = cmr_crp(0.5, 0.5, 0.5, variant="canonical", temperature=1.0, **SMALL)
    assert cold[lags == 1] > 2 * hot[lags == 1] and hot.max() < 0.15


def test_same_seed_same_curve():
    assert torch.equal(cmr_crp(0.4, 0.4, 0.4, seed=7, **SMALL)[1], cmr_crp(0.4, 0.4, 0.4, seed=7, **SMALL)[1])


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"beta_enc": 0.0}, "beta_enc=0.0 is invalid"),
        ({"beta_rec": 1.5}, "beta_rec=1.5 is invalid"),
        ({"gamma_ft": -0.1}, "gamma_ft=-0.1 is invalid"),
        ({"variant": "howard"}, "variant='howard' is unknown"),
        ({"n_starts": 0}, "n_starts=0 is invalid"),
        ({"variant": "canonical", "temperature": 0.0}, "temperature=0.0 is invalid"),
        ({"max_samples": 0}, "max_samples=0 is invalid"),
        ({"dtype": torch.float16}, "dtype=torch.float16 is invalid"),
    ],
)
def test_bad_parameters_are_rejected(kwargs, message):
    args = {"beta_enc": 0.5, "beta_rec": 0.5, "gamma_ft": 0.5, **kwargs}
    with pytest.raises(UsageError, match=message):
        cmr_crp(args.pop("beta_enc"), args.pop("beta_rec"), args.pop("gamma_ft"), **args, **{"n_chains": 2})


def test_the_closed_form_cells_are_the_authors_by_hand():
    """n = 3, start 0, β_enc 0.5 (ρ = 0.5): M's row 0 is (0, 1, 0.5, 0.25) with the end state last, so a draw is
    item 1, 2 or the end with chances 4/7, 2/7, 1/7. β_rec = 0: two independent draws, lag 0 with chance 21/49,
    ±1 10/49, ±2 4/49. β_rec = 1: lag +1 has q = (0, 4/7, 2/7, 1/7) times the chance of stepping 1 forward from each
    state, (4/7, 2/3, 1, 0): 2/3; lag +2 meets only states whose step of 2 is past the end: 0. Normalised: all at +1."""
    still = closed_form_crp(0.5, 0.0, n_items=3, n_starts=1, max_lag=2)
    np.testing.assert_allclose(still, np.array([4, 10, 21, 10, 4]) / 49, rtol=0, atol=1e-15)
    moving = closed_form_crp(0.5, 1.0, n_items=3, n_starts=1, max_lag=2)
    np.testing.assert_allclose(moving, [0, 0, 0, 1, 0], rtol=0, atol=1e-15)
    assert has_closed_form(1.0, 0.0) and has_closed_form(0.0, 0.0)
    assert not has_closed_form(1.0, 0.1) and not has_closed_form(0.5, 0.0)


def test_the_closed_form_gives_the_authors_published_cell():
    """Ji-An et al.'s grid at β_enc 0.05, β_rec 1, γ_FT 0, on the fit lags ±1..5 normalised: 0.182 at lag +1 (a
    simulation with the same parameters gives 0.293 there: the authors did not simulate this cell)."""
    curve = closed_form_crp(0.05, 1.0, n_items=100, n_starts=20, max_lag=8)
    lags = np.arange(-8, 9)
    fit = (np.abs(lags) >= 1) & (np.abs(lags) <= 5)
    assert (curve[fit] / curve[fit].sum())[lags[fit] == 1][0] == pytest.approx(0.182, abs=5e-4)
    assert curve[lags <= 0].sum() == 0.0, "with the context at the recalled item, M only reaches forward"


def test_a_paper_grid_takes_the_closed_form_cells_and_simulates_the_rest():
    grid = CMRGrid.build([0.3, 0.6], [0.0, 0.5, 1.0], [0.0, 0.2], n_items=30, n_starts=4, n_chains=100, max_lag=8)
    assert grid.settings["closed_form"] is True and grid.settings["max_samples"] == 50  # the published grid's draws
    for (beta_enc, beta_rec, gamma_ft), curve in zip(grid.params, grid.crps):
        if has_closed_form(beta_rec, gamma_ft):
            exact = closed_form_crp(beta_enc, beta_rec, 30, 4, 8).astype(np.float32)
            np.testing.assert_array_equal(curve, exact)
        else:
            _, simulated = cmr_crp(beta_enc, beta_rec, gamma_ft, n_items=30, n_starts=4, n_chains=100,
                                   max_samples=50, dtype=torch.float32)
            np.testing.assert_allclose(curve, simulated.numpy().astype(np.float32), rtol=0, atol=1e-6)
    simulated_only = CMRGrid.build([0.3], [1.0], [0.0], n_items=30, n_starts=4, n_chains=100, closed_form=False)
    assert simulated_only.settings["closed_form"] is False
    assert not np.allclose(simulated_only.crps[0], grid.crps[grid.params[:, 1] == 1.0][0])
    canonical = CMRGrid.build([0.3], [1.0], [0.0], variant="canonical", n_items=30, n_starts=4, n_chains=100)
    assert canonical.settings["closed_form"] is False and canonical.settings["max_samples"] == 50
    with pytest.raises(UsageError, match="closed_form=True is for variant='paper'"):
        CMRGrid.build([0.3], [1.0], [0.0], variant="canonical", closed_form=True)
