"""CompileBackbone: the model's backbone run through ``torch.compile``, an opt-in speed-up of every step.

On a CPU, compiling a modern recurrent backbone (its chunked form, short convolution and gates fused into generated
C++) took a training step to 0.5-0.8 of its eager time at the atlas's sizes (docs/atlas.md, "Speed"); the compile
itself takes 20 s to a few minutes at the first step, so it pays off on runs of thousands of steps.
The compiled step computes the same function in another order, so its numbers equal the eager ones to rounding, not
bitwise: a run resumes bitwise only as it was started, with the callback or without it. The backbone's parameters
keep their names, so checkpoints load either way.
"""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback

from primacy.errors import UsageError

MODES = (None, "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


class CompileBackbone(Callback):
    """Compiles ``pl_module.backbone``'s forward in place (``nn.Module.compile``) before the first step of fit,
    validate or test: add it with ``--trainer.callbacks+=primacy.callbacks.compiling.CompileBackbone``.

    Args:
        mode: torch.compile's mode (None: its default; "max-autotune" searches longer for faster kernels).
        dynamic: torch.compile's ``dynamic`` (None: shapes specialised first, generalised once one changes).
    """

    def __init__(self, mode: str | None = None, dynamic: bool | None = None) -> None:
        if mode not in MODES:
            raise UsageError(f"CompileBackbone: mode={mode!r} is not a torch.compile mode: choose one of "
                             f"{', '.join(str(m) for m in MODES)}")
        self.mode, self.dynamic = mode, dynamic

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        backbone = pl_module.backbone
        if compiled(backbone):
            return  # compiled for fit already: the test after it uses the same code
        check_compiles(trainer.strategy.root_device)
        backbone.compile(mode=self.mode, dynamic=self.dynamic)


def check_compiles(device: torch.device) -> None:
    """Compiles a one-line function on ``device``, so that a machine where torch.compile cannot build code (no C++
    compiler for a CPU, no Triton for a GPU) is told in one line before training, not by a traceback at its first
    step. Once built, in this process, the probe is reused: it worked."""

    def probe(x: torch.Tensor) -> torch.Tensor:
        return x * 2 + 1

    try:
        torch.compile(probe)(torch.ones(2, device=device))
    except Exception as err:  # noqa: BLE001 - inductor raises many kinds, each meaning it cannot build here
        message = str(err).strip()
        reason = message.splitlines()[0][:200] if message else type(err).__name__
        raise UsageError(f"CompileBackbone: torch.compile cannot build code on {device} here ({reason}): install "
                         "a C++ compiler (g++ or clang++, or set CXX) for a CPU, or remove the callback") from None


def compiled(backbone: Any) -> bool:
    """Whether ``backbone``'s forward runs compiled (``nn.Module.compile`` keeps the compiled call there)."""
    return getattr(backbone, "_compiled_call_impl", None) is not None
