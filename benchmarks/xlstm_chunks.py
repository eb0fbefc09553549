"""How the mLSTM's chunk length sets the speed of the atlas's xLSTM (configs/atlas/verification.yaml's row: width 64,
an mLSTM and an sLSTM block) as its knob, the mLSTM's heads, grows: a training step (forward and backward of the
backbone) with every chunk 32 positions long, as before, beside the same step with the chunk that
``primacy_xlstm.mlstm.chunk_for`` gives each head dimension, alternating in one process. Prints the median step of
each and their ratio (below 1: the rule is faster); no thresholds.

    OMP_NUM_THREADS=1 python benchmarks/xlstm_chunks.py [--heads 16 32 64] [--length 96] [--repeats 6]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import primacy_xlstm.mlstm as mlstm
from primacy_xlstm import XLSTMBackbone


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--heads", type=int, nargs="+", default=[16, 32, 64])
    parser.add_argument("--length", type=int, default=96, help="T: 2L, 96 at the atlas's L 48")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--threads", type=int, default=1)
    options = parser.parse_args()
    torch.set_num_threads(options.threads)
    rules = {"C = 32": lambda head_dim: 32, "C = chunk_for(d)": mlstm.chunk_for}
    try:
        for heads in options.heads:
            torch.manual_seed(0)
            model = XLSTMBackbone(d_model=64, blocks=["mlstm", "slstm"], mlstm_heads=heads,
                                  context_length=options.length)
            x = torch.randn(options.batch, options.length, 64)
            times: dict[str, list[float]] = {name: [] for name in rules}
            for _ in range(options.repeats):
                for name, rule in rules.items():
                    mlstm.chunk_for = rule
                    start = time.perf_counter()
                    model(x).square().mean().backward()
                    times[name].append(time.perf_counter() - start)
            median = {name: statistics.median(values) * 1000 for name, values in times.items()}
            print(f"heads {heads}: " + ", ".join(f"{name} {ms:.0f} ms" for name, ms in median.items())
                  + f"; ratio {median['C = chunk_for(d)'] / median['C = 32']:.2f}", flush=True)
    finally:
        mlstm.chunk_for = rules["C = chunk_for(d)"]


if __name__ == "__main__":
    main()
