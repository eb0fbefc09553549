"""How fast the S4 (DPLR) layer is on CPU, against the same maths written for clarity and against S4D.

Measures, in one run, forward + backward of one layer (H = 64, N = 64) at two batch sizes and two lengths:
S4Backbone; the same layer with its kernel from ``dplr_kernel_reference`` (dense matrix power for C̃, one
materialised (H, N/2, L) Cauchy matrix per sum, all L roots of unity); and S4DBackbone (diagonal, Vandermonde).
Also the kernel alone (forward + backward), which does not depend on the batch. Prints medians and ratios; no
thresholds.

    python benchmarks/s4_kernel.py [--repeats 20] [--threads N]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from primacy.backbones.s4 import S4Backbone
from primacy.backbones.s4d import S4DBackbone
from primacy.ssm.dplr import dplr_kernel_reference

H, N = 64, 64
SHAPES = [(16, 64), (64, 64), (16, 256), (64, 256)]  # (batch, T): the quickstart's T = 64, and a longer one


class ReferenceS4(S4Backbone):
    """S4Backbone with the clear, materialised kernel."""

    def kernel(self, length: int) -> torch.Tensor:
        return dplr_kernel_reference(*self.halves(), length)


def median_ms(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def layer_step(layer: torch.nn.Module, x: torch.Tensor):
    def run() -> None:
        layer.zero_grad(set_to_none=True)
        layer(x).square().mean().backward()
    return run


def kernel_step(layer: torch.nn.Module, length: int):
    def run() -> None:
        layer.zero_grad(set_to_none=True)
        layer.kernel(length).square().mean().backward()
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    torch.manual_seed(0)
    fast = S4Backbone(d_model=H, d_state=N)
    reference = ReferenceS4(d_model=H, d_state=N)
    reference.load_state_dict(fast.state_dict())
    diagonal = S4DBackbone(d_model=H, d_state=N)
    x = torch.randn(1, 8, H)
    assert torch.allclose(fast(x), reference(x), atol=1e-4), "the reference must compute the same layer"

    print(f"forward + backward, median of {args.repeats} (ms); H = {H}, N = {N}, {torch.get_num_threads()} threads")
    print(f"{'what':>8} {'batch':>5} {'T':>4} {'S4':>8} {'S4 ref':>8} {'S4D':>8} {'ref/S4':>7} {'S4/S4D':>7}")
    rows = [("kernel", "-", t, kernel_step(fast, t), kernel_step(reference, t), kernel_step(diagonal, t))
            for t in sorted({t for _, t in SHAPES})]
    for batch, t in SHAPES:
        x = torch.randn(batch, t, H)
        rows.append(("layer", batch, t, layer_step(fast, x), layer_step(reference, x), layer_step(diagonal, x)))
    for what, batch, t, *steps in rows:
        s4, ref, s4d = (median_ms(step, args.repeats) for step in steps)
        print(f"{what:>8} {batch:>5} {t:>4} {s4:8.2f} {ref:8.2f} {s4d:8.2f} {ref / s4:7.2f} {s4 / s4d:7.2f}")


if __name__ == "__main__":
    main()
