"""How far each compiled scan's float32 step is from float64: the atlas's Mamba (D 64, one layer, N 16) at
initialisation, output and every parameter's gradient of a fixed linear function of it, against the recurrent scan
in float64 with the same weights; the largest difference relative to the largest entry of each result, the worst over
the results and the seeds. No thresholds (the tests hold the bounds).

    OMP_NUM_THREADS=1 python plugins/primacy-mamba/benchmarks/float32.py [--lengths 64 256] [--seeds 3] [--batch 16]
"""

from __future__ import annotations

import argparse

import torch

from primacy_mamba import MambaBackbone

SCANS = ("compiled", "compiled_mixer", "compiled_conv", "compiled_fma")


def worst_gaps(length: int, seeds: int, batch: int) -> dict[str, float]:
    worst = dict.fromkeys(SCANS, 0.0)
    for seed in range(seeds):
        torch.manual_seed(seed)
        reference = MambaBackbone(d_model=64, scan="recurrent").double()
        x = torch.randn(batch, length, 64, dtype=torch.float64)
        weights = torch.randn(batch, length, 64, dtype=torch.float64)
        y = reference(x)
        exact = (y, *torch.autograd.grad((y * weights).sum(), list(reference.parameters())))
        for scan in SCANS:
            model = MambaBackbone(d_model=64, scan=scan)
            model.load_state_dict(reference.state_dict())  # an explicit scan is kept, not the recorded one
            y = model(x.float())
            single = (y, *torch.autograd.grad((y * weights.float()).sum(), list(model.parameters())))
            for one, other in zip(single, exact):
                gap = ((one.double() - other).abs().max() / other.abs().max()).item()
                worst[scan] = max(worst[scan], gap)
    return worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=16)
    args = parser.parse_args()
    for length in args.lengths:
        gaps = worst_gaps(length, args.seeds, args.batch)
        print(f"T {length}: " + ", ".join(f"{scan} {gap:.1e}" for scan, gap in gaps.items()))


if __name__ == "__main__":
    main()
