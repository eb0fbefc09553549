"""``python -m primacy.workflows.cmr_grid --out FILE``: build a CMR grid (the paper's parameter values) and write
it atomically, as the grids shipped in primacy/analysis/cmr/data were made; ``--compare A B``: how far two grids are
apart (the shipped one against the authors' published .npy, say)."""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from primacy import files
from primacy.analysis.behaviour.cmr.grid import PAPER_VALUES, CMRGrid, compare_grids
from primacy.analysis.behaviour.cmr.simulate import DEFAULT_TEMPERATURE, VARIANTS
from primacy.errors import ArgumentParser, UsageError


def save(grid: CMRGrid, path: str | Path) -> Path:
    """``grid`` as a compressed .npz at ``path`` (``CMRGrid.load`` reads it), written atomically."""
    return files.save_npz(path, compressed=True, **grid.arrays())


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m primacy.workflows.cmr_grid --out FILE``: build the paper's grid (``PAPER_VALUES``) and save it;
    ``--compare A B``: print ``compare_grids`` of two grid files as JSON."""
    parser = ArgumentParser(prog="python -m primacy.workflows.cmr_grid",
                            description="Build the CMR grid of Ji-An et al. (2024) and save it.")
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
    try:
        args = parser.parse_args(argv)
    except UsageError as error:
        parser.exit(2, f"error: {error}\n")
    if args.compare:
        try:
            report = compare_grids(*(CMRGrid.load(path) for path in args.compare))
        except UsageError as error:
            parser.exit(2, f"error: {error}\n")
        print(json.dumps(report, indent=2))
        return
    begin = time.perf_counter()
    reported = [0]

    def report(done: int, total: int) -> None:
        if done * 20 // total > reported[0] * 20 // total:  # every 5 %
            reported[0] = done
            print(f"{done}/{total} sets, {time.perf_counter() - begin:.0f} s", file=sys.stderr, flush=True)

    try:
        grid = CMRGrid.build(**PAPER_VALUES, variant=args.variant, temperature=args.temperature, seed=args.seed,
                             n_chains=args.n_chains, dtype=getattr(torch, args.dtype), workers=args.workers,
                             progress=report)
    except UsageError as error:
        parser.exit(2, f"error: {error}\n")
    save(grid, args.out)
    print(f"{len(grid.params)} sets in {time.perf_counter() - begin:.0f} s with {args.workers} worker(s): "
          f"{args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
