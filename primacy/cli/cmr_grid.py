"""``primacy cmr_grid``: build the CMR grid of Ji-An et al. (2024) and save it, or compare two grids."""

from __future__ import annotations

import argparse
import json
import multiprocessing
from pathlib import Path

from primacy.analysis.behaviour.cmr.simulation import DEFAULT_TEMPERATURE, VARIANTS
from primacy.errors import ArgumentParser
from primacy.workflows.humans import cmr_grid


def command(args: list[str]) -> None:
    """Build the CMR grid of Ji-An et al. (2024) over the paper's parameter values (``--out FILE``, .npz), as the
    simulated grids primacy ships were made; or print how far two grid files are apart as JSON (``--compare A B``)."""
    parser = ArgumentParser(prog="primacy cmr_grid", description=command.__doc__)
    task = parser.add_mutually_exclusive_group(required=True)
    task.add_argument("--out", type=Path, help="the .npz file to write")
    task.add_argument("--compare", nargs=2, metavar="GRID", type=Path,
                      help="print how far two grid files are apart (.npz, or the authors' published .npy) instead")
    parser.add_argument("--variant", choices=VARIANTS, default="paper")
    parser.add_argument("--temperature", type=float, default=DEFAULT_TEMPERATURE, help="softmax temperature, canonical")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--n_chains", type=int, default=1000, help="chains per start position")
    parser.add_argument("--n-chains", type=int, dest="n_chains", default=argparse.SUPPRESS,
                        help=argparse.SUPPRESS)  # the spelling before 2026-11
    parser.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    parser.add_argument("--workers", type=int, default=multiprocessing.cpu_count(), help="processes (default: CPUs)")
    options = parser.parse_args(args)
    if options.compare:
        print(json.dumps(cmr_grid.compare(*options.compare), indent=2))
        return
    cmr_grid.build(options.variant, options.temperature, options.seed, options.n_chains, options.dtype,
                   options.workers, options.out)
