"""Forward + backward time of a one-layer MambaBackbone with each pure-PyTorch scan, side by side, and of an S4D
layer of the same width (the time-invariant SSM, whose convolution is an FFT) as the yardstick: medians and ratios,
no thresholds. Mamba has its defaults (N = 16, E = 2), S4D its own (N = 64).

    python plugins/primacy-mamba/benchmarks/scan.py [--repeats 10] [--threads N]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from primacy.backbones.s4d import S4DBackbone

from primacy_mamba import MambaBackbone

SIZES = [(64, 64, 64), (16, 256, 64), (64, 64, 128)]  # (B, T, D): the quickstarts' batches, a longer sequence, wider
SCANS = ("recurrent", "parallel")


def median_seconds(model: torch.nn.Module, x: torch.Tensor, repeats: int) -> float:
    def step() -> None:
        model.zero_grad(set_to_none=True)
        model(x).sum().backward()

    step()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"{torch.get_num_threads()} threads; forward + backward of the backbone alone, median of {args.repeats}")
    print(f"{'B':>3} {'T':>4} {'D':>4} {'S4D ms':>7} " + " ".join(f"{scan + ' ms':>13} {'/ S4D':>6}" for scan in SCANS))
    for batch, length, width in SIZES:
        torch.manual_seed(0)
        x = torch.randn(batch, length, width, requires_grad=True)
        s4d = median_seconds(S4DBackbone(d_model=width), x, args.repeats)
        row = f"{batch:>3} {length:>4} {width:>4} {1e3 * s4d:7.1f}"
        for scan in SCANS:
            seconds = median_seconds(MambaBackbone(d_model=width, kernel="pure", scan=scan), x, args.repeats)
            row += f" {1e3 * seconds:13.1f} {seconds / s4d:6.2f}"
        print(row, flush=True)


if __name__ == "__main__":
    main()
