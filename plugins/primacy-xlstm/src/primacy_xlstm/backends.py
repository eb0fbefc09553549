"""Which sLSTM cell a model builds: xlstm's fused CUDA kernel where CUDA is present, else its PyTorch cell, whose loop
over the sequence is this plugin's in PyTorch or compiled."""

from __future__ import annotations

import logging
from typing import Any, Literal

import torch
from primacy.checks import one_of
from primacy.errors import UsageError
from torch import nn

from primacy_xlstm.compiled import check_compiled, compiled_takes
from primacy_xlstm.slstm import FastsLSTMCell

Backend = Literal["auto", "vanilla", "cuda"]
BACKENDS = ("auto", "vanilla", "cuda")
Loop = Literal["auto", "pytorch", "compiled"]
LOOPS = ("auto", "pytorch", "compiled")
log = logging.getLogger("primacy_xlstm")
_RECORD = "_extra_state"  # torch's state dict key for get_extra_state, under the backbone's prefix


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


def resolve_loop(loop: str, built: str) -> tuple[str, str]:
    """The sLSTM loop a ``slstm_loop`` setting runs with the cell ``built`` (``pytorch`` or ``compiled``), and why (for
    the log): ``auto`` is ``compiled`` where the machine's C++ compiler builds the library (built now) and ``pytorch``
    where not; with the CUDA cell, whose kernel has a loop of its own, ``pytorch`` (ours never runs). ``compiled``
    asked for where it cannot run is a one-line UsageError."""
    one_of("slstm_loop", loop, LOOPS)
    if built == "cuda":
        if loop == "compiled":
            raise UsageError("slstm_loop='compiled' is a CPU loop of the PyTorch cell and the CUDA cell was built: "
                             "set backend='vanilla' to use it, or slstm_loop='auto' or 'pytorch'")
        return "pytorch", "the CUDA cell runs xlstm's kernel"
    if loop != "auto":
        if loop == "compiled":
            check_compiled()
        return loop, f"slstm_loop={loop!r}"
    try:
        check_compiled()
    except UsageError as err:
        return "pytorch", f"slstm_loop='auto' and the compiled loop cannot be built here: {err}"
    return "compiled", "slstm_loop='auto' and the machine's C++ compiler built the compiled loop"


class RecordsLoop(nn.Module):
    """What ``XLSTMBackbone``'s state dict records besides parameters (key ``_extra_state``): the sLSTM loop it runs.
    A state dict loaded into a backbone with ``slstm_loop='auto'`` runs on the loop it was trained on (one without the
    record, from before it, on the PyTorch loop, the only one then), or is refused in one line where that loop cannot
    run; an explicit loop is honoured, and the CUDA cell ignores the record (both loops agree to float rounding)."""

    slstm_setting: str
    slstm_loop: str
    backend: str

    def get_extra_state(self) -> dict[str, str]:
        return {"slstm_loop": self.slstm_loop}

    def set_extra_state(self, state: dict[str, str | None]) -> None:
        recorded = state.get("slstm_loop") or "pytorch"
        if self.slstm_setting != "auto" or self.backend == "cuda" or recorded == self.slstm_loop:
            return
        try:
            resolve_loop(recorded, self.backend)
        except UsageError as err:
            raise UsageError(f"this checkpoint was trained with slstm_loop={recorded!r}, which cannot run here "
                             f"({err}); set slstm_loop explicitly to run it on the other loop (they agree to float "
                             "rounding)") from None
        self.use_loop(recorded, f"slstm_loop='auto' and the checkpoint was trained on the {recorded} loop")

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, *args: Any, **kwargs: Any) -> None:
        state_dict.setdefault(prefix + _RECORD, {"slstm_loop": None})  # a state dict from before: loads strictly
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def follow_input(self, x: torch.Tensor) -> None:
        """With ``slstm_loop='auto'``, the PyTorch loop from the first input the compiled one cannot take (not on the
        CPU, or neither float32 nor float64), said in the log; the record follows. An explicit loop is left alone."""
        if self.slstm_loop == "compiled" and self.slstm_setting == "auto" and not compiled_takes(x):
            self.use_loop("pytorch", f"slstm_loop='auto' and the input is {x.dtype} on {x.device.type}, which the "
                                     "compiled loop does not take")

    def use_loop(self, loop: str, reason: str) -> None:
        """Runs every sLSTM cell of this module on ``loop`` from now on, and says so in the log."""
        self.slstm_loop = loop
        for module in self.modules():
            if isinstance(module, FastsLSTMCell):
                module.slstm_loop = loop
        log.info("XLSTMBackbone runs the %s sLSTM loop (%s)", loop, reason)
