"""Which sLSTM cell a model builds: xlstm's fused CUDA kernel where CUDA is present, else its PyTorch cell, whose loop
over the sequence is this plugin's in PyTorch or compiled."""

from __future__ import annotations

import logging
from typing import Literal

import torch
from primacy.checks import one_of
from primacy.errors import UsageError

from primacy_xlstm.compiled import check_compiled

Backend = Literal["auto", "vanilla", "cuda"]
BACKENDS = ("auto", "vanilla", "cuda")
Loop = Literal["pytorch", "compiled"]
LOOPS = ("pytorch", "compiled")
log = logging.getLogger("primacy_xlstm")


def resolve_backend(backend: str) -> tuple[str, str]:
    """The sLSTM backend to build (``vanilla`` or ``cuda``) for a ``backend`` setting, and why (for the log).

    xlstm compiles the CUDA kernel when the cell is built, before Lightning moves the model to its device, so the
    choice is made at construction from ``torch.cuda.is_available()``; both cells have the same parameters, so a
    checkpoint moves between them."""
    one_of("backend", backend, BACKENDS)
    if backend == "vanilla":
        return "vanilla", "backend='vanilla'"
    if torch.cuda.is_available():
        return "cuda", f"backend={backend!r} and CUDA is available"
    if backend == "cuda":
        raise UsageError("backend='cuda' needs a CUDA device and none is available: use backend='auto' or 'vanilla'")
    return "vanilla", "backend='auto' and CUDA is not available"


def check_loop(loop: str, built: str) -> None:
    """Refuses, in one line, an unknown ``slstm_loop``, and ``compiled`` with the CUDA cell (xlstm's fused kernel has
    its own loop) or where the library cannot be built (checked now, before any work)."""
    one_of("slstm_loop", loop, LOOPS)
    if loop == "compiled":
        if built == "cuda":
            raise UsageError("slstm_loop='compiled' is a CPU loop of the PyTorch cell and the CUDA cell was built: "
                             "set backend='vanilla' to use it, or slstm_loop='pytorch'")
        check_compiled()
