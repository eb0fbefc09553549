"""The exact token-to-token influence of the built-in backbones that have one (S4D, S4, the Transformer), in float64:
it rebuilds each mixing layer's output, is causal, and moves with content only where the layer is selective."""

import contextlib
import re

import pytest
import torch

from primacy.backbones.base import Backbone
from primacy.backbones.influence import Influence, ablating, toeplitz, zero_units
from primacy.backbones.lstm import LSTMBackbone
from primacy.backbones.s4 import S4Backbone
from primacy.backbones.s4d import S4DBackbone
from primacy.backbones.transformer import TransformerBackbone
from primacy.errors import UsageError
from primacy.testing import check_backbone, check_influence

SSMS = [(S4DBackbone, {"init": "lin", "discretization": "zoh"}), (S4Backbone, {"measure": "legs"})]


def inputs(seed: int, batch: int = 3, length: int = 12, d_model: int = 8) -> torch.Tensor:
    return torch.randn(batch, length, d_model, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize(("cls", "kwargs"), SSMS)
def test_an_ssm_influence_is_its_kernel_as_a_toeplitz_matrix_the_same_for_any_content(cls, kwargs):
    torch.manual_seed(0)
    model = cls(d_model=8, d_state=8, **kwargs).double()
    x = inputs(1)
    [layer] = check_influence(model, x)  # Σ_s weights · values = the FFT path's K * u + D u to 1e-10, causal
    assert layer.unit == "channel" and layer.weights.shape == (3, 8, 12, 12) and layer.values.shape == (3, 8, 12)
    torch.testing.assert_close(layer.values, x.transpose(1, 2), rtol=0, atol=0)  # the SSM's input itself
    kernel = model.kernel(12)  # H T
    torch.testing.assert_close(layer.weights[1, :, 5, 2], kernel[:, 3], rtol=0, atol=0)  # K[t - s]
    torch.testing.assert_close(layer.weights[2, :, 4, 4], kernel[:, 0] + model.skip, rtol=0, atol=0)  # + D
    # The layer's output is what forward feeds the GELU and GLU block.
    torch.testing.assert_close(model._block(layer.mixed().transpose(1, 2)), model(x), rtol=0, atol=1e-12)
    [other] = model.influence(inputs(2))
    assert torch.equal(other.weights, layer.weights)  # time-invariant: content cannot move it
    assert torch.equal(layer.weights[0], layer.weights[2])


def test_toeplitz_is_the_causal_convolution():
    kernel, skip, u = torch.randn(2, 5, dtype=torch.float64), torch.randn(2, dtype=torch.float64), torch.randn(2, 5)
    u = u.double()
    direct = torch.stack([sum(kernel[:, t - s] * u[:, s] for s in range(t + 1)) + skip * u[:, t] for t in range(5)], 1)
    torch.testing.assert_close(toeplitz(kernel, skip) @ u[:, :, None], direct[:, :, None], rtol=0, atol=1e-14)


def test_the_transformer_influence_is_its_attention_on_each_layer_and_follows_content():
    torch.manual_seed(0)
    model = TransformerBackbone(d_model=8, n_layers=2, n_heads=2, dropout=0.1).double()  # training mode, dropout
    x = inputs(1)
    layers = check_influence(model, x)  # Σ_s weights · values = the fused kernel's heads' outputs to 1e-10
    assert model.training, "influence() must leave the model in the mode it found it"
    assert len(layers) == 2 and all(layer.unit == "head" for layer in layers)
    assert layers[0].weights.shape == (3, 2, 12, 12) and layers[0].values.shape == (3, 2, 12, 4)
    model.eval()
    with torch.no_grad(), model.capture_attention() as captured:
        model(x)
    for layer, attention in zip(layers, captured):  # the attention forward computes, on each layer's own input
        torch.testing.assert_close(layer.weights, attention.weights, rtol=0, atol=1e-14)
    torch.testing.assert_close(layers[1].weights.sum(-1), torch.ones(3, 2, 12, dtype=torch.float64))
    other = model.influence(inputs(2))
    assert not torch.allclose(other[0].weights, layers[0].weights)  # attention depends on content
    with model.ablate_heads([(1, 0)]):
        ablated = check_influence(model, x)
    assert (ablated[1].values[:, 0] == 0).all() and (ablated[1].output[:, 0] == 0).all()


def test_backbones_without_an_exact_form_offer_none():
    assert not hasattr(LSTMBackbone(d_model=8), "influence")


def test_influence_is_a_plain_record():
    w = torch.tril(torch.ones(1, 1, 3, 3, dtype=torch.float64))
    v = torch.arange(3, dtype=torch.float64).view(1, 1, 3)
    assert Influence(w, v, v.cumsum(-1), "channel").mixed().tolist() == [[[0.0, 1.0, 3.0]]]


class _RunningSum(Backbone):
    """A running sum per channel, whose influence is exact: a lower-triangular matrix of ones on the channels."""

    def __init__(self, d_model: int = 4) -> None:
        super().__init__()
        self.d_model = d_model
        self.scale = torch.nn.Parameter(torch.ones(d_model))
        self.ablated: frozenset[int] = frozenset()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return zero_units(x.cumsum(1), self.ablated, dim=-1) * self.scale  # B T D

    def ablate(self, units):
        return ablating([self], units, [self.d_model], "channel")

    def weights(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        return torch.ones(t, t, dtype=x.dtype).tril().expand(b, d, t, t)  # B D T T

    def influence(self, x: torch.Tensor) -> list[Influence]:
        with torch.no_grad():
            return [Influence(self.weights(x), x.transpose(1, 2), x.cumsum(1).transpose(1, 2), "channel")]


class _InfluenceSeesTheFuture(_RunningSum):
    def weights(self, x: torch.Tensor) -> torch.Tensor:
        return super().weights(x) + torch.ones_like(super().weights(x)).triu(1) * 1e-3


class _InfluenceMissesTheOutput(_RunningSum):
    def weights(self, x: torch.Tensor) -> torch.Tensor:
        return super().weights(x) * (1 + 1e-8)


class _AblationIgnored(_RunningSum):
    def ablate(self, units):
        return contextlib.nullcontext()


class _AblationKept(_RunningSum):
    @contextlib.contextmanager
    def ablate(self, units):
        self.ablated = self.ablated | {unit for _, unit in units}
        yield


@pytest.mark.parametrize("broken,message", [
    (_AblationIgnored, "_AblationIgnored: ablating layer 0's units changed nothing"),
    (_AblationKept, "_AblationKept: a nested ablate() did not restore the outer one on exit"),
    (_InfluenceSeesTheFuture,
     "_InfluenceSeesTheFuture.influence()[0]: weights above the diagonal (s > t) are not zero"),
    (_InfluenceMissesTheOutput, "_InfluenceMissesTheOutput.influence()[0]: Σ_s weights · values is"),
])
def test_check_backbone_refuses_an_influence_or_ablation_that_is_not_exact(broken, message):
    check_backbone(_RunningSum)  # the exact form passes
    with pytest.raises(AssertionError, match=re.escape(message)):
        check_backbone(broken)


@pytest.mark.parametrize("cls", [S4Backbone, S4DBackbone])
def test_ablating_an_ssm_channel_is_zeroing_its_column_of_the_output_layer(cls):
    """GELU(0) = 0, so a channel whose SSM output is zero is a channel the output layer does not read."""
    torch.manual_seed(0)
    model, x = cls(d_model=6, d_state=4).double(), torch.randn(2, 9, 6, dtype=torch.float64)
    with torch.no_grad(), model.ablate([(0, 1), (0, 4)]):
        ablated = model(x)
    with torch.no_grad():
        model.out.weight[:, [1, 4]] = 0.0
        assert torch.equal(ablated, model(x))


@pytest.mark.parametrize("units,message", [
    ([(1, 0)], "channel (layer, channel)=(1, 0) is invalid: layer must lie in [0, 0] and channel in [0, 5]"),
    ([(0, 6)], "channel (layer, channel)=(0, 6) is invalid"),
    (["a"], "channel 'a' is invalid: it must be a (layer, channel) pair of integers"),
])
def test_ablating_a_unit_that_does_not_exist_is_one_line(units, message):
    model = S4DBackbone(d_model=6, d_state=4)
    with pytest.raises(UsageError, match=re.escape(message)), model.ablate(units):
        pass
    assert model.ablated == frozenset()
