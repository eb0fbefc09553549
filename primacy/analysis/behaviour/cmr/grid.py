"""A grid of simulated CMR lag-CRPs over (β_enc, β_rec, γ_FT), what ``fit_cmr`` searches: built and loaded.

The paper's grid is the one Ji-An et al. (2024) published with their code, shipped with the package as they made it
(``CMRGrid.paper()``; corxyz/icl-cmr, MIT: ``data/LICENSE-icl-cmr``). primacy's own simulation of it, built as the
authors made theirs (closed-form cells, 50 draws elsewhere), ships beside it as its reproduction
(``CMRGrid.shipped("paper")``): within 0.005 of the published grid in every cell. The same grid simulated with the
canonical variant ships too (``CMRGrid.shipped("canonical")``). ``primacy cmr_grid --out FILE [--variant canonical]``
rebuilds either simulation (on 2 idle cores 7.5 minutes for the paper's, 14 for the canonical); ``CMRGrid.load``
reads a published .npy too.
"""

from __future__ import annotations

import functools
import importlib.resources
import multiprocessing
import zipfile
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Unpack

import numpy as np
import torch

from primacy.analysis.behaviour.cmr.closed_form import closed_form_crps, has_closed_form
from primacy.analysis.behaviour.cmr.simulate import cmr_crps
from primacy.analysis.behaviour.cmr.simulation import VARIANTS, Simulation, SimulationSettings
from primacy.checks import one_of
from primacy.errors import UsageError

# The grid of Ji-An et al. (2024): 20 x 21 x 11 = 4,620 parameter sets.
PAPER_VALUES = {
    "beta_enc": np.round(np.arange(1, 21) * 0.05, 2),  # 0.05..1.0
    "beta_rec": np.round(np.arange(0, 21) * 0.05, 2),  # 0..1.0
    "gamma_ft": np.round(np.arange(0, 11) * 0.1, 1),  # 0..1.0
}
# What a grid simulates when its caller gives no Simulation: float32, which matches float64 within Monte-Carlo noise.
GRID_SIMULATION = Simulation(dtype=torch.float32)
_SETTINGS = (*(f.name for f in fields(Simulation)), "closed_form")  # what a grid file records of its simulation
_BLOCK = 20  # parameter sets per task handed to a worker (and per progress report)
FIT_LAGS = np.arange(-5, 6)  # the CRP is compared on lags -5..+5 (fits.py); a grid must hold each
PUBLISHED_FILE = "cmr_crp_avg_20_11.npy"  # the authors' grid in the package's data folder, under its published name


def _simulate(params: np.ndarray, simulation: Simulation) -> np.ndarray:
    """One block of CRPs (B, K), in a worker process with one thread (threads of one process contend badly with
    other jobs on a shared machine; separate processes do not)."""
    torch.set_num_threads(1)
    return cmr_crps(torch.from_numpy(params), simulation)[1].numpy()


@dataclass(frozen=True)
class CMRGrid:
    """Simulated CMR CRPs: params (G, 3) as (β_enc, β_rec, γ_FT), crps (G, K) float64 (holding float32 values in a
    grid simulated here, the precision its file keeps; Monte-Carlo noise is about 1e-3), lags (K,), and
    ``settings``: the simulation that produced them (variant, temperature, seed, n_items, n_starts, n_chains,
    max_samples, max_lag, dtype, closed_form; a grid from before closed_form existed has none: it simulated every
    cell; the authors' published grid has what its cells show, ``load_published``)."""

    params: np.ndarray
    crps: np.ndarray
    lags: np.ndarray
    settings: dict = field(default_factory=dict)

    @classmethod
    def build(
        cls,
        beta_enc: np.ndarray,
        beta_rec: np.ndarray,
        gamma_ft: np.ndarray,
        simulation: Simulation | None = None,
        *,
        workers: int = 1,
        progress: Callable[[int, int], None] | None = None,
        closed_form: bool | None = None,
        **settings: Unpack[SimulationSettings],
    ) -> CMRGrid:
        """Every combination of the given values, simulated by ``cmr_crps`` (the batched path; float32 by default,
        which matches float64 within Monte-Carlo noise). ``workers`` > 1 splits the sets over that many processes
        of one thread each; the result does not depend on it. ``progress(done, total)`` is called after each block.
        ``max_samples`` None: ``DEFAULT_SAMPLES`` of the variant. ``closed_form`` (None: true for the paper variant,
        the only one it applies to) puts the authors' closed-form curves in the cells γ_FT = 0, β_rec = 0 or 1
        (``closed_form``), as their published grid has them. The simulation is ``simulation`` (None:
        ``GRID_SIMULATION``) with the keyword ``settings`` over it."""
        if workers < 1:
            raise UsageError(f"workers={workers} is invalid: it must be >= 1")
        base = GRID_SIMULATION if simulation is None else simulation
        variant = one_of("variant", settings.get("variant", base.variant), VARIANTS)
        closed_form = variant == "paper" if closed_form is None else closed_form
        if closed_form and variant != "paper":
            raise UsageError(f"closed_form=True is for variant='paper' (the authors' closed forms), not {variant!r}")
        combos = np.array(np.meshgrid(beta_enc, beta_rec, gamma_ft, indexing="ij"), dtype=np.float64)
        combos = combos.reshape(3, -1).T  # G 3
        simulation = Simulation.of(base, settings)
        simulation.check_params(combos)  # before any long simulation
        blocks = [combos[i : i + _BLOCK] for i in range(0, len(combos), _BLOCK)]
        curves, done = [], 0
        if workers == 1:
            results = (cmr_crps(torch.from_numpy(b), simulation)[1].numpy() for b in blocks)
            pool = None
        else:
            # fork where there is one (a child started by spawn needs an importable __main__), as DataLoader does.
            method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
            pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context(method))
            results = pool.map(_simulate, blocks, [simulation] * len(blocks))
        try:
            for block in results:
                curves.append(block)
                done += len(block)
                if progress is not None:
                    progress(done, len(combos))
        finally:
            if pool is not None:
                pool.shutdown(cancel_futures=True)
        crps = np.concatenate(curves)
        if closed_form:
            rows, exact = closed_form_crps(combos, simulation.n_items, simulation.n_starts, simulation.max_lag)
            crps[rows] = exact
        crps = crps.astype(np.float32).astype(np.float64)
        lags = np.arange(-simulation.max_lag, simulation.max_lag + 1)
        return cls(combos, crps, lags, {**simulation.recorded(), "closed_form": closed_form})

    @property
    def variant(self) -> str:
        """The CMR variant simulated ("paper" for a grid that does not record it: the only one there was)."""
        return self.settings.get("variant", "paper")

    @classmethod
    def paper(cls) -> CMRGrid:
        """The grid the paper's figures were fitted on: the authors' published file (``PUBLISHED_FILE``, shipped
        with the package and read by ``load_published``), over ``PAPER_VALUES`` and lags -8..8. Read once, then
        shared (its arrays are read-only). primacy's simulation of it is ``shipped("paper")``."""
        return _published_grid()

    @classmethod
    def shipped(cls, variant: str) -> CMRGrid:
        """The grid of ``PAPER_VALUES`` simulated here with ``variant`` (``VARIANTS``; canonical at its default
        temperature) shipped with the package, what ``primacy cmr_grid --out`` builds; read once, then shared
        read-only. ``shipped("paper")`` reproduces the published ``paper()`` within Monte-Carlo noise (0.005 in
        every cell)."""
        one_of("variant", variant, VARIANTS)
        return _shipped_grid(variant)

    def arrays(self) -> dict[str, np.ndarray]:
        """What a grid file holds (``load`` reads it back): params, crps (float32), lags, and one entry per simulation
        setting."""
        settings = {key: np.asarray(value) for key, value in self.settings.items()}
        return {"params": self.params, "crps": self.crps.astype(np.float32), "lags": self.lags, **settings}

    @classmethod
    def load(cls, path: str | Path, name: str = "grid") -> CMRGrid:
        """A grid file written by ``arrays`` (.npz), or the authors' published grid (.npy, ``load_published``),
        checked (``check_grid``); ``name`` is the option that gave ``path``, which a refusal names."""
        if Path(path).suffix == ".npy" and Path(path).is_file():
            return cls.load_published(path, name)
        if not Path(path).is_file():
            raise UsageError(f"{name}={path} does not exist: give a CMR grid file, or build one with primacy "
                             "cmr_grid --out FILE")
        try:
            f = np.load(path, allow_pickle=False)
            if not isinstance(f, np.lib.npyio.NpzFile):
                raise ValueError("not an .npz archive")
            with f:
                params, crps, lags = (np.asarray(f[key], dtype=np.float64) for key in ("params", "crps", "lags"))
                settings = {key: f[key].item() for key in _SETTINGS if key in f.files}
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as error:
            reason = " ".join(str(error).split()) or type(error).__name__
            raise UsageError(f"{name}={path} is not a readable CMR grid file ({reason}): rebuild it with primacy "
                             "cmr_grid --out FILE") from None
        if params.ndim != 2 or params.shape[1] != 3 or lags.ndim != 1 or crps.shape != (len(params), len(lags)):
            raise UsageError(f"{name}={path} is an inconsistent CMR grid: params {params.shape}, crps {crps.shape}, "
                             f"lags {lags.shape}; expected (G, 3), (G, K), (K,)")
        return check_grid(cls(params, crps, lags, settings), f"{name}={path}")

    @classmethod
    def load_published(cls, path: str | Path, name: str = "grid") -> CMRGrid:
        """The grid Ji-An et al. published with their code (corxyz/icl-cmr ``saved_crps/cmr_crp_avg_20_11.npy``, MIT):
        an array (20, 21, 11, 17) over ``PAPER_VALUES`` (β_enc, β_rec, γ_FT) and lags -8..8. Its settings are how it
        was made, as far as its cells show: the paper variant, 20 starts of 1,000 chains, 50 draws (its simulated
        cells match a 50-draw simulation within Monte-Carlo noise and not a 100-draw one, although the published
        script says 100) and the closed-form cells. ``name``: the option that gave ``path``, as in ``load``."""
        shape = tuple(len(values) for values in PAPER_VALUES.values()) + (17,)
        try:
            crps = np.load(path, allow_pickle=False)
        except (OSError, ValueError, EOFError) as error:
            reason = " ".join(str(error).split()) or type(error).__name__
            raise UsageError(f"{name}={path} is not a readable .npy array ({reason})") from None
        if crps.shape != shape or not np.issubdtype(crps.dtype, np.floating):
            raise UsageError(f"{name}={path} holds a {crps.dtype} array of shape {crps.shape}: the authors' "
                             f"published grid is float of shape {shape} (beta_enc, beta_rec, gamma_ft, lags -8..8)")
        combos = np.array(np.meshgrid(*PAPER_VALUES.values(), indexing="ij"), dtype=np.float64).reshape(3, -1).T
        settings = {"variant": "paper", "n_items": 100, "n_starts": 20, "n_chains": 1000, "max_samples": 50,
                    "max_lag": 8, "closed_form": True}
        grid = cls(combos, crps.reshape(len(combos), -1).astype(np.float64), np.arange(-8, 9), settings)
        return check_grid(grid, f"{name}={path}")


def check_grid(grid: CMRGrid, named: str) -> CMRGrid:
    """``grid`` if a fit can use it: at least one parameter set, every parameter finite, every CRP value in [0, 1]
    (NaN refused), and distinct whole lags that include every lag of FIT_LAGS; otherwise a UsageError starting with
    ``named`` (the option and file it came from)."""
    if len(grid.params) == 0:
        raise UsageError(f"{named} holds no parameter sets: a CMR grid needs at least one CRP to fit")
    if not np.isfinite(grid.params).all():
        raise UsageError(f"{named} has NaN or infinite parameters (beta_enc, beta_rec, gamma_ft): each must be a "
                         "number")
    bad = ~((grid.crps >= 0) & (grid.crps <= 1))  # G K; NaN counts as bad
    if bad.any():
        raise UsageError(f"{named} has {int(bad.any(axis=1).sum())} of {len(grid.crps)} CRPs with values that are "
                         "NaN or outside [0, 1]: a CRP holds probabilities")
    lags = grid.lags.tolist()
    if any(k != round(k) for k in lags) or len(set(lags)) != len(lags):
        raise UsageError(f"{named} has lags {lags}: they must be distinct whole numbers")
    missing = sorted(set(FIT_LAGS.tolist()) - set(lags))
    if missing:
        raise UsageError(f"{named} has lags {int(min(lags))}..{int(max(lags))}, without {missing}: the fits compare "
                         f"CRPs on lags {FIT_LAGS.min()}..{FIT_LAGS.max()}, so a grid needs each of them")
    return grid


def compare_grids(first: CMRGrid, second: CMRGrid) -> dict[str, dict[str, float]]:
    """How far apart two grids of the same cells and lags are: per cell, the largest difference over the lags; its
    summary over the closed-form cells (``has_closed_form``) and over the simulated ones (max, median, 95th
    percentile, how many above 0.01)."""
    if first.params.shape != second.params.shape or not np.allclose(first.params, second.params, atol=1e-9):
        raise UsageError(f"the grids hold different cells ({len(first.params)} and {len(second.params)}, or another "
                         "order): only grids over the same parameter values can be compared")
    if not np.array_equal(first.lags, second.lags):
        raise UsageError(f"the grids hold different lags ({first.lags.min()}..{first.lags.max()} and "
                         f"{second.lags.min()}..{second.lags.max()})")
    per_cell = np.abs(first.crps - second.crps).max(axis=1)  # G
    exact = np.array([has_closed_form(beta_rec, gamma_ft) for _, beta_rec, gamma_ft in first.params], dtype=bool)
    report = {}
    for name, cells in (("closed_form", per_cell[exact]), ("simulated", per_cell[~exact])):
        report[name] = {"cells": int(len(cells))}
        if len(cells):
            report[name].update(max=float(cells.max()), median=float(np.median(cells)),
                                p95=float(np.quantile(cells, 0.95)), above_0_01=int((cells > 0.01).sum()))
    return report


def _packaged(name: str, read: Callable[[Path], CMRGrid]) -> CMRGrid:
    """The grid file ``name`` of the package's data folder as ``read`` reads it, its arrays made read-only (it is
    shared by every caller)."""
    resource = importlib.resources.files("primacy.analysis.behaviour.cmr") / "data" / name
    with importlib.resources.as_file(resource) as path:
        grid = read(path)
    for array in (grid.params, grid.crps, grid.lags):
        array.setflags(write=False)
    return grid


@functools.cache
def _shipped_grid(variant: str) -> CMRGrid:
    return _packaged(f"cmr_grid_{variant}.npz", CMRGrid.load)


@functools.cache
def _published_grid() -> CMRGrid:
    return _packaged(PUBLISHED_FILE, CMRGrid.load_published)

