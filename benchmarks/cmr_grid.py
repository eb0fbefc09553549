"""How fast the CMR grid simulation is, per parameter set, at the paper's settings (100 items, 20 starts x 1,000
chains, 50 samples): the plain reference (``reference_crp``: one set at a time, float64; for ``paper`` the path
used before the batched one) against the batched path (``cmr_crps``) in float64 and float32, side by side, with
the full 4,620-set grid extrapolated. Also how far float32 curves are from float64 ones (same seed: the same draws
but for rare roundings) next to the Monte-Carlo noise (float64, another seed). Prints; no thresholds.

    python benchmarks/cmr_grid.py [--variant paper|canonical] [--sets 6] [--threads 1]

The machine may be shared: the load average is printed before and after, and the ratio is the number to trust.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import torch

from primacy.analysis.behaviour.cmr import VARIANTS, cmr_crps, reference_crp
from primacy.analysis.behaviour.cmr.grid import PAPER_VALUES

GRID_SETS = 4620


def timed(fn) -> tuple[float, object]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", choices=VARIANTS, default="paper")
    parser.add_argument("--sets", type=int, default=6, help="parameter sets drawn from the paper's grid")
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (a grid worker uses 1)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    combos = np.array(np.meshgrid(*PAPER_VALUES.values(), indexing="ij")).reshape(3, -1).T
    params = torch.from_numpy(combos[np.random.default_rng(0).choice(len(combos), args.sets, replace=False)])
    print(f"{args.variant} variant, {args.sets} sets of the paper's grid, {torch.get_num_threads()} thread(s); "
          f"load average before: {os.getloadavg()[0]:.2f}")

    reference_time = 0.0
    reference = []
    for row in params.tolist():
        seconds, (_, crp) = timed(lambda: reference_crp(*row, variant=args.variant))
        reference_time += seconds
        reference.append(crp)
    reference = torch.stack(reference)
    double_time, (_, double) = timed(lambda: cmr_crps(params, variant=args.variant))
    single_time, (_, single) = timed(lambda: cmr_crps(params, variant=args.variant, dtype=torch.float32))
    _, other_seed = cmr_crps(params, variant=args.variant, seed=1)

    print(f"{'path':>26} {'s/set':>7} {'ref/path':>8} {'grid, 1 core':>12} {'grid, 2 cores':>13}")
    for name, seconds in (("reference (float64, 1 set)", reference_time), ("batched float64", double_time),
                          ("batched float32", single_time)):
        per_set = seconds / len(params)
        print(f"{name:>26} {per_set:7.3f} {reference_time / seconds:8.1f} {per_set * GRID_SETS / 60:10.1f} m "
              f"{per_set * GRID_SETS / 120:11.1f} m")
    print(f"load average after: {os.getloadavg()[0]:.2f}")

    noise = (double - other_seed).abs().amax(1)  # per set: what another seed changes
    print(f"batched float64 vs reference, same seed: max |difference| {(double - reference).abs().max():.1e}")
    print(f"float32 vs float64, same seed: max |difference| {(single - double).abs().max():.1e} "
          f"(per set: {', '.join(f'{x:.1e}' for x in (single - double).abs().amax(1).tolist())})")
    print(f"Monte-Carlo noise, float64 seed 0 vs 1: max |difference| per set "
          f"{', '.join(f'{x:.1e}' for x in noise.tolist())}")


if __name__ == "__main__":
    main()
