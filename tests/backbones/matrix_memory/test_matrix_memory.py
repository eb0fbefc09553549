"""The modern recurrent family (linear attention, RetNet, GLA, DeltaNet and gated DeltaNet): each passes the backbone
contract, its parallel form and its recurrence agree to 1e-10 in float64, and each mixes as its paper says."""

import pytest
import torch

from primacy import registry
from primacy.backbones import deltanet, gla, linear_attention, retnet
from primacy.backbones.conv import causal_depthwise
from primacy.backbones.deltanet import DeltaNetBackbone, DeltaRule
from primacy.backbones.gla import GatedLinearAttention, GLABackbone
from primacy.backbones.linear_attention import LinearAttention, LinearAttentionBackbone
from primacy.backbones.matrix_memory import Heads, MatrixMemory
from primacy.backbones.retnet import Retention, RetNetBackbone
from primacy.errors import UsageError
from primacy.testing import check_backbone

FAMILY = [(LinearAttentionBackbone, {}), (RetNetBackbone, {}), (RetNetBackbone, {"decay_exponent": 1.0}),
          (GLABackbone, {}), (DeltaNetBackbone, {}), (DeltaNetBackbone, {"gated": True})]
IDS = ["linear", "retnet", "retnet-short-decay", "gla", "deltanet", "gated-deltanet"]


@pytest.mark.parametrize("cls,kwargs", FAMILY, ids=IDS)
def test_contract(cls, kwargs):  # with its defaults in tests/backbones/test_backbones.py, as every registered backbone
    check_backbone(cls, n_layers=1, n_heads=2, d_key=6, d_value=3, conv_kernel=3, mlp=False, **kwargs)


@pytest.mark.parametrize("cls,kwargs", FAMILY, ids=IDS)
def test_stepping_is_the_parallel_form_in_float64(cls, kwargs):
    torch.manual_seed(0)
    model = cls(d_model=8, n_heads=2, conv_kernel=3, **kwargs).double().eval()
    x = torch.randn(2, 20, 8, dtype=torch.float64)
    state, steps = model.initial_state(2), []
    with torch.no_grad():
        for x_t in x.unbind(1):
            y_t, state = model.step(x_t, state)
            steps.append(y_t)
        torch.testing.assert_close(torch.stack(steps, 1), model(x), rtol=0, atol=1e-10)


def test_causal_depthwise_is_the_left_padded_convolution_in_either_piece():
    torch.manual_seed(0)
    x = torch.randn(2, 9, 5, dtype=torch.float64)
    conv = torch.nn.Conv1d(5, 5, 4, groups=5, padding=3).double()
    with torch.no_grad():
        expected = conv(x.transpose(1, 2))[:, :, :9].transpose(1, 2)  # B T C: the first 9 outputs are the causal ones
        whole, window = causal_depthwise(x, conv.weight, conv.bias)
        first, carried = causal_depthwise(x[:, :6], conv.weight, conv.bias)
        rest, _ = causal_depthwise(x[:, 6:], conv.weight, conv.bias, carried)
    torch.testing.assert_close(whole, expected, rtol=0, atol=1e-12)
    torch.testing.assert_close(torch.cat([first, rest], 1), expected, rtol=0, atol=1e-12)
    torch.testing.assert_close(window, x[:, -3:], rtol=0, atol=0)
    inputs = [t.detach().clone().requires_grad_() for t in (x[:, 5:], conv.weight, conv.bias, x[:, 2:5])]
    assert torch.autograd.gradcheck(lambda *args: causal_depthwise(*args)[0], inputs)  # its own backward


def test_registered_by_class_name():
    for cls, _ in FAMILY:
        assert registry.get(cls.__name__) is cls


def random_heads(length: int, width: int, generator: torch.Generator, **gates: torch.Tensor) -> Heads:
    q, k, v = (torch.randn(1, 1, length, width, generator=generator, dtype=torch.float64) for _ in range(3))
    return Heads(q, k, v, gates)


def test_linear_attention_weights_are_a_distribution_over_the_past():
    torch.manual_seed(0)
    mixer = LinearAttentionBackbone(d_model=8).double().blocks[0].mixer
    heads, _ = mixer._heads(torch.randn(2, 9, 8, dtype=torch.float64))
    weights = mixer._weights(heads)
    assert (weights >= 0).all() and (weights.triu(1) == 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 4, 9, dtype=torch.float64))


@pytest.mark.parametrize("decay_exponent", [5.0, 1.5])
def test_retention_is_decayed_rotated_dot_products(decay_exponent):
    """Key width 2 (one rotary pair, frequency 1): A[t, s] = γ_h^(t-s) q_tᵀ R(s - t) k_s / √2 with R the rotation by
    an angle, γ_h = 1 - 2^(-e-h) (e = 5 the paper's, 1.5 shorter); and only t - s matters, wherever the sequence
    starts."""
    torch.manual_seed(0)
    mixer = RetNetBackbone(d_model=4, n_heads=2, decay_exponent=decay_exponent).double().blocks[0].mixer
    q, k, v = (torch.randn(1, 2, 6, 2, dtype=torch.float64) for _ in range(3))
    x = torch.zeros(1, 6, 4, dtype=torch.float64)
    weights = mixer._weights(mixer._features(q, k, v, x, 0))[0]  # H T T
    gamma = 1 - 2.0 ** -(decay_exponent + torch.tensor([0.0, 1.0], dtype=torch.float64))
    expected = torch.zeros(2, 6, 6, dtype=torch.float64)
    for h in range(2):
        for t in range(6):
            for s in range(t + 1):
                angle = torch.tensor(float(s - t), dtype=torch.float64)
                rotation = torch.stack([torch.stack([angle.cos(), -angle.sin()]),
                                        torch.stack([angle.sin(), angle.cos()])])
                expected[h, t, s] = gamma[h] ** (t - s) * q[0, h, t] @ rotation @ k[0, h, s] / 2**0.5
    torch.testing.assert_close(weights, expected, rtol=0, atol=1e-12)
    later = mixer._weights(mixer._features(q, k, v, x, 5))[0]
    torch.testing.assert_close(later, weights, rtol=0, atol=1e-12)


def test_gla_with_open_gates_is_unnormalised_linear_attention():
    generator = torch.Generator().manual_seed(0)
    mixer = GLABackbone(d_model=8, n_heads=2).double().blocks[0].mixer
    heads = random_heads(7, 4, generator, log_alpha=torch.zeros(1, 1, 7, 4, dtype=torch.float64))
    torch.testing.assert_close(mixer._weights(heads), (heads.q @ heads.k.transpose(-1, -2)).tril())
    closed = random_heads(7, 4, generator, log_alpha=torch.full((1, 1, 7, 4), -1e4, dtype=torch.float64))
    expected = torch.diag_embed((closed.q * closed.k).sum(-1))  # the memory forgets all but the present
    torch.testing.assert_close(mixer._weights(closed), expected)


def test_the_delta_rule_overwrites_a_key_where_linear_attention_adds_to_it():
    """Keys k_0 = k_1 with β = 1: the second write replaces the first value, so reading k_0 afterwards returns v_1
    alone (A[2] = (0, 1, 0)), where a linear memory would return v_0 + v_1; an orthogonal key's value is untouched."""
    mixer = DeltaRule(d_model=8, n_heads=1, d_key=3, d_value=2, conv_kernel=1, gated=False).double()
    keys = torch.tensor([[1.0, 0, 0], [1.0, 0, 0], [0, 1.0, 0]], dtype=torch.float64)
    queries = torch.tensor([[0, 0, 1.0], [0, 1.0, 0], [1.0, 0, 0]], dtype=torch.float64)  # q_2 reads k_0's slot
    heads = Heads(queries[None, None], keys[None, None], torch.randn(1, 1, 3, 2, dtype=torch.float64),
                  {"beta": torch.ones(1, 1, 3, dtype=torch.float64)})
    weights = mixer._weights(heads)[0, 0]
    torch.testing.assert_close(weights[2], torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64))
    torch.testing.assert_close(weights[1], torch.tensor([0.0, 0.0, 0.0], dtype=torch.float64))  # q_1 ⟂ k_0, k_1


def test_gated_deltanet_decays_what_it_wrote():
    """With α = 1 it is DeltaNet; with orthonormal keys no write corrects another, so A[t, s] = Γ[t, s] (q_t · k_s) β_s
    with Γ[t, s] = Π_{s<j≤t} α_j."""
    generator = torch.Generator().manual_seed(0)
    mixer = DeltaRule(d_model=8, n_heads=1, d_key=4, d_value=2, conv_kernel=1, gated=True).double()
    beta = torch.rand(1, 1, 4, generator=generator, dtype=torch.float64)
    heads = random_heads(4, 4, generator)
    plain = Heads(heads.q, heads.k, heads.v, {"beta": beta})
    ones = Heads(heads.q, heads.k, heads.v, {"beta": beta, "log_alpha": torch.zeros(1, 1, 4, dtype=torch.float64)})
    torch.testing.assert_close(mixer._weights(ones), mixer._weights(plain), rtol=0, atol=1e-12)
    log_alpha = -torch.rand(1, 1, 4, generator=generator, dtype=torch.float64)
    keys = torch.eye(4, dtype=torch.float64)[None, None]
    decayed = mixer._weights(Heads(heads.q, keys, heads.v, {"beta": beta, "log_alpha": log_alpha}))[0, 0]
    cumulative = log_alpha[0, 0].cumsum(0)
    gamma = torch.exp(cumulative[:, None] - cumulative[None, :]).tril()  # T T
    torch.testing.assert_close(decayed, gamma * (heads.q[0, 0] @ keys[0, 0].T) * beta[0, 0], rtol=0, atol=1e-12)


@pytest.mark.parametrize("cls,kwargs,message", [
    (RetNetBackbone, {"d_model": 12, "n_heads": 4}, "d_key=3 is invalid: rotary positions need an even key width"),
    (RetNetBackbone, {"decay_exponent": 0.0}, r"decay_exponent=0.0 is invalid: it must be > 0 \(γ_h = 1 - 2\^\(-e-h\)"),
    (GLABackbone, {"d_model": 10, "n_heads": 4}, "d_model=10 is invalid with n_heads=4: it must be divisible"),
    (DeltaNetBackbone, {"conv_kernel": 0}, "conv_kernel=0 is invalid"),
    (LinearAttentionBackbone, {"mlp": False, "d_ff": 16}, "d_ff=16 is only used with mlp=True"),
])
def test_bad_arguments_are_one_line(cls, kwargs, message):
    with pytest.raises(UsageError, match=message) as error:
        cls(**kwargs)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("family,mixer,settings", [
    ("linear", LinearAttention, {}), ("retnet", Retention, {}), ("retnet", Retention, {"decay_exponent": 1.0}),
    ("gla", GatedLinearAttention, {}), ("deltanet", DeltaRule, {}), ("gated-deltanet", DeltaRule, {"gated": True})])
def test_a_backbone_trains_the_same_with_the_chunked_form(family, mixer, settings, monkeypatch):
    """Outputs and every gradient (input and parameters) of the chunked form, which training runs, equal the
    parallel form's A V in float64, over several chunks and a ragged last one."""
    torch.manual_seed(0)
    backbone, module = {"linear": (LinearAttentionBackbone, linear_attention), "retnet": (RetNetBackbone, retnet),
                        "gla": (GLABackbone, gla), "deltanet": (DeltaNetBackbone, deltanet),
                        "gated-deltanet": (DeltaNetBackbone, deltanet)}[family]
    model = backbone(d_model=8, n_layers=2, n_heads=2, conv_kernel=3, **settings).double()
    x = torch.randn(2, 2 * module.CHUNK + 3, 8, dtype=torch.float64)

    def outputs_and_gradients() -> list[torch.Tensor]:
        model.zero_grad(set_to_none=True)
        inputs = x.clone().requires_grad_()
        y = model(inputs)
        (y * torch.linspace(-1, 1, y.numel(), dtype=y.dtype).reshape(y.shape)).sum().backward()
        return [y.detach(), inputs.grad] + [p.grad for p in model.parameters()]

    chunked = outputs_and_gradients()
    with monkeypatch.context() as patch:
        patch.setattr(mixer, "_mix", MatrixMemory._mix)
        parallel = outputs_and_gradients()
    assert all(g is not None for g in chunked)
    for fast, reference in zip(chunked, parallel, strict=True):
        torch.testing.assert_close(fast, reference, rtol=0, atol=1e-10)
