"""One training step of primacy's Mamba and xLSTM backbones beside their CPU peers, S4D and the arithmetic floor.

A step is the backbone alone, forward and backward of a fixed linear function of its output, float32, on one thread
(torch.set_num_threads(1)), batch B, width D, at each length T. Candidates:

- Mamba: primacy's ``MambaBackbone`` on each CPU scan (``recurrent``, ``chunked``, ``compiled`` where a C++
  compiler works, ``compiled_mixer``: the compiled scan with softplus, D·u and the SiLU gate in the kernel,
  ``compiled_conv``: that and the causal convolution and its SiLU compiled, and ``compiled_fma``: that with dt_proj in
  the kernel and multiply-adds fused, ``scan='auto'``'s choice where the CPU fuses them), beside
  mambapy's own ``Mamba`` (its parallel scan; the same modules, plus the final RMSNorm primacy adds);
- xLSTM: primacy's ``XLSTMBackbone`` (d_model D, an mLSTM then an sLSTM block, 4 heads each: the atlas's row), on
  the PyTorch sLSTM loop and mLSTM cell, on the compiled sLSTM loop (``slstm_loop='compiled'``, where a C++
  compiler works), on both compiled (``mlstm_loop='compiled'`` too), on both with the sLSTM's gates formed per
  head inside its loop (``slstm_loop='compiled_gates'``), with the mLSTM's q, k, v formed inside its cell too
  (``mlstm_loop='compiled_qkv'``, 0.4's default), with the mLSTM's convolution and its SiLU compiled as well
  (``mlstm_loop='compiled_conv'``) and with both blocks' convolutions and the mLSTM's output side compiled
  (``slstm_loop='compiled_conv'``, ``mlstm_loop='compiled_layer'``, the defaults' choice there in primacy-xlstm
  0.5) and with the sLSTM layer's output norm and the block's feed-forward GELU gate compiled too
  (``slstm_loop='compiled_block'``), beside the ``xlstm`` package's ``xLSTMBlockStack`` built from the same config;
- S4D, the time-invariant SSM of the atlas (``S4DBackbone``, N 64, LegS), the yardstick;
- Mamba's floor: the step's matrix-product FLOPs (torch's FlopCounterMode on primacy's compiled step, which sees the
  projections around the scan and not the scan, whose arithmetic is elementwise) at this machine's one-thread
  matrix-product rate, a float32 (1024 x 1024) product timed in the same rounds. (None for xLSTM: primacy's
  products there multiply the zeros of block-diagonal matrices on purpose, so their count is no floor.)

Peers are loaded with primacy's weights and must give its output to 2e-6 (max absolute difference, float32) before
anything is timed; a missing peer is skipped with a message. Steps are timed interleaved, one of each candidate per
round (A B C A B C ...), and the medians are reported: on a shared machine the load weighs on every candidate alike,
so the ratios, not the absolute times, are the result.

    OMP_NUM_THREADS=1 python benchmarks/peers.py [--lengths 64 256] [--repeats 10] [--batch 64] [--width 64]
        [--families mamba xlstm]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from primacy.backbones.s4d import S4DBackbone

TOLERANCE = 2e-6
# the compiled mLSTM cell sums its state one position at a time (primacy_xlstm.mlstm_compiled), so its float32 rounding
# is its own: the atlas's xLSTM on it is 2.2e-6 (T 64) and 5.4e-6 (T 256) off its float64 output, the PyTorch cells
# 1.5e-6 and 1.7e-6 (B 64, D 64, seeds 0/1); with the sLSTM's gates per head too (slstm_loop='compiled_gates'),
# 1.5-1.6e-6 and 4.9-6.4e-6 (the compiled sLSTM loop with the compiled mLSTM cell: 1.3-1.5e-6, 5.1-6.4e-6); and with
# q, k, v formed in the mLSTM cell (mlstm_loop='compiled_qkv'), 1.3-1.6e-6 and 4.3-5.9e-6; and with its convolution
# and SiLU compiled too (mlstm_loop='compiled_conv'), 1.3-1.5e-6 and 4.6-5.9e-6; and with the sLSTM's convolution
# and the mLSTM's output side compiled (slstm_loop='compiled_conv', mlstm_loop='compiled_layer'), 1.5e-6 and
# 4.8-6.2e-6; with the sLSTM block's norm and GELU gate compiled too (slstm_loop='compiled_block'), within 3.1-4.0e-7
# (T 64) and 0.9-1.0e-6 (T 256) of the largest output entry, as compiled_conv's (the plugin's README)
TOLERANCES = {"primacy xLSTM compiled s+mLSTM": 1e-5, "primacy xLSTM s+mLSTM+gates": 1e-5,
              "primacy xLSTM gates+qkv": 1e-5, "primacy xLSTM gates+conv": 1e-5, "primacy xLSTM conv+layer": 1e-5,
              "primacy xLSTM block+layer": 1e-5}
RATE_SIZE = 1024


def _mamba(width: int) -> tuple[dict[str, nn.Module], dict[str, nn.Module], str]:
    """primacy's Mamba on each CPU scan, mambapy's beside it (same weights), and the name of the floor's candidate."""
    try:
        from primacy_mamba import MambaBackbone
        from primacy_mamba.compiled import check_compiled
    except ImportError:
        print("mamba: skipped, primacy-mamba is not installed (pip install -e plugins/primacy-mamba)")
        return {}, {}, ""
    from primacy.errors import UsageError
    from primacy_mamba.backbone import _SCANS

    scans = [scan for scan in ("recurrent", "chunked", "compiled", "compiled_mixer", "compiled_conv", "compiled_fma")
             if scan in _SCANS]
    try:
        check_compiled()
    except UsageError as err:
        print(f"mamba: the compiled scans are skipped ({err})")
        scans = [scan for scan in scans if not scan.startswith("compiled")]
    torch.manual_seed(0)
    ours: dict[str, nn.Module] = {}
    for scan in scans:
        model = MambaBackbone(d_model=width, kernel="pure", scan=scan)
        if ours:
            model.load_state_dict(next(iter(ours.values())).state_dict())
        ours[f"primacy Mamba {scan}"] = model
    peers = {}
    try:
        from mambapy.mamba import Mamba, RMSNorm

        class MambapyPeer(nn.Module):
            """mambapy's Mamba (its parallel scan) and the final RMSNorm that MambaBackbone adds."""

            def __init__(self, config) -> None:
                super().__init__()
                self.mamba, self.norm_f = Mamba(config), RMSNorm(config.d_model, config.rms_norm_eps)

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                return self.norm_f(self.mamba(x))

        first = next(iter(ours.values()))
        config = first.config
        config.pscan = True
        peer = MambapyPeer(config)
        state = {(f"mamba.{key}" if key.startswith("layers.") else key): value
                 for key, value in first.state_dict().items() if key != "_extra_state"}  # primacy's record of its scan
        peer.load_state_dict(state)
        peers["mambapy Mamba (parallel scan)"] = peer
    except ImportError:
        print("mamba: mambapy is not installed, its peer is skipped")
    floor = next((name for name in ours if name.endswith("compiled")), next(iter(ours), ""))
    return ours, peers, floor  # no floor for xLSTM: its products multiply block-diagonal zeros (primacy_xlstm)


def _xlstm(width: int) -> tuple[dict[str, nn.Module], dict[str, nn.Module], str]:
    """primacy's xLSTM (the atlas's row) and the xlstm package's block stack with the same weights."""
    try:
        from xlstm import xLSTMBlockStack

        from primacy_xlstm import XLSTMBackbone
        from primacy_xlstm.backbone import _stack_config
    except ImportError:
        print("xlstm: skipped, primacy-xlstm or the xlstm package is not installed")
        return {}, {}, ""
    from primacy.errors import UsageError
    from primacy_xlstm.compiled import check_compiled
    from primacy_xlstm.mlstm_compiled import check_mlstm_compiled

    torch.manual_seed(0)
    settings = dict(d_model=width, blocks=["mlstm", "slstm"], backend="vanilla")
    reference = XLSTMBackbone(**settings, slstm_loop="pytorch", mlstm_loop="pytorch")
    ours = {"primacy xLSTM pytorch loops": reference}
    loops = {"primacy xLSTM compiled sLSTM": ("compiled", "pytorch"),
             "primacy xLSTM compiled s+mLSTM": ("compiled", "compiled"),
             "primacy xLSTM s+mLSTM+gates": ("compiled_gates", "compiled"),
             "primacy xLSTM gates+qkv": ("compiled_gates", "compiled_qkv"),
             "primacy xLSTM gates+conv": ("compiled_gates", "compiled_conv"),
             "primacy xLSTM conv+layer": ("compiled_conv", "compiled_layer"),
             "primacy xLSTM block+layer": ("compiled_block", "compiled_layer")}
    for name, (slstm, mlstm) in loops.items():
        try:
            check_compiled()
            check_mlstm_compiled()
            model = XLSTMBackbone(**settings, slstm_loop=slstm, mlstm_loop=mlstm)
        except UsageError as err:
            print(f"xlstm: {name} is skipped ({err})")
            continue
        model.load_state_dict(reference.state_dict())
        ours[name] = model
    stack = xLSTMBlockStack(_stack_config(
        d_model=width, blocks=["mlstm", "slstm"], context_length=1024, mlstm_heads=4, slstm_heads=4, conv_kernel=4,
        proj_factor=2.0, ff_proj_factor=1.3, backend="vanilla"))
    stack.load_state_dict(reference.stack.state_dict(), strict=False)  # the mask is not in it
    return ours, {"xlstm xLSTMBlockStack": stack}, ""


def _step(model: nn.Module, x: torch.Tensor, weights: torch.Tensor) -> Callable[[], None]:
    def step() -> None:
        model.zero_grad(set_to_none=True)
        x.grad = None
        (model(x) * weights).sum().backward()

    return step


def _flops(step: Callable[[], None]) -> int:
    with FlopCounterMode(display=False) as counter:
        step()
    return counter.get_total_flops()


def _check_same(family: str, candidates: dict[str, nn.Module], x: torch.Tensor) -> dict[str, nn.Module]:
    """The candidates whose output on x is the first one's to TOLERANCE (or its own in TOLERANCES); a candidate that
    differs is dropped, said."""
    with torch.no_grad():
        outputs = {name: model(x) for name, model in candidates.items()}
    reference_name, reference = next(iter(outputs.items()))
    kept = {}
    for name, output in outputs.items():
        gap = (output - reference).abs().max().item()
        if gap <= TOLERANCES.get(name, TOLERANCE):
            kept[name] = candidates[name]
        else:
            print(f"{family}: {name} is not timed, its output differs from {reference_name}'s by {gap:.1e}")
    own = "".join(f", {name} to {TOLERANCES[name]:g}" for name in kept if name in TOLERANCES)
    print(f"{family}: {len(kept)} candidates give {reference_name}'s output to {TOLERANCE:g}{own}")
    return kept


def run(length: int, args: argparse.Namespace) -> None:
    torch.manual_seed(1)
    x = torch.randn(args.batch, length, args.width, requires_grad=True)
    weights = torch.randn(args.batch, length, args.width)
    torch.manual_seed(0)
    candidates = {"S4D": S4DBackbone(d_model=args.width, d_state=64, init="legs")}
    floors = {}
    for family in args.families:
        ours, peers, floor = {"mamba": _mamba, "xlstm": _xlstm}[family](args.width)
        kept = _check_same(family, {**ours, **peers}, x) if ours else {}
        candidates.update(kept)
        if floor in kept:
            floors[family] = floor
    steps = {name: _step(model, x, weights) for name, model in candidates.items()}
    a, b = torch.randn(RATE_SIZE, RATE_SIZE), torch.randn(RATE_SIZE, RATE_SIZE)
    steps["matmul 1024"] = lambda: a @ b
    flops = {family: _flops(steps[name]) for family, name in floors.items()}
    for step in steps.values():  # warm up: builds, caches, allocator
        step()
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(args.repeats):
        for name, step in steps.items():
            start = time.perf_counter()
            step()
            times[name].append(time.perf_counter() - start)
    median = {name: statistics.median(values) for name, values in times.items()}
    rate = 2 * RATE_SIZE**3 / median.pop("matmul 1024")
    print(f"\nB {args.batch}, T {length}, D {args.width}, float32, {torch.get_num_threads()} thread(s), median of "
          f"{args.repeats} interleaved rounds; one-thread matrix-product rate {rate / 1e9:.1f} GFLOP/s")
    for family, name in floors.items():
        print(f"{family} floor: {flops[family] / 1e6:.0f} MFLOP of matrix products a step ({name}), "
              f"{1e3 * flops[family] / rate:.2f} ms at that rate")
    print(f"{'candidate':<32} {'ms':>8} {'/ S4D':>7} {'/ floor':>8} {'/ peer':>7}")
    for name, seconds in median.items():
        family = next((f for f in floors if f in name.lower()), None)
        floor = f"{seconds * rate / flops[family]:8.2f}" if family else f"{'':>8}"
        peer = _peer_of(name, median)
        ratio = f"{seconds / median[peer]:7.2f}" if peer else f"{'':>7}"
        print(f"{name:<32} {1e3 * seconds:8.1f} {seconds / median['S4D']:7.2f} {floor} {ratio}")


def _peer_of(name: str, median: dict[str, float]) -> str | None:
    """The peer a primacy candidate is compared with: the other package's model of its family, when timed."""
    if not name.startswith("primacy"):
        return None
    family = "Mamba" if "Mamba" in name else "xLSTM"
    return next((other for other in median if not other.startswith("primacy") and family in other), None)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--families", nargs="+", choices=["mamba", "xlstm"], default=["mamba", "xlstm"])
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    for length in args.lengths:
        run(length, args)


if __name__ == "__main__":
    main()
