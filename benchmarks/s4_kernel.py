"""How fast the S4 (DPLR) kernel and layer are on CPU, against the same maths written for clarity and against S4D.

For each width H and length T: forward + backward of the kernel alone (it does not depend on the batch) and of one
layer on a batch of 16, for three implementations side by side in one process:

- S4: ``S4Backbone`` as shipped;
- S4 ref: the same layer (same parameters) with its kernel from ``dplr_kernel_reference`` (dense matrix power for
  C̃, one materialised (H, N/2, L) Cauchy matrix per sum, all L roots of unity);
- S4D: ``S4DBackbone`` at the same H and N (diagonal; Vandermonde sums from two small power tables);
- S4D exp: the same S4D layer with the Vandermonde matrix materialised as exp(l log Ā) over (H, N/2, T), as S4D
  computed it before its power tables (and as the S4 code does): the S4D speed the S4 targets were set against.

Prints medians and the ratios S4 / S4 ref (target <= 0.5 at T = 64 and 128) and S4 / S4D, S4 / S4D exp (target
<= 1.5); no thresholds. The issue's measurements used one thread (``--threads 1``).

    python benchmarks/s4_kernel.py [--repeats 20] [--threads 1] [--widths 64 256] [--lengths 64 128 256 512]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from primacy.backbones.s4 import S4Backbone
from primacy.backbones.s4d import S4DBackbone
from primacy.ssm.dplr import dplr_kernel_reference

N, BATCH = 64, 16


class ReferenceS4(S4Backbone):
    """S4Backbone with the clear, materialised kernel."""

    def kernel(self, length: int) -> torch.Tensor:
        return dplr_kernel_reference(*self.halves(), length)


class MaterialisedS4D(S4DBackbone):
    """S4DBackbone with its (H, N/2, T) Vandermonde matrix materialised by one exp."""

    def kernel(self, length: int) -> torch.Tensor:
        a_bar, b_bar, c = self.discrete()
        powers = torch.exp(torch.log(a_bar)[:, :, None] * torch.arange(length))  # H N/2 T
        return 2 * torch.einsum("hn,hnt->ht", c * b_bar, powers).real


def median_ms(fn: Callable[[], None], repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def layer_step(layer: torch.nn.Module, x: torch.Tensor) -> Callable[[], None]:
    def run() -> None:
        layer.zero_grad(set_to_none=True)
        layer(x).square().mean().backward()
    return run


def kernel_step(layer: S4Backbone | S4DBackbone, length: int) -> Callable[[], None]:
    def run() -> None:
        layer.zero_grad(set_to_none=True)
        layer.kernel(length).square().mean().backward()
    return run


def layers(width: int) -> tuple[S4Backbone, ReferenceS4, S4DBackbone, MaterialisedS4D]:
    torch.manual_seed(0)
    fast = S4Backbone(d_model=width, d_state=N)
    reference = ReferenceS4(d_model=width, d_state=N)
    reference.load_state_dict(fast.state_dict())
    diagonal = S4DBackbone(d_model=width, d_state=N)
    materialised = MaterialisedS4D(d_model=width, d_state=N)
    materialised.load_state_dict(diagonal.state_dict())
    x = torch.randn(1, 8, width)
    assert torch.allclose(fast(x), reference(x), atol=1e-4), "the reference must compute the same layer"
    assert torch.allclose(diagonal(x), materialised(x), atol=1e-4), "the S4D variants must compute the same layer"
    return fast, reference, diagonal, materialised


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--widths", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--lengths", type=int, nargs="+", default=[64, 128, 256, 512])
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    print(f"forward + backward, median of {args.repeats} (ms); N = {N}, layer batch {BATCH}, "
          f"{torch.get_num_threads()} threads")
    print(f"{'what':>6} {'H':>4} {'T':>4} {'S4':>8} {'S4 ref':>8} {'S4D':>8} {'S4D exp':>8} {'S4/ref':>7} "
          f"{'S4/S4D':>7} {'/S4D exp':>8}")
    for width in args.widths:
        models = layers(width)
        for length in args.lengths:
            x = torch.randn(BATCH, length, width)
            for what, step in (("kernel", lambda m, t=length: kernel_step(m, t)),
                               ("layer", lambda m, x=x: layer_step(m, x))):
                s4, ref, s4d, s4d_exp = (median_ms(step(model), args.repeats) for model in models)
                print(f"{what:>6} {width:>4} {length:>4} {s4:8.2f} {ref:8.2f} {s4d:8.2f} {s4d_exp:8.2f} "
                      f"{s4 / ref:7.2f} {s4 / s4d:7.2f} {s4 / s4d_exp:8.2f}", flush=True)


if __name__ == "__main__":
    main()
