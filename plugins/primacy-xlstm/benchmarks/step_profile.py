"""Where an xLSTM training step goes: the step of the atlas's row (an mLSTM then an sLSTM block, 4 heads each) beside
S4D and beside each block alone, then the step's PyTorch operations by self time (torch.profiler), by category and
one by one.

One thread, float32, B 64, D 64, the default paths (``auto``). Times are thread CPU time (the process's own
work, not the waits of a shared machine), medians of interleaved rounds; the profiler's are wall time, so read its
shares.

    OMP_NUM_THREADS=1 python plugins/primacy-xlstm/benchmarks/step_profile.py [--length 64] [--repeats 10] [--top 20]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import Counter

import torch
from primacy.backbones.s4d import S4DBackbone
from torch.profiler import ProfilerActivity, profile

from primacy_xlstm import XLSTMBackbone


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--top", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    models = {"S4D": S4DBackbone(d_model=64, d_state=64, init="legs"),
              "xLSTM": XLSTMBackbone(d_model=64, blocks=["mlstm", "slstm"]),
              "mLSTM block alone": XLSTMBackbone(d_model=64, blocks=["mlstm"]),
              "sLSTM block alone": XLSTMBackbone(d_model=64, blocks=["slstm"])}
    x = torch.randn(64, args.length, 64, requires_grad=True)  # B T D
    weights = torch.randn(64, args.length, 64)

    def step(model: torch.nn.Module) -> None:
        model.zero_grad(set_to_none=True)
        x.grad = None
        (model(x) * weights).sum().backward()

    times: dict[str, list[float]] = {name: [] for name in models}
    for model in models.values():
        step(model)
    for _ in range(args.repeats):
        for name, model in models.items():
            start = time.thread_time()
            step(model)
            times[name].append(time.thread_time() - start)
    s4d = statistics.median(times["S4D"])
    print(f"T {args.length}: thread time, median of {args.repeats} interleaved rounds")
    for name, values in times.items():
        print(f"  {name:<18} {1e3 * statistics.median(values):7.1f} ms  {statistics.median(values) / s4d:5.2f}x S4D")
    rounds = 3
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(rounds):
            step(models["xLSTM"])
    events = sorted(prof.key_averages(group_by_input_shape=True), key=lambda e: -e.self_cpu_time_total)
    total = sum(e.self_cpu_time_total for e in events)
    shares = Counter()
    for e in events:
        shares[category(e.key)] += e.self_cpu_time_total
    print("by category (self time, wall, profiled):")
    for name, value in shares.most_common():
        print(f"  {100 * value / total:5.1f} %  {name}")
    print(f"xLSTM step's operations by self time (wall, profiled; {total / rounds / 1e3:.1f} ms a step):")
    for e in events[:args.top]:
        print(f"  {100 * e.self_cpu_time_total / total:5.1f} %  {e.count // rounds:3d} a step  {e.key[:32]:<32} "
              f"{str(e.input_shapes)[:70]}")


def category(key: str) -> str:
    """An operation's part of the step: the compiled kernels by name (their autograd Functions), the dense products,
    the norms, other ATen operations (elementwise passes, copies, reductions), and autograd's own bookkeeping."""
    kernels = {"_CompiledLayer": "mLSTM kernel", "_CompiledTail": "mLSTM kernel", "_CompiledCell": "mLSTM kernel",
               "_CompiledGates": "sLSTM loop", "_CompiledSequence": "sLSTM loop", "_CompiledConv": "convolutions",
               "_DepthwiseConv": "convolutions", "_HeadNorm": "sLSTM block's norm and GELU gate",
               "_GeluGate": "sLSTM block's norm and GELU gate"}
    for prefix, name in kernels.items():
        if key.startswith(prefix):
            return f"{name} {'backward' if 'Backward' in key else 'forward'}"
    if key in ("aten::mm", "aten::addmm", "aten::bmm"):
        return "dense products"
    if "norm" in key and key.startswith("aten::"):
        return "norms"
    return "elementwise, copies, reductions" if key.startswith("aten::") else "autograd and other"


if __name__ == "__main__":
    main()
