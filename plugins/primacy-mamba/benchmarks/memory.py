"""Activation memory of MambaBackbone's pure-PyTorch path, for each scan: the bytes autograd keeps for backward,
counted with saved_tensors_hooks (each storage once), and the peak RSS of a forward + backward, against the
README's formula.

    OMP_NUM_THREADS=1 python plugins/primacy-mamba/benchmarks/memory.py      # two sizes x two scans, one process each
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys

import torch

from primacy_mamba import MambaBackbone

SIZES = [dict(batch=batch, length=256, d_model=64, scan=scan)  # noqa: C408
         for scan in ("recurrent", "parallel") for batch in (16, 32)]


def formula(batch: int, length: int, d_model: int, scan: str, expand: int = 2, d_state: int = 16, n_layers: int = 1,
            dt_rank: int | None = None, bytes_per_element: int = 4) -> dict[str, int]:
    """The README's count of what autograd keeps per layer: with the parallel scan 3 (B, T, E·D, N) tensors
    (exp(Δt·A), Δt·B and the scan's states; T rounded up to a power of two for the last), with the recurrent scan
    none; with both 10 of (B, T, E·D), 4 of (B, T, D) and R + 2N + 2 more elements per (b, t) (x_proj's output,
    two RMSNorm scales)."""
    inner, rank = expand * d_model, dt_rank or -(-d_model // 16)
    big = 3 * inner * d_state if scan == "parallel" else 0
    small = 10 * inner + 4 * d_model + rank + 2 * d_state + 2
    per_step = batch * length * n_layers * bytes_per_element
    return {"big": per_step * big, "total": per_step * (big + small)}


def saved_bytes(batch: int, length: int, d_model: int, scan: str) -> dict:
    """Bytes of the distinct storages autograd saves during one forward pass, grouped by tensor shape."""
    torch.manual_seed(0)
    model = MambaBackbone(d_model=d_model, scan=scan)
    x = torch.randn(batch, length, d_model, requires_grad=True)
    storages: dict[int, tuple[int, tuple]] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        s = t.untyped_storage()
        storages.setdefault(s.data_ptr(), (s.nbytes(), tuple(t.shape)))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = model(x)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()} | {x.untyped_storage().data_ptr()}
    kept = {ptr: v for ptr, v in storages.items() if ptr not in params}
    e_d, n = 2 * d_model, 16
    big = [v for v in kept.values() if v[0] >= batch * length * e_d * n * 4]
    y.sum().backward()
    small: dict[str, int] = {}
    for nbytes, shape in kept.values():
        if nbytes < batch * length * e_d * n * 4:
            small[str(shape)] = small.get(str(shape), 0) + 1
    return {"saved_total": sum(v[0] for v in kept.values()), "n_big": len(big), "small": small,
            "big_bytes": sum(v[0] for v in big), "shapes_big": sorted({v[1] for v in big})}


def peak_rss(batch: int, length: int, d_model: int, scan: str) -> int:
    """Growth of the process's peak RSS (bytes) over one forward + backward, after a warm-up at batch 1."""
    model = MambaBackbone(d_model=d_model, scan=scan)
    model(torch.randn(1, length, d_model)).sum().backward()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    x = torch.randn(batch, length, d_model, requires_grad=True)
    model(x).sum().backward()
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--one", type=json.loads, help="measure one size in this process (a JSON dict)")
    args = parser.parse_args()
    if args.one:
        size = args.one
        rss = peak_rss(**size)  # first: a later measurement would start from this one's high-water mark
        print(json.dumps({**size, **saved_bytes(**size), "peak_rss_growth": rss, "formula": formula(**size)}))
        return
    for size in SIZES:  # one process per size, so each peak RSS starts from a clean slate
        out = subprocess.run([sys.executable, __file__, "--one", json.dumps(size)], capture_output=True, text=True,
                             check=True).stdout
        print(out, end="")


if __name__ == "__main__":
    main()
