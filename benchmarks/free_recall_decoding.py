"""Free recall's feed-back loops, stepped against passes over the sequence, side by side.

FreeRecallModel decodes (``recall`` at validation and test, ``greedy_order`` for greedy teacher forcing) by feeding
its outputs back one at a time. A backbone with ``step`` (the recurrence of S4, S4D, the LSTM and Mamba (the plugin,
when installed), the Transformer's key-value cache) takes one step per token, 2L + 1 steps a list; the reference
runs the L passes over the whole sequence that any backbone allows (the same model with its ``step`` hidden). Both
run on the same batches, alternating, so a busy machine slows both alike.

Prints, per backbone and loop, the median seconds of each and their ratio (passes / stepped), and the share of
lists whose outputs agree exactly (float32: the two paths round differently, so a near tie may flip). No thresholds.

    python benchmarks/free_recall_decoding.py [--items 32] [--vocab 512] [--batch 256] [--repeats 5] [--backbones Mamba]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from collections.abc import Callable

import torch

from primacy import registry
from primacy.backbones.base import Backbone
from primacy.backbones.lstm import LSTMBackbone
from primacy.backbones.s4d import S4DBackbone
from primacy.backbones.transformer import TransformerBackbone
from primacy.models.free_recall import FreeRecallModel
from primacy.testing import WithoutStep

BACKBONES: dict[str, Callable[[], Backbone]] = {  # the free-recall quickstarts' sizes
    "S4D (H 128, N 64)": lambda: S4DBackbone(d_model=128, d_state=64),
    "LSTM (H 128)": lambda: LSTMBackbone(d_model=128, max_timescale=65),
    "Transformer (2 x 128)": lambda: TransformerBackbone(d_model=128, n_layers=2, n_heads=4, d_ff=512),
}
if "MambaBackbone" in registry.names("backbone"):  # the plugin, when installed
    BACKBONES["Mamba (D 128, N 16)"] = lambda: registry.get("MambaBackbone")(d_model=128, d_state=16, kernel="pure")


def seconds(fn: Callable[[], torch.Tensor]) -> tuple[float, torch.Tensor]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=32, help="L")
    parser.add_argument("--vocab", type=int, default=512, help="K")
    parser.add_argument("--batch", type=int, default=256, help="lists decoded at once")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--backbones", nargs="+", choices=[name.split()[0] for name in BACKBONES],
                        help="only these (default: all)")
    options = parser.parse_args()
    n, k, b = options.items, options.vocab, options.batch
    g = torch.Generator().manual_seed(0)
    study = torch.rand(b, k, generator=g).argsort(1)[:, :n]  # B L
    tokens = torch.cat([study, torch.full((b, 1), k), study], dim=1)  # B 2L+1
    index = torch.arange(b)
    print(f"L = {n}, K = {k}, {b} lists, median of {options.repeats}; {torch.get_num_threads()} threads")
    print(f"{'backbone':<22} {'loop':<13} {'stepped s':>10} {'passes s':>10} {'ratio':>7} {'agree':>7}")
    for name, build in BACKBONES.items():
        if options.backbones and name.split()[0] not in options.backbones:
            continue
        torch.manual_seed(0)
        stepped = FreeRecallModel(build(), vocab_size=k + 2, n_items=n).eval()
        passes = copy.deepcopy(stepped)
        passes.backbone = WithoutStep(passes.backbone)
        loops = {"recall": lambda m: m.recall(study, index), "greedy_order": lambda m: m.greedy_order(tokens)}
        for loop, run in loops.items():
            times: dict[str, list[float]] = {"stepped": [], "passes": []}
            for _ in range(options.repeats):
                t_step, out_step = seconds(lambda: run(stepped))
                t_pass, out_pass = seconds(lambda: run(passes))
                times["stepped"].append(t_step)
                times["passes"].append(t_pass)
            agree = (out_step == out_pass).all(1).float().mean().item()
            s, p = statistics.median(times["stepped"]), statistics.median(times["passes"])
            print(f"{name:<22} {loop:<13} {s:>10.3f} {p:>10.3f} {p / s:>7.1f} {agree:>7.1%}")


if __name__ == "__main__":
    main()
