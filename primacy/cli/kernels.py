"""``primacy kernels``: Fig. 1, continuous vs discretised HiPPO impulse responses."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from primacy import figures
from primacy.checks import figure_path, fits_in_memory, positive
from primacy.errors import ArgumentParser, UsageError
from primacy.ssm.dense import impulse_responses
from primacy.ssm.hippo import MEASURES, hippo


def command(args: list[str]) -> None:
    """Fig. 1: continuous vs discretised HiPPO impulse responses, to see where bilinear discretisation breaks."""
    parser = ArgumentParser(prog="primacy kernels", description=command.__doc__)
    parser.add_argument("--measure", default="legs", choices=MEASURES)
    parser.add_argument("--dt", type=float, nargs="+", default=[0.001, 0.01, 0.1, 1.0])
    parser.add_argument("--length", type=int, default=256, help="number of steps j (τ = jΔt)")
    parser.add_argument("--degrees", type=int, nargs="+", default=[2, 3, 8, 15, 32, 63])
    parser.add_argument("--state_size", type=int, default=64, help="N, the HiPPO matrix size")
    parser.add_argument("--state-size", type=int, dest="state_size", default=argparse.SUPPRESS,
                        help=argparse.SUPPRESS)  # the spelling before 2026-11
    parser.add_argument("--out", required=True, help="figure file (.png, .pdf, ...)")
    options = parser.parse_args(args)
    positive(length=options.length, state_size=options.state_size)
    bad = [d for d in options.degrees if not 0 <= d < options.state_size]
    if bad:
        raise UsageError(f"degrees={bad} are out of range: each must lie in [0, state_size={options.state_size})")
    if not all(0 < dt < math.inf for dt in options.dt):
        raise UsageError(f"dt={options.dt} is invalid: every Δt must be a positive finite number")
    n, length = options.state_size, options.length
    fits_in_memory("the HiPPO matrices and responses", 8 * (4 * n * n + 2 * length * n), state_size=n, length=length)
    figure_path("out", options.out)
    a, b = hippo(options.measure, options.state_size)
    curves = {dt: tuple(x.numpy() for x in impulse_responses(a, b, dt, options.length)) for dt in options.dt}
    title = f"HiPPO-{options.measure}, N = {options.state_size}"
    fig = figures.kernels.kernel_discrepancy(curves, options.degrees, title)
    out = Path(options.out)
    figures.save(fig, out.with_suffix(""), [out.suffix.removeprefix(".")])
    print(f"wrote {options.out}")
