"""The work of ``primacy cmr_grid``: build a CMR grid (the paper's parameter values) and write it atomically, as the
simulated grids in primacy/analysis/behaviour/cmr/data (``CMRGrid.shipped``) were made, or say how far two grids are
apart (the shipped simulation against the authors' published .npy, say)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

from primacy import files
from primacy.analysis.behaviour.cmr.grid import PAPER_VALUES, CMRGrid, compare_grids
from primacy.analysis.behaviour.cmr.simulation import DEFAULT_TEMPERATURE, Simulation
from primacy.checks import writable_file


def save(grid: CMRGrid, path: str | Path) -> Path:
    """``grid`` as a compressed .npz at ``path`` (``CMRGrid.load`` reads it), written atomically."""
    return files.save_npz(path, compressed=True, **grid.arrays())


def compare(first: Path, second: Path) -> dict:
    """``compare_grids`` of two grid files (.npz, or the authors' published .npy), given by ``--compare``."""
    return compare_grids(CMRGrid.load(first, "compare"), CMRGrid.load(second, "compare"))


def build(variant: str = "paper", temperature: float = DEFAULT_TEMPERATURE, seed: int = 0, n_chains: int = 1000,
          dtype: str = "float32", workers: int = 1, out: Path | None = None) -> CMRGrid:
    """The paper's grid (``PAPER_VALUES``) of ``variant``, with a progress line on stderr every 5 %; saved to ``out``
    (``save``) when given. Bad settings, ``out`` included, are one-line UsageErrors before the build starts (it
    takes about 25 minutes at the defaults)."""
    if out is not None:
        writable_file("out", out)
    begin = time.perf_counter()
    reported = [0]

    def report(done: int, total: int) -> None:
        if done * 20 // total > reported[0] * 20 // total:  # every 5 %
            reported[0] = done
            print(f"{done}/{total} sets, {time.perf_counter() - begin:.0f} s", file=sys.stderr, flush=True)

    simulation = Simulation(variant, temperature, seed, n_chains=n_chains, dtype=getattr(torch, dtype))
    grid = CMRGrid.build(**PAPER_VALUES, simulation=simulation, workers=workers, progress=report)
    if out is not None:
        save(grid, out)
        print(f"{len(grid.params)} sets in {time.perf_counter() - begin:.0f} s with {workers} worker(s): {out}",
              file=sys.stderr)
    return grid

