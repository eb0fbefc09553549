"""CMR and Gaussian fits recover the curves they are built from; the distance is MSE / variance of the curve."""

import numpy as np
import pytest

from primacy.analysis.fits import CMRGrid, fit_cmr, fit_gaussian
from primacy.errors import UsageError

SIM = {"n_items": 30, "n_starts": 4, "n_chains": 100, "max_samples": 20}


@pytest.fixture(scope="module")
def grid():
    return CMRGrid.build(np.array([0.2, 0.6, 1.0]), np.array([0.0, 0.5, 1.0]), np.array([0.0, 0.5]), **SIM)


def test_grid_holds_every_combination(grid):
    assert grid.params.shape == (18, 3) and grid.crps.shape == (18, 17)
    assert grid.lags.tolist() == list(range(-8, 9))
    np.testing.assert_allclose(grid.crps.sum(-1), 1.0)


def test_fit_recovers_a_grid_crp_under_scale_and_offset(grid):
    for index in (3, 11, 16):
        curve = 7.0 * grid.crps[index, 3:14] / grid.crps[index, 3:14].sum() + 2.0  # lags -5..5, scaled, shifted
        fit = fit_cmr(curve, np.arange(-5, 6), grid)
        assert fit.distance == pytest.approx(0.0, abs=1e-12)
        assert (fit.beta_enc, fit.beta_rec, fit.gamma_ft) == tuple(grid.params[index])
        assert fit.inv_temperature == pytest.approx(7.0)


def test_fit_accepts_wider_lag_ranges_and_uses_minus_5_to_5(grid):
    curve = grid.crps[5]  # lags -8..8
    assert fit_cmr(curve, grid.lags, grid).distance == pytest.approx(0.0, abs=1e-12)


def test_grid_round_trips_through_a_file(grid, tmp_path):
    grid.save(tmp_path / "grid.npz")
    loaded = CMRGrid.load(tmp_path / "grid.npz")
    np.testing.assert_array_equal(loaded.crps, grid.crps)
    with pytest.raises(UsageError, match="does not exist"):
        CMRGrid.load(tmp_path / "missing.npz")


def test_gaussian_fit_recovers_its_parameters():
    lags = np.arange(-5, 6)
    curve = 0.3 + 2.0 * np.exp(-((lags - 1.3) ** 2) / (2 * 0.8**2))
    fit = fit_gaussian(curve, lags)
    assert fit.distance < 1e-4
    assert fit.mu == pytest.approx(1.3, abs=0.02) and fit.sigma == pytest.approx(0.8, rel=0.02)
    assert fit.offset == pytest.approx(0.3, abs=0.01) and fit.height == pytest.approx(2.0, rel=0.02)


def test_gaussian_distance_is_mse_over_variance():
    lags = np.arange(-5, 6)
    curve = np.where(lags == 1, 1.0, 0.0) + np.where(lags == -3, 0.5, 0.0)  # two bumps: one Gaussian can't fit both
    fit = fit_gaussian(curve, lags)
    assert fit.distance == pytest.approx(((fit.fitted - curve) ** 2).mean() / curve.var())
    assert 0 < fit.distance < 1 and fit.mu == pytest.approx(1.0, abs=0.1)


@pytest.mark.parametrize(
    "curve,lags,message",
    [
        (np.ones(11), np.arange(-5, 6), "flat"),
        (np.arange(5.0), np.arange(0, 5), r"miss \[-5, -4, -3, -2, -1, 5\]"),
        (np.arange(4.0), np.arange(-5, 6), "4 values for 11 lags"),
    ],
)
def test_bad_curves_are_rejected(grid, curve, lags, message):
    with pytest.raises(UsageError, match=message):
        fit_cmr(curve, lags, grid)
