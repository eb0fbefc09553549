"""Forward + backward time of one training step for every registered backbone at the quickstart scale, and
the fraction of this machine's measured matrix-multiply rate each achieves.

The step is the whole SequenceModel (embedding, backbone, readout, BCE loss on the queries) on a quickstart
batch (B = 64, L = 32 study items, so T = 64, width 64). FLOPs are counted by torch's FlopCounterMode, which
counts matrix products, convolutions and attention but not FFTs or elementwise work: for the SSMs (whose
convolution is an FFT) the "fraction" is a lower bound. It does not see inside the fused nn.LSTM kernel, so
LSTM layers are counted by hand: 2·4H·(D_in + H) per token and layer forward, times 3 with the backward. The
reference rate is a float32 (1024 x 1024) matrix product on the same threads. Prints medians; no thresholds.

    python benchmarks/backbones.py [--repeats 30] [--threads N] [--backbones NAME ...] [--mamba-scans SCAN ...]
    python benchmarks/backbones.py --atlas configs/atlas/verification.yaml [--length T] [--rows LABEL ...] [--compile]

--mamba-scans times MambaBackbone once per pure-PyTorch scan (rows "MambaBackbone[scan]"); "/ S4D" is each step's
time over S4DBackbone's when S4D is among the backbones run. --atlas times each row of an atlas file with the backbone
as the row builds it at the CPU scale (its init_args and those its args set, at the easiest knob value when the knob
is the backbone's), "/ S4D" over the row whose backbone is S4DBackbone; --rows keeps only the rows it names (and
S4D's); --length sets T (L = T / 2 study items); --compile adds each row compiled by torch.compile. Steps are timed
round-robin, one of each row per round, so that a load on the machine weighs on every row alike.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

from primacy import registry
from primacy.models.lists import SequenceModel
from primacy.tasks.verification import training_batch

BATCH, N_ITEMS, VOCAB, WIDTH = 64, 32, 512, 64
# The quickstart settings of each built-in (configs/quickstart*.yaml); plugins run with their defaults.
SETTINGS = {
    "S4DBackbone": {"train_A": False, "train_B": False},
    "S4Backbone": {"train_A": False, "train_B": False},
    "TransformerBackbone": {"n_layers": 2, "n_heads": 4, "d_ff": 256},
}


def median_seconds(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def matmul_rate(repeats: int) -> float:
    """FLOP/s of a float32 (1024 x 1024) @ (1024 x 1024) product."""
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    return 2 * 1024**3 / median_seconds(lambda: a @ b, repeats)


def training_step(name: str, settings: dict | None = None, n_items: int = N_ITEMS, quickstart: bool = True):
    """A closure running one training step of the named backbone (with the quickstart's settings unless not
    ``quickstart``, then ``settings``) on a batch of ``n_items`` study items, and the model."""
    torch.manual_seed(0)
    defaults = {"d_model": WIDTH, **(SETTINGS.get(name, {}) if quickstart else {})}
    backbone = registry.get(name)(**{**defaults, **(settings or {})})
    model = SequenceModel(backbone=backbone, vocab_size=VOCAB, n_items=n_items)
    batch = training_batch(BATCH, n_items, VOCAB, 0.5, torch.Generator().manual_seed(0))

    def step() -> None:
        model.zero_grad(set_to_none=True)
        model.training_answers(batch)[0].backward()

    return step, model


def lstm_flops(model: torch.nn.Module, tokens: int) -> int:
    """Forward + backward FLOPs of the nn.LSTM layers, which FlopCounterMode cannot see into."""
    total = 0
    for lstm in (m for m in model.modules() if isinstance(m, torch.nn.LSTM)):
        for layer in range(lstm.num_layers):
            d_in = lstm.input_size if layer == 0 else lstm.hidden_size
            total += 3 * 2 * 4 * lstm.hidden_size * (d_in + lstm.hidden_size) * tokens
    return total


def count_flops(step, model: torch.nn.Module) -> int:
    with FlopCounterMode(display=False) as counter:
        step()
    return counter.get_total_flops() + lstm_flops(model, BATCH * 2 * N_ITEMS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--backbones", nargs="+", default=None, help="registered names to time (default: all)")
    parser.add_argument("--mamba-scans", nargs="+", default=None, help="MambaBackbone's scans to time, one row each")
    parser.add_argument("--atlas", default=None, help="an atlas file: time each of its rows' backbones instead")
    parser.add_argument("--length", type=int, default=2 * N_ITEMS, help="with --atlas: the sequence length T")
    parser.add_argument("--rows", nargs="+", default=None, help="with --atlas: these rows' labels only (and S4D's)")
    parser.add_argument("--compile", action="store_true",
                        help="with --atlas: also each row with its backbone compiled (CompileBackbone), beside it")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.atlas:
        return time_atlas(args.atlas, args.length, args.repeats, args.rows, args.compile)

    peak = matmul_rate(args.repeats)
    print(f"quickstart batch: B = {BATCH}, T = {2 * N_ITEMS}, width {WIDTH}; {torch.get_num_threads()} threads; "
          f"matmul reference {peak / 1e9:.1f} GFLOP/s")
    print(f"{'backbone':<26} {'step ms':>8} {'MFLOP':>8} {'GFLOP/s':>8} {'of matmul':>9} {'/ S4D':>6}")
    s4d = None
    for label, name, settings in runs(args.backbones or registry.names(), args.mamba_scans):
        step, model = training_step(name, settings)
        flops = count_flops(step, model)
        seconds = median_seconds(step, args.repeats)
        rate = flops / seconds
        s4d = seconds if name == "S4DBackbone" else s4d
        ratio = f"{seconds / s4d:6.2f}" if s4d else f"{'':>6}"
        print(f"{label:<26} {1e3 * seconds:8.2f} {flops / 1e6:8.1f} {rate / 1e9:8.2f} {rate / peak:9.1%} {ratio}",
              flush=True)


def atlas_rows(path: str) -> list[tuple[str, str, dict]]:
    """(label, backbone class, init_args) of each row of an atlas file at the CPU scale: the backbone's init_args with
    those the row's args set, and a knob of the backbone's at its first value."""
    import yaml

    rows = []
    prefix = "model.init_args.backbone.init_args."
    for row in yaml.safe_load(Path(path).read_text())["rows"]:
        settings = dict(row["backbone"].get("init_args", {}))
        args = row.get("args", [])
        args = args.get("cpu", []) if isinstance(args, dict) else args
        for key, value in zip(args[::2], args[1::2]):
            if key.startswith(f"--{prefix}"):
                settings[key[len(prefix) + 2:]] = yaml.safe_load(value)
        if row["knob"].startswith(prefix):
            values = row["values"]
            settings[row["knob"][len(prefix):]] = (values["cpu"] if isinstance(values, dict) else values)[0]
        rows.append((row["label"], row["backbone"]["class_path"].rsplit(".", 1)[-1], settings))
    return rows


def time_atlas(path: str, length: int, repeats: int, labels: list[str] | None = None, compiled: bool = False) -> None:
    """Median step of every atlas row's backbone (or of the rows ``labels`` names and S4D's), round-robin, and its
    ratio to the S4D row's (eager); with ``compiled``, each row also as ``torch.compile`` runs it ("row compiled")."""
    rows = [row for row in atlas_rows(path) if labels is None or row[0] in labels or row[1] == "S4DBackbone"]
    steps = []
    for label, name, settings in rows:
        steps.append((label, training_step(name, settings, n_items=length // 2, quickstart=False)[0]))
        if compiled:
            step, model = training_step(name, settings, n_items=length // 2, quickstart=False)
            model.backbone.compile()  # as primacy.callbacks.compiling.CompileBackbone does
            start = time.perf_counter()
            step()
            print(f"{label}: compiled in {time.perf_counter() - start:.0f} s", flush=True)
            steps.append((f"{label} compiled", step))
    times: dict[str, list[float]] = {label: [] for label, _ in steps}
    for step in (s for _, s in steps):
        step()  # warm-up (a compiled step's second call may still compile its backward's variants)
    for _ in range(repeats):
        for label, step in steps:
            start = time.perf_counter()
            step()
            times[label].append(time.perf_counter() - start)
    s4d = next((statistics.median(times[label]) for label, name, _ in rows if name == "S4DBackbone"), None)
    print(f"atlas {path}: B = {BATCH}, T = {length}, vocabulary {VOCAB}; {torch.get_num_threads()} threads; "
          f"{repeats} rounds")
    print(f"{'row':<36} {'step ms':>8} {'/ S4D':>6}")
    for label, _ in steps:
        seconds = statistics.median(times[label])
        ratio = f"{seconds / s4d:6.2f}" if s4d else f"{'':>6}"
        print(f"{label:<36} {1e3 * seconds:8.2f} {ratio}", flush=True)


def runs(names: list[str], mamba_scans: list[str] | None) -> list[tuple[str, str, dict]]:
    """(row label, registered name, extra settings) per row: S4D first (the "/ S4D" yardstick), MambaBackbone once
    per scan of ``mamba_scans`` if given."""
    rows = []
    for name in sorted(names, key=lambda n: n != "S4DBackbone"):
        if name == "MambaBackbone" and mamba_scans:
            rows += [(f"{name}[{scan}]", name, {"scan": scan}) for scan in mamba_scans]
        else:
            rows.append((name, name, {}))
    return rows


if __name__ == "__main__":
    main()
