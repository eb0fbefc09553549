"""The recurrent baseline: a single-layer LSTM. The authors' code built a plain nn.LSTM (PyTorch's default
initialisation, ``gate_init="pytorch"``, what the paper-scale config uses); at the CPU scale it stays at chance on
memory verification within the S4 panels' budget, so the CPU configs start its gate biases with chrono
initialisation (the default here)."""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from primacy.backbones.base import Backbone
from primacy.checks import fits_in_memory, one_of, positive
from primacy.errors import UsageError

GateInit = Literal["chrono", "unit_forget", "pytorch"]
_GATE_INITS = ("chrono", "unit_forget", "pytorch")
_CHRONO_DEFAULT_MAX = 64.0  # 2L for the CPU-scale task (L = 32): the longest study-to-query gap


class LSTMBackbone(Backbone):
    """nn.LSTM with hidden size d_model, optionally followed by the S4 block's output map GELU -> Linear(H, 2H) -> GLU.

    Args:
        d_model: channels H (input and hidden size).
        n_layers: stacked LSTM layers; the paper's baseline has 1.
        gate_init: how the gate biases start. ``chrono`` (Tallec & Ollivier 2018): forget bias
            log(U[1, max_timescale - 1]), input bias its negative, other biases 0, so units start with
            memory time constants spread up to ``max_timescale`` steps. ``unit_forget``: forget bias 1,
            other biases 0 (Jozefowicz et al. 2015). ``pytorch``: nn.LSTM's own U(-1/sqrt(H), 1/sqrt(H)), the
            authors' (Morita 2025). With L = 32, K = 512 only ``chrono`` left chance level within a CPU budget.
        max_timescale: chrono's T_max in steps, about the input length 2L; None means 64 (2L at the CPU scale,
            L = 32), so set it for longer lists. Only allowed with ``gate_init="chrono"``.
        output_block: apply GELU -> Linear(H, 2H) -> GLU after the LSTM, as in the S4 block. Not needed for
            learning; it lets the LSTM and S4 heads be matched exactly.
    """

    def __init__(
        self,
        d_model: int = 64,
        n_layers: int = 1,
        gate_init: GateInit = "chrono",
        max_timescale: float | None = None,
        output_block: bool = False,
    ) -> None:
        super().__init__()
        positive(d_model=d_model, n_layers=n_layers)
        one_of("gate_init", gate_init, _GATE_INITS)
        if max_timescale is not None and gate_init != "chrono":
            raise UsageError(
                f"max_timescale={max_timescale} is only used by gate_init='chrono' (got gate_init={gate_init!r}): "
                "leave it null"
            )
        if max_timescale is not None and not max_timescale > 2:
            raise UsageError(f"max_timescale={max_timescale} is invalid: it must be greater than 2 (or null)")
        fits_in_memory("the gate weights", 4 * 8 * d_model**2 * n_layers, d_model=d_model, n_layers=n_layers)
        self.d_model, self.n_layers, self.gate_init = d_model, n_layers, gate_init
        self.max_timescale = _CHRONO_DEFAULT_MAX if max_timescale is None else float(max_timescale)
        self.lstm = nn.LSTM(d_model, d_model, num_layers=n_layers, batch_first=True)
        self.out = nn.Linear(d_model, 2 * d_model) if output_block else None
        if gate_init != "pytorch":
            self._init_gate_biases()

    @torch.no_grad()
    def _init_gate_biases(self) -> None:
        h = self.d_model
        for layer in range(self.n_layers):
            # nn.LSTM adds two bias vectors, each (4H,) with gates in the order input, forget, cell, output.
            b_ih, b_hh = getattr(self.lstm, f"bias_ih_l{layer}"), getattr(self.lstm, f"bias_hh_l{layer}")
            b_ih.zero_()
            b_hh.zero_()
            if self.gate_init == "chrono":
                forget = torch.log(torch.empty(h).uniform_(1.0, self.max_timescale - 1.0))  # H
                b_ih[h : 2 * h] = forget
                b_ih[:h] = -forget
            else:
                b_ih[h : 2 * h] = 1.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._block(self._recur(x)[0])  # B T D

    def initial_state(self, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The zero hidden and cell states, each (n_layers, B, H), as nn.LSTM starts."""
        h = self.lstm.weight_hh_l0.new_zeros(self.n_layers, batch_size, self.d_model)
        return h, h.clone()

    def step(self, x_t: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor]
             ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """One step: x_t (B, H), state (hidden, cell) -> y_t (B, H), the new state."""
        y, state = self._recur(x_t[:, None], state)  # B 1 H
        return self._block(y[:, 0]), state

    def _recur(self, x: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor] | None = None
               ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """nn.LSTM on x (B, T, H). Under CPU autocast it runs in float32: torch's CPU LSTM has no bfloat16 kernel on
        many CPUs ("could not create a primitive descriptor", pytorch/pytorch#88136; this machine's among them)."""
        if x.device.type == "cpu" and torch.is_autocast_enabled("cpu"):
            with torch.autocast(device_type="cpu", enabled=False):
                return self.lstm(x.float(), state)
        return self.lstm(x, state)

    def _block(self, y: torch.Tensor) -> torch.Tensor:
        if self.out is not None:
            y = F.glu(self.out(F.gelu(y)), dim=-1)  # ... 2H -> ... H
        return y

