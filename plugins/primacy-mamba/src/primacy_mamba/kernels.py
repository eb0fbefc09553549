"""Which selective-scan kernel a forward pass uses: mamba_ssm's fused CUDA kernel when it can, else mambapy's."""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import cache
from typing import Literal

import torch
from primacy.checks import one_of
from primacy.errors import UsageError

Kernel = Literal["auto", "pure", "fused"]
KERNELS = ("auto", "pure", "fused")
log = logging.getLogger("primacy_mamba")


@cache
def fused_scan() -> Callable | None:
    """mamba_ssm's ``selective_scan_fn``, or None when mamba_ssm is not installed (it needs CUDA to build)."""
    try:
        from mamba_ssm.ops.selective_scan_interface import selective_scan_fn
    except ImportError:
        return None
    return selective_scan_fn


def check_kernel(kernel: str) -> None:
    """Reject an unknown kernel, and ``fused`` where it can never run; ``auto`` and ``pure`` always work."""
    one_of("kernel", kernel, KERNELS)
    if kernel == "fused" and fused_scan() is None:
        raise UsageError(
            "kernel='fused' needs mamba_ssm, which is not installed: pip install 'primacy-mamba[cuda]' "
            "on a CUDA machine, or use kernel='auto' or 'pure'"
        )
    if kernel == "fused" and not torch.cuda.is_available():
        raise UsageError("kernel='fused' needs a CUDA device and none is available: use kernel='auto' or 'pure'")


def use_fused(kernel: str, device: torch.device) -> tuple[bool, str]:
    """Whether a forward pass on ``device`` runs the fused kernel, and why (for the log)."""
    if kernel == "pure":
        return False, "kernel='pure'"
    if device.type != "cuda":
        if kernel == "fused":
            raise UsageError(f"kernel='fused' needs the model on a CUDA device, it is on {device.type}: "
                             "move it to a GPU or use kernel='auto' or 'pure'")
        return False, f"kernel={kernel!r} and the model is on {device.type}"
    if fused_scan() is None:  # only reachable with kernel='auto': check_kernel rejected 'fused' already
        return False, "kernel='auto' and mamba_ssm is not installed (pip install 'primacy-mamba[cuda]')"
    return True, f"kernel={kernel!r}, the model is on cuda and mamba_ssm is installed"
