"""Which sLSTM cell a model builds: xlstm's fused CUDA kernel where CUDA is present, else its PyTorch cell, whose loop
over the sequence is this plugin's in PyTorch or compiled; and which mLSTM cell runs: the chunkwise form in PyTorch
or the compiled recurrence. The state dict records both choices, so a run resumes on its paths."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Literal

import torch
from primacy.checks import one_of
from primacy.errors import UsageError
from torch import nn

from primacy_xlstm.block_compiled import check_block_compiled
from primacy_xlstm.compiled import check_compiled, compiled_takes
from primacy_xlstm.components import FastGatedFeedForward
from primacy_xlstm.mlstm import COMPILED_CELLS, ChunkwisemLSTMCell
from primacy_xlstm.mlstm_compiled import check_mlstm_compiled, mlstm_takes
from primacy_xlstm.slstm import FastsLSTMCell

Backend = Literal["auto", "vanilla", "cuda"]
BACKENDS = ("auto", "vanilla", "cuda")
Loop = Literal["auto", "pytorch", "compiled"]
LOOPS = ("auto", "pytorch", "compiled")
# the sLSTM's: compiled_gates is the compiled loop with each head's gates formed inside it from its own units,
# compiled_conv that with the layer's convolution and its SiLU compiled too (the mLSTM library's), compiled_block that
# with the layer's output norm and the block's feed-forward GELU gate compiled as well (primacy_xlstm.block_compiled)
SLSTMLoop = Literal["auto", "pytorch", "compiled", "compiled_gates", "compiled_conv", "compiled_block"]
SLSTM_LOOPS = ("auto", "pytorch", "compiled", "compiled_gates", "compiled_conv", "compiled_block")
COMPILED_LOOPS = ("compiled", "compiled_gates", "compiled_conv", "compiled_block")
SLSTM_FASTEST = "compiled_block"  # auto's choice where the compiler works (measured: the plugin's README)
# the mLSTM's: compiled_qkv is the compiled cell forming q, k, v inside it from the layer's rows, compiled_conv that
# with the layer's convolution and its SiLU compiled too, compiled_layer that with the layer's output side in the cell
MLSTMLoop = Literal["auto", "pytorch", "compiled", "compiled_qkv", "compiled_conv", "compiled_layer"]
MLSTM_LOOPS = ("auto", "pytorch", "compiled", "compiled_qkv", "compiled_conv", "compiled_layer")
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
    """The sLSTM loop a ``slstm_loop`` setting runs with the cell ``built`` (``pytorch`` or one of
    ``COMPILED_LOOPS``), and why (for the log): ``auto`` is ``SLSTM_FASTEST`` where the machine's C++ compiler builds
    its libraries (built now) and ``pytorch`` where not; with the CUDA cell, whose kernel has a loop of its own,
    ``pytorch`` (ours never runs). A compiled loop asked for where it cannot run is a one-line UsageError."""
    one_of("slstm_loop", loop, SLSTM_LOOPS)
    if built == "cuda":
        if loop in COMPILED_LOOPS:
            raise UsageError(f"slstm_loop={loop!r} is a CPU loop of the PyTorch cell and the CUDA cell was built: "
                             "set backend='vanilla' to use it, or slstm_loop='auto' or 'pytorch'")
        return "pytorch", "the CUDA cell runs xlstm's kernel"
    return _resolve("slstm_loop", loop, COMPILED_LOOPS, lambda: _check_slstm(loop), SLSTM_FASTEST, "loop")


def _check_slstm(loop: str) -> None:
    """Builds (or finds) the libraries ``loop`` needs: the sLSTM loop's, for ``compiled_conv`` and ``compiled_block``
    (or ``auto``, which picks one of them) the mLSTM library's convolution too, named in a refusal as the sLSTM's
    setting, and for ``compiled_block`` (or ``auto`` picking it) the block's library."""
    loop = SLSTM_FASTEST if loop == "auto" else loop
    check_compiled()
    if loop in ("compiled_conv", "compiled_block"):
        try:
            check_mlstm_compiled()
        except UsageError as err:
            raise UsageError(str(err).replace("mlstm_loop", "slstm_loop")) from None
    if loop == "compiled_block":
        check_block_compiled()


def _resolve(setting: str, loop: str, compiled: tuple[str, ...], check: Callable[[], None], fastest: str,
             what: str) -> tuple[str, str]:
    """A CPU setting's path and why: an explicit one as asked (a compiled one checked first, its one-line refusal
    naming ``loop``), ``auto`` the ``fastest`` compiled one where ``check`` builds it, else ``pytorch``."""
    if loop != "auto":
        if loop in compiled:
            try:
                check()
            except UsageError as err:
                raise UsageError(str(err).replace(f"{setting}='compiled'", f"{setting}={loop!r}", 1)) from None
        return loop, f"{setting}={loop!r}"
    try:
        check()
    except UsageError as err:
        return "pytorch", f"{setting}='auto' and the compiled {what} cannot be built here: {err}"
    return fastest, f"{setting}='auto' and the machine's C++ compiler built the compiled {what}"


def resolve_mlstm_loop(loop: str) -> tuple[str, str]:
    """The mLSTM cell an ``mlstm_loop`` setting runs, and why (for the log): ``pytorch`` (the chunkwise form,
    primacy_xlstm.mlstm, any device), ``compiled`` (the recurrence in C++ on the CPU, primacy_xlstm.mlstm_compiled),
    ``compiled_qkv`` (that recurrence forming q, k, v itself from the layer's rows), ``compiled_conv`` (that with the
    layer's convolution and its SiLU compiled too), ``compiled_layer`` (that with the layer's output side in the cell's
    kernel too), ``auto`` compiled_layer where the machine's C++ compiler builds it (built now), else pytorch. A
    compiled cell asked for where it cannot be built is a one-line UsageError."""
    one_of("mlstm_loop", loop, MLSTM_LOOPS)
    return _resolve("mlstm_loop", loop, COMPILED_CELLS, check_mlstm_compiled, "compiled_layer", "cell")


class RecordsLoop(nn.Module):
    """What ``XLSTMBackbone``'s state dict records besides parameters (key ``_extra_state``): the sLSTM loop and the
    mLSTM cell it runs. A state dict loaded into a backbone with ``slstm_loop='auto'`` (``mlstm_loop='auto'``) runs on
    the loop (cell) it was trained on (one without the record, from before it, on the PyTorch one, the only one then),
    or is refused in one line where that one cannot run; an explicit setting is honoured, and the CUDA cell ignores
    the sLSTM record (the paths agree to float rounding)."""

    slstm_setting: str
    slstm_loop: str
    mlstm_setting: str
    mlstm_loop: str
    backend: str

    def get_extra_state(self) -> dict[str, str]:
        return {"slstm_loop": self.slstm_loop, "mlstm_loop": self.mlstm_loop}

    def set_extra_state(self, state: dict[str, str | None]) -> None:
        recorded = state.get("slstm_loop") or "pytorch"
        if self.slstm_setting == "auto" and self.backend != "cuda" and recorded != self.slstm_loop:
            _recorded_runs("slstm_loop", recorded, lambda: resolve_loop(recorded, self.backend))
            self.use_loop(recorded, f"slstm_loop='auto' and the checkpoint was trained on the {recorded} loop")
        recorded = state.get("mlstm_loop") or "pytorch"
        if self.mlstm_setting == "auto" and recorded != self.mlstm_loop:
            _recorded_runs("mlstm_loop", recorded, lambda: resolve_mlstm_loop(recorded))
            self.use_mlstm_loop(recorded, f"mlstm_loop='auto' and the checkpoint was trained on the {recorded} cell")

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, *args: Any, **kwargs: Any) -> None:
        state_dict.setdefault(prefix + _RECORD, {"slstm_loop": None})  # a state dict from before: loads strictly
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def follow_input(self, x: torch.Tensor) -> None:
        """With ``slstm_loop='auto'`` (``mlstm_loop='auto'``), the PyTorch loop (cell) from the first input the
        compiled one cannot take (not on the CPU, or neither float32 nor float64), said in the log; the record
        follows. An explicit setting is left alone."""
        if self.slstm_loop in COMPILED_LOOPS and self.slstm_setting == "auto" and not compiled_takes(x):
            self.use_loop("pytorch", f"slstm_loop='auto' and the input is {x.dtype} on {x.device.type}, which the "
                                     "compiled loop does not take")
        if self.mlstm_loop in COMPILED_CELLS and self.mlstm_setting == "auto" and not mlstm_takes(x):
            self.use_mlstm_loop("pytorch", f"mlstm_loop='auto' and the input is {x.dtype} on {x.device.type}, "
                                           "which the compiled cell does not take")

    def use_loop(self, loop: str, reason: str | None = None) -> None:
        """Runs every sLSTM cell of this module on ``loop`` from now on (and the feed-forward layers' GELU gate
        compiled with ``compiled_block``), and says so in the log (with a reason)."""
        self.slstm_loop = loop
        for module in self.modules():
            if isinstance(module, FastsLSTMCell):
                module.slstm_loop = loop
            elif isinstance(module, FastGatedFeedForward):
                module.gelu_compiled = loop == "compiled_block"
        if reason:
            log.info("XLSTMBackbone runs the %s sLSTM loop (%s)", loop, reason)

    def use_mlstm_loop(self, loop: str, reason: str | None = None) -> None:
        """Runs every mLSTM cell of this module on ``loop`` from now on, and says so in the log (with a reason)."""
        self.mlstm_loop = loop
        cells = [module for module in self.modules() if isinstance(module, ChunkwisemLSTMCell)]
        for cell in cells:
            cell.mlstm_loop = loop
        if cells and reason:
            log.info("XLSTMBackbone runs the %s mLSTM cell (%s)", loop, reason)


def _recorded_runs(setting: str, recorded: str, resolve: Callable[[], Any]) -> None:
    """Refuses, in one line, a checkpoint whose recorded ``setting`` cannot run here."""
    try:
        resolve()
    except UsageError as err:
        raise UsageError(f"this checkpoint was trained with {setting}={recorded!r}, which cannot run here ({err}); "
                         f"set {setting} explicitly to run it on the other loop (they agree to float rounding)"
                         ) from None
