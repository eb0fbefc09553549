"""CMR and Gaussian fits recover the curves they are built from; the distance is MSE / variance of the curve; a CMR
grid is its simulation, recorded in its file; the paper's grid is the authors' published file, and primacy's
simulation of it reproduces it."""

import importlib.resources
import json
import runpy
import sys
import warnings

import numpy as np
import pytest
import torch

from primacy.analysis.behaviour.cmr.closed_form import closed_form_crp, has_closed_form
from primacy.analysis.behaviour.cmr.fits import fit_cmr, fit_gaussian, is_flat
from primacy.analysis.behaviour.cmr.grid import PAPER_VALUES, PUBLISHED_FILE, CMRGrid, compare_grids
from primacy.analysis.behaviour.cmr.simulate import cmr_crp
from primacy.cli import main
from primacy.errors import UsageError
from primacy.workflows.humans.cmr_grid import save

SIM = {"n_items": 30, "n_starts": 4, "n_chains": 100, "max_samples": 20}


@pytest.fixture(scope="module")
def grid():
    """Every cell simulated (the closed-form cells are tested in test_cmr.py)."""
    return CMRGrid.build(np.array([0.2, 0.6, 1.0]), np.array([0.0, 0.5, 1.0]), np.array([0.0, 0.5]), **SIM,
                         closed_form=False)


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


@pytest.mark.parametrize("alignment", ["peak", "affine"])
def test_a_crp_with_no_mass_on_the_fit_lags_fits_nothing(alignment):
    """The closed form of β_enc = 1, β_rec = 0, γ_FT = 0 puts all of its mass at lag 0, which free recall's fit
    lags leave out: that cell must lose, not win with a NaN distance (0 / 0 once renormalised)."""
    lags = np.arange(-8, 9)
    at_zero = (lags == 0).astype(np.float64)
    forward = np.where(lags > 0, 0.5 ** np.abs(lags), 0.0)
    grid = CMRGrid(np.array([[1.0, 0.0, 0.0], [0.5, 1.0, 0.0]]), np.stack([at_zero, forward / forward.sum()]), lags)
    fit_lags = np.array([-5, -4, -3, -2, -1, 1, 2, 3, 4, 5])
    curve = 0.1 + forward[np.isin(lags, fit_lags)]
    fit = fit_cmr(curve, fit_lags, grid, alignment=alignment, fit_lags=fit_lags)
    assert (fit.beta_enc, fit.beta_rec) == (0.5, 1.0) and fit.distance == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize("alignment", ["peak", "affine"])
def test_both_alignments_recover_a_grid_crp_and_report_the_fit_in_the_curves_units(grid, alignment):
    curve = 7.0 * grid.crps[11, 3:14] / grid.crps[11, 3:14].sum() + 2.0
    fit = fit_cmr(curve, np.arange(-5, 6), grid, alignment=alignment)
    assert fit.distance == pytest.approx(0.0, abs=1e-12) and fit.inv_temperature == pytest.approx(7.0)
    np.testing.assert_allclose(fit.fitted, curve, atol=1e-9)


def test_affine_alignment_never_fits_worse_than_peak_alignment(grid):
    rng = np.random.default_rng(0)
    for _ in range(20):
        curve = rng.normal(size=11)
        peak, affine = (fit_cmr(curve, np.arange(-5, 6), grid, alignment=a) for a in ("peak", "affine"))
        assert affine.distance <= peak.distance + 1e-12  # peak alignment is one affine map with scale >= 0
    with pytest.raises(UsageError, match="alignment='cubic' is unknown"):
        fit_cmr(curve, np.arange(-5, 6), grid, alignment="cubic")


def test_fit_accepts_wider_lag_ranges_and_uses_minus_5_to_5(grid):
    curve = grid.crps[5]  # lags -8..8
    assert fit_cmr(curve, grid.lags, grid).distance == pytest.approx(0.0, abs=1e-12)


def test_grid_round_trips_through_a_file(grid, tmp_path):
    save(grid, tmp_path / "grid.npz")
    loaded = CMRGrid.load(tmp_path / "grid.npz")
    np.testing.assert_array_equal(loaded.crps, grid.crps)
    with pytest.raises(UsageError, match="does not exist"):
        CMRGrid.load(tmp_path / "missing.npz")


def test_grid_records_its_simulation_and_keeps_it_through_a_file(grid, tmp_path):
    assert grid.settings == {"variant": "paper", "temperature": 0.1, "seed": 0, "n_items": 30, "n_starts": 4,
                             "n_chains": 100, "max_samples": 20, "max_lag": 8, "dtype": "float32",
                             "closed_form": False}
    save(grid, tmp_path / "grid.npz")
    assert CMRGrid.load(tmp_path / "grid.npz").settings == grid.settings
    assert grid.variant == "paper"


def test_grid_rows_are_the_batched_simulation_of_each_set(grid):
    for index in (0, 7, 17):
        _, crp = cmr_crp(*grid.params[index], dtype=torch.float32, **SIM)
        np.testing.assert_allclose(grid.crps[index], crp.numpy(), atol=1e-7)  # stored at float32 precision


def test_grid_build_over_worker_processes_gives_the_same_grid(grid):
    parallel = CMRGrid.build(np.array([0.2, 0.6, 1.0]), np.array([0.0, 0.5, 1.0]), np.array([0.0, 0.5]), workers=2,
                             **SIM, closed_form=False)
    np.testing.assert_allclose(parallel.crps, grid.crps, atol=1e-12)


def test_canonical_grid_records_variant_and_temperature():
    canonical = CMRGrid.build(np.array([0.5]), np.array([0.5]), np.array([0.0, 0.5]), variant="canonical",
                              temperature=0.2, **SIM)
    assert canonical.variant == "canonical" and canonical.settings["temperature"] == 0.2
    _, crp = cmr_crp(0.5, 0.5, 0.5, variant="canonical", temperature=0.2, dtype=torch.float32, **SIM)
    np.testing.assert_allclose(canonical.crps[1], crp.numpy(), atol=1e-7)


def test_grid_build_rejects_a_bad_value_before_simulating():
    with pytest.raises(UsageError, match="beta_enc=0.0 is invalid"):
        CMRGrid.build(np.array([0.0, 0.5]), np.array([0.5]), np.array([0.5]), **SIM)


@pytest.mark.parametrize(
    "content,message",
    [
        (b"not a zip file", "is not a readable CMR grid file"),
        ("an .npy array", "is not a readable CMR grid file"),
        ("missing crps", "is not a readable CMR grid file"),
        ("wrong shapes", "is an inconsistent CMR grid"),
    ],
)
def test_a_broken_grid_file_is_rejected_in_one_line_naming_it(tmp_path, content, message):
    path = tmp_path / "broken.npz"
    if content == "an .npy array":
        with open(path, "wb") as f:
            np.save(f, np.zeros(3))
    elif content == "missing crps":
        np.savez(path, params=np.zeros((2, 3)), lags=np.arange(-8, 9))
    elif content == "wrong shapes":
        np.savez(path, params=np.zeros((2, 3)), crps=np.zeros((3, 17)), lags=np.arange(-8, 9))
    else:
        path.write_bytes(content)
    with pytest.raises(UsageError, match=message) as error:
        CMRGrid.load(path)
    assert str(error.value).startswith(f"grid={path} ") and "\n" not in str(error.value)


def test_the_simulated_paper_grid_is_the_papers_grid_as_simulated_here():
    paper = CMRGrid.shipped("paper")
    assert paper.params.shape == (4620, 3) and paper.crps.shape == (4620, 17)
    assert paper.settings == {"variant": "paper", "temperature": 0.1, "seed": 0, "n_items": 100, "n_starts": 20,
                              "n_chains": 1000, "max_samples": 50, "max_lag": 8, "dtype": "float32",
                              "closed_form": True}  # the draws and closed-form cells of the authors' published grid
    # the axes of Ji-An et al. (2024): beta_enc 0.05..1 and beta_rec 0..1 in steps of 0.05, gamma_ft 0..1 in 0.1
    axes = {"beta_enc": [0.05, 0.10, 0.15, 0.20, 0.25, 0.30, 0.35, 0.40, 0.45, 0.50, 0.55, 0.60, 0.65, 0.70, 0.75,
                         0.80, 0.85, 0.90, 0.95, 1.00],
            "beta_rec": [0.00, 0.05, 0.10, 0.15, 0.20, 0.25, 0.30, 0.35, 0.40, 0.45, 0.50, 0.55, 0.60, 0.65, 0.70,
                         0.75, 0.80, 0.85, 0.90, 0.95, 1.00],
            "gamma_ft": [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]}
    for name, column in zip(("beta_enc", "beta_rec", "gamma_ft"), paper.params.T):
        np.testing.assert_allclose(np.unique(column), axes[name], atol=1e-12)
        np.testing.assert_allclose(PAPER_VALUES[name], axes[name], atol=1e-12)
    assert len({tuple(row) for row in paper.params}) == 20 * 21 * 11, "every combination once"
    np.testing.assert_allclose(paper.crps.sum(-1), 1.0, atol=1e-6)
    # What the code simulates today (one set at the paper's size: about 0.4 s). A float32 change that only reorders
    # roundings moves a few draws (up to 3e-5 over the grid); another seed moves curves by about 1e-3.
    for index in (1234, 4000):
        assert not has_closed_form(*paper.params[index, 1:])
        _, crp = cmr_crp(*paper.params[index], max_samples=paper.settings["max_samples"], dtype=torch.float32)
        np.testing.assert_allclose(paper.crps[index], crp.numpy(), atol=1e-4)
    # The cells beta_rec 0 or 1 with gamma_ft 0 are the authors' closed form (to float32), 2 x 20 of them.
    exact = [index for index, (_, beta_rec, gamma_ft) in enumerate(paper.params) if has_closed_form(beta_rec, gamma_ft)]
    assert len(exact) == 40
    for index in exact:
        beta_enc, beta_rec, _ = paper.params[index]
        np.testing.assert_allclose(paper.crps[index], closed_form_crp(beta_enc, beta_rec, 100, 20, 8), atol=1e-6)


# Cells of the grid Ji-An et al. published with their code (corxyz/icl-cmr, saved_crps/cmr_crp_avg_20_11.npy, MIT;
# the file their fitting scripts load to draw the paper's figures), lags -8..8, rounded to 6 decimals. The first five
# are the cells where a 100-draw simulation (what their published script says) is farthest from them (0.03 to 0.12
# apart); then three cells spread over the grid and two closed-form cells (beta_rec 0 or 1, gamma_ft 0).
PUBLISHED = {
    (1.00, 0.05, 0.8): [0.000000, 0.000000, 0.000000, 0.000012, 0.000126, 0.001872, 0.017770, 0.131828, 0.667228,
                        0.161274, 0.017910, 0.001828, 0.000142, 0.000010, 0.000000, 0.000000, 0.000000],
    (0.95, 0.05, 0.8): [0.000000, 0.000004, 0.000040, 0.000226, 0.001166, 0.007156, 0.036758, 0.158566, 0.562236,
                        0.187528, 0.037790, 0.007108, 0.001178, 0.000196, 0.000046, 0.000002, 0.000000],
    (0.50, 0.05, 0.0): [0.009017, 0.013401, 0.020489, 0.029900, 0.043953, 0.063294, 0.089549, 0.122683, 0.165459,
                        0.148045, 0.102303, 0.069145, 0.047108, 0.031140, 0.021537, 0.013773, 0.009203],
    (0.70, 0.05, 1.0): [0.000895, 0.001970, 0.004231, 0.009205, 0.020299, 0.043100, 0.087004, 0.168754, 0.308461,
                        0.183026, 0.091155, 0.044490, 0.020639, 0.009512, 0.004367, 0.002045, 0.000847],
    (0.85, 0.05, 1.0): [0.000020, 0.000046, 0.000274, 0.000972, 0.004144, 0.014858, 0.051741, 0.169328, 0.497615,
                        0.185617, 0.054223, 0.015672, 0.004074, 0.001038, 0.000316, 0.000052, 0.000010],
    (0.05, 0.00, 0.7): [0.047610, 0.049934, 0.052055, 0.054954, 0.057306, 0.061856, 0.064395, 0.067766, 0.070748,
                        0.069016, 0.066666, 0.063926, 0.061284, 0.056328, 0.053688, 0.052147, 0.050322],
    (0.40, 0.55, 0.0): [0.011491, 0.014766, 0.018125, 0.023396, 0.029382, 0.037630, 0.046914, 0.059686, 0.075694,
                        0.239704, 0.154458, 0.101228, 0.069102, 0.046837, 0.032051, 0.023187, 0.016350],
    (0.65, 0.50, 1.0): [0.001962, 0.003711, 0.006457, 0.011961, 0.022340, 0.041006, 0.078330, 0.156666, 0.326368,
                        0.172850, 0.085688, 0.044120, 0.023453, 0.012545, 0.006871, 0.003703, 0.001968],
    (0.05, 0.00, 0.0): [0.048105, 0.050638, 0.053304, 0.056111, 0.059065, 0.062175, 0.065448, 0.068894, 0.072521,
                        0.068894, 0.065448, 0.062175, 0.059065, 0.056111, 0.053304, 0.050638, 0.048105],
    (1.00, 1.00, 0.0): [0.000000, 0.000000, 0.000000, 0.000000, 0.000000, 0.000000, 0.000000, 0.000000, 0.000000,
                        1.000000, 0.000000, 0.000000, 0.000000, 0.000000, 0.000000, 0.000000, 0.000000],
}
DISCRIMINATING = [(1.00, 0.05, 0.8), (0.95, 0.05, 0.8), (0.50, 0.05, 0.0), (0.70, 0.05, 1.0), (0.85, 0.05, 1.0)]


def _row(grid: CMRGrid, cell: tuple[float, float, float]) -> int:
    return int(np.flatnonzero(np.all(np.isclose(grid.params, cell, atol=1e-9), axis=1))[0])


def _data(name: str):
    return importlib.resources.files("primacy.analysis.behaviour.cmr") / "data" / name


def test_the_paper_grid_is_the_authors_published_file():
    """CMRGrid.paper() holds the published cells sampled here (to their 6 decimals) over the same cells as primacy's
    simulation, with the settings its cells show; the package ships the file with the authors' licence."""
    paper, simulated = CMRGrid.paper(), CMRGrid.shipped("paper")
    for cell, published in PUBLISHED.items():
        np.testing.assert_allclose(paper.crps[_row(paper, cell)], published, rtol=0, atol=5e-7, err_msg=str(cell))
    np.testing.assert_array_equal(paper.params, simulated.params)
    np.testing.assert_array_equal(paper.lags, np.arange(-8, 9))
    assert paper.settings == {"variant": "paper", "n_items": 100, "n_starts": 20, "n_chains": 1000, "max_samples": 50,
                              "max_lag": 8, "closed_form": True}
    notice = _data("LICENSE-icl-cmr").read_text()
    assert PUBLISHED_FILE in notice and "corxyz/icl-cmr" in notice and "MIT License" in notice


def test_the_simulated_paper_grid_reproduces_the_published_one_in_every_cell():
    """primacy's simulation (CMRGrid.shipped("paper")) against the published file: every simulated cell within
    Monte-Carlo noise (0.0046 at most over the 4,580, a median 0.0009; two seeds of the simulation differ by about
    0.001), the 40 closed-form cells to float32 rounding."""
    report = compare_grids(CMRGrid.shipped("paper"), CMRGrid.paper())
    assert report["simulated"]["cells"] == 4580 and report["simulated"]["max"] < 0.005
    assert report["simulated"]["median"] < 0.0015
    assert report["closed_form"]["cells"] == 40 and report["closed_form"]["max"] < 1e-7


def test_the_paper_variant_draws_what_made_the_published_grid():
    """cmr_crp's default (50 draws) reproduces published cells within noise; the published script's 100 draws do
    not: this is how the published grid's draws are known."""
    for cell in DISCRIMINATING[:2]:
        _, default = cmr_crp(*cell, dtype=torch.float32)
        np.testing.assert_allclose(default.numpy(), PUBLISHED[cell], rtol=0, atol=0.006, err_msg=str(cell))
    _, hundred = cmr_crp(*DISCRIMINATING[0], max_samples=100, dtype=torch.float32)
    assert np.abs(hundred.numpy() - PUBLISHED[DISCRIMINATING[0]]).max() > 0.1


def test_a_published_npy_grid_loads_and_compares(tmp_path, capsys):
    """The authors' layout (20, 21, 11, 17) loads by its suffix as CMRGrid.paper() reads it, a grid over PAPER_VALUES,
    and --compare reports how far two grid files are (the shipped simulation against the published file)."""
    paper = CMRGrid.paper()
    with importlib.resources.as_file(_data(PUBLISHED_FILE)) as npy, \
            importlib.resources.as_file(_data("cmr_grid_paper.npz")) as npz:
        published = CMRGrid.load(npy)
        main(["cmr_grid", "--compare", str(npz), str(npy)])
    np.testing.assert_array_equal(published.params, paper.params)
    np.testing.assert_array_equal(published.crps, paper.crps)
    assert published.settings == paper.settings and published.variant == "paper"
    report = json.loads(capsys.readouterr().out)
    assert report == compare_grids(CMRGrid.shipped("paper"), paper)
    npy = tmp_path / "cmr_crp_avg_20_11.npy"
    np.save(npy, paper.crps.reshape(20, 21, 11, 17))
    np.save(tmp_path / "wrong.npy", np.zeros((20, 21, 17)))
    with pytest.raises(UsageError, match=r"shape \(20, 21, 17\): the authors' published grid is float of shape "
                                         r"\(20, 21, 11, 17\)"):
        CMRGrid.load(tmp_path / "wrong.npy")
    (tmp_path / "broken.npy").write_bytes(b"\x93NUMPY garbage")
    with pytest.raises(UsageError, match="is not a readable .npy array"):
        CMRGrid.load(tmp_path / "broken.npy")
    other = CMRGrid.build([0.3], [0.5], [0.5], n_items=30, n_starts=4, n_chains=100)
    with pytest.raises(SystemExit) as stop:
        main(["cmr_grid", "--compare", str(npy), str(_saved(other, tmp_path))])
    assert stop.value.code == 2 and "only grids over the same parameter values" in capsys.readouterr().err


def _saved(grid: CMRGrid, folder) -> str:
    return str(save(grid, folder / "other.npz"))


def test_the_cmr_grid_command_reports_bad_arguments(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        main(["cmr_grid", "--out", str(tmp_path / "grid.npz"), "--workers", "0"])
    assert stop.value.code == 2 and "workers=0 is invalid" in capsys.readouterr().err


@pytest.mark.parametrize("old", ["primacy.workflows.cmr_grid", "primacy.analysis.cmr_grid"])
def test_the_old_module_entry_point_runs_the_command_with_a_warning(old, monkeypatch, tmp_path, capsys):
    """``python -m primacy.workflows.cmr_grid --compare a b`` (and the path before it, ``primacy.analysis.cmr_grid``)
    runs ``primacy cmr_grid --compare a b`` after a FutureWarning naming it, run in this process (a new Python took
    10 s)."""
    grid = CMRGrid.build([0.3], [0.5], [0.5], n_items=30, n_starts=4, n_chains=100)
    a, b = _saved(grid, tmp_path), str(save(grid, tmp_path / "again.npz"))
    monkeypatch.setattr(sys, "argv", ["cmr_grid.py", "--compare", a, b])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        runpy.run_module(old, run_name="__main__")
    said = [str(w.message) for w in caught if issubclass(w.category, FutureWarning)]
    assert said == [f"python -m {old} is now primacy cmr_grid: run primacy cmr_grid --compare {a} {b}"]
    assert json.loads(capsys.readouterr().out) == compare_grids(grid, grid)


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


def test_fit_cmr_under_its_public_name_uses_the_shipped_grid_and_recovers_a_simulated_crp():
    from primacy.analysis.behaviour.cmr import fit_cmr as public_fit_cmr
    from primacy.analysis.behaviour.cmr import fit_gaussian as public_fit_gaussian

    lags, crp = cmr_crp(0.6, 0.5, 0.2, seed=5)  # another seed than the grid's: fresh Monte-Carlo noise
    fit = public_fit_cmr(crp.numpy(), lags.numpy())
    assert fit.distance < 1e-3
    assert (fit.beta_enc, fit.beta_rec, fit.gamma_ft) == pytest.approx((0.6, 0.5, 0.2))
    assert public_fit_gaussian(crp.numpy(), lags.numpy()).distance > fit.distance


@pytest.mark.parametrize("read", [CMRGrid.paper, lambda: CMRGrid.shipped("paper")], ids=["paper", "shipped"])
def test_the_shipped_grid_is_read_once_and_shared_read_only(read):
    grid = read()
    assert read() is grid
    for array in (grid.params, grid.crps, grid.lags):
        with pytest.raises(ValueError, match="read-only"):
            array[0] = 1.0


# Constant up to float rounding: exactly constant 0.3 still has a variance of 3e-33 (the mean is rounded).
FLAT_CURVES = {
    "exactly constant": np.full(11, 0.3),
    "constant with 1e-17 noise": 0.01 + 1e-17 * np.random.default_rng(0).standard_normal(11),
    "zero with 1e-17 noise": 1e-17 * np.random.default_rng(1).standard_normal(11),
}


@pytest.mark.parametrize("name", FLAT_CURVES)
def test_a_curve_constant_up_to_rounding_is_flat_for_both_fits(grid, name):
    curve, lags = FLAT_CURVES[name], np.arange(-5, 6)
    assert is_flat(curve)
    for alignment in ("peak", "affine"):
        with pytest.raises(UsageError, match="curve is flat"):
            fit_cmr(curve, lags, grid, alignment=alignment)  # not "CMR-like with distance 0"
    with pytest.raises(UsageError, match="curve is flat"):
        fit_gaussian(curve, lags)


def test_small_curves_that_vary_are_not_flat():
    crp = np.where(np.arange(-5, 6) == 1, 0.4, 0.06)
    assert not is_flat(1e-6 * crp) and not is_flat(100.0 + 1e-3 * crp)
    assert is_flat(100.0 + 1e-7 * crp), "a variation of 1e-10 of the values is rounding"
