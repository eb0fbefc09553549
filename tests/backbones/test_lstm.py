"""LSTMBackbone: every flag does what it says."""

import math

import pytest
import torch

from primacy.backbones.lstm import LSTMBackbone
from primacy.errors import UsageError
from primacy.testing import check_backbone


def gate_biases(layer: LSTMBackbone, index: int = 0) -> dict[str, torch.Tensor]:
    lstm, h = layer.lstm, layer.d_model
    total = getattr(lstm, f"bias_ih_l{index}") + getattr(lstm, f"bias_hh_l{index}")  # 4H: input, forget, cell, output
    return dict(zip(("input", "forget", "cell", "output"), total.detach().split(h)))


def test_chrono_spreads_forget_time_constants_up_to_max_timescale():
    torch.manual_seed(0)
    b = gate_biases(LSTMBackbone(d_model=2000, gate_init="chrono", max_timescale=100))
    assert b["forget"].min() >= 0 and b["forget"].max() <= math.log(99)
    assert torch.allclose(b["input"], -b["forget"])
    assert (b["cell"] == 0).all() and (b["output"] == 0).all()
    # forget bias log(U[1, T - 1]): its median is log(T / 2)
    assert b["forget"].median().item() == pytest.approx(math.log(50), abs=0.1)


def test_unit_forget_and_pytorch_inits():
    b = gate_biases(LSTMBackbone(d_model=16, gate_init="unit_forget"))
    assert (b["forget"] == 1).all() and (b["input"] == 0).all()
    torch.manual_seed(0)
    default = LSTMBackbone(d_model=16, gate_init="pytorch")
    torch.manual_seed(0)
    plain = torch.nn.LSTM(16, 16, batch_first=True)
    assert torch.equal(default.lstm.bias_ih_l0, plain.bias_ih_l0)


def test_every_layer_is_initialised_and_output_block_is_applied():
    layer = LSTMBackbone(d_model=8, n_layers=2, gate_init="unit_forget", output_block=True)
    assert (gate_biases(layer, 1)["forget"] == 1).all()
    assert layer.out is not None and layer.out.out_features == 16
    assert LSTMBackbone(d_model=8).out is None
    check_backbone(LSTMBackbone, n_layers=2, output_block=True)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"d_model": 0}, "d_model=0"),
        ({"n_layers": 0}, "n_layers=0"),
        ({"gate_init": "orthogonal"}, "gate_init='orthogonal'"),
        ({"gate_init": "pytorch", "max_timescale": 10.0}, "max_timescale=10.0 is only used by gate_init='chrono'"),
        ({"max_timescale": 2.0}, "max_timescale=2.0"),
    ],
)
def test_bad_settings_are_rejected(kwargs, message):
    with pytest.raises(UsageError, match=message):
        LSTMBackbone(**kwargs)
