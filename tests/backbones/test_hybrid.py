"""HybridBackbone: S4D and sliding-window attention layers in any order pass the contract, step as they run, and
report what each kind of layer is."""

import pytest
import torch

from primacy.backbones.hybrid import HybridBackbone
from primacy.errors import UsageError
from primacy.testing import check_backbone


def test_contract():  # with its defaults in tests/backbones/test_backbones.py, as every registered backbone
    check_backbone(HybridBackbone, pattern=["attention", "ssm", "attention"], window=2, n_heads=2, d_state=4,
                   mlp=False)


def test_stepping_is_forward_in_float64_with_an_ssm_channel_and_a_head_ablated():
    torch.manual_seed(0)
    model = HybridBackbone(d_model=8, pattern=["ssm", "attention", "ssm"], window=3, n_heads=2, d_state=4)
    model = model.double().eval()
    x = torch.randn(2, 11, 8, dtype=torch.float64)
    with torch.no_grad(), model.ablate([(0, 3), (1, 1)]):
        full = model(x)
        state, steps = model.initial_state(2), []
        for x_t in x.unbind(1):
            y_t, state = model.step(x_t, state)
            steps.append(y_t)
    torch.testing.assert_close(torch.stack(steps, 1), full, rtol=0, atol=1e-10)
    assert not torch.allclose(model(x), full), "the ablation acts"


def test_layers_report_their_units_and_timescales():
    model = HybridBackbone(d_model=8, pattern=["attention", "ssm"], n_heads=2, d_state=4)
    layers = model.influence(torch.randn(1, 5, 8))
    assert [layer.unit for layer in layers] == ["head", "channel"]
    assert [layer.weights.shape[1] for layer in layers] == [2, 8]
    assert list(model.dt()) == ["layer1"] and model.dt()["layer1"].shape == (8,)


@pytest.mark.parametrize("kwargs,message", [
    ({"pattern": []}, "pattern=\\[\\] is invalid"),
    ({"pattern": ["ssm", "mamba"]}, "pattern='mamba' is unknown: choose one of 'ssm', 'attention'"),
    ({"window": 0}, "window=0 is invalid"),
    ({"d_model": 10, "n_heads": 4}, "d_model=10 is invalid with n_heads=4"),
    ({"mlp": False, "d_ff": 8}, "d_ff=8 is only used with mlp=True"),
])
def test_bad_settings_are_one_line(kwargs, message):
    with pytest.raises(UsageError, match=message) as error:
        HybridBackbone(**kwargs)
    assert "\n" not in str(error.value)
