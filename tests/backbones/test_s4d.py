"""S4D numerics against slow references, and every constructor flag doing what it says."""

import math

import pytest
import torch

from primacy.backbones.s4d import S4DBackbone
from primacy.errors import UsageError
from primacy.models.optim import param_groups
from primacy.ssm.hippo import hippo, nplr

CASES = [(init, disc) for init in ("legs", "lin") for disc in ("bilinear", "zoh")]


def reference_kernel(layer: S4DBackbone, length: int) -> torch.Tensor:
    """K[h, l] from the explicit recurrence x_l = Ā x_{l-1} + B̄ δ_l0, y_l = 2 Re(C x_l), in float64."""
    a, b, c, dt = (t.detach().to(torch.complex128 if t.is_complex() else torch.float64) for t in layer.ssm())
    dta = dt[:, None] * a
    if layer.discretization == "bilinear":
        a_bar, b_bar = (1 + dta / 2) / (1 - dta / 2), dt[:, None] * b / (1 - dta / 2)
    else:
        a_bar = torch.exp(dta)
        b_bar = (a_bar - 1) / a * b
    x, out = b_bar, []
    for _ in range(length):
        out.append(2 * (c * x).sum(-1).real)
        x = a_bar * x
    return torch.stack(out, dim=-1)


@pytest.mark.parametrize("init,discretization", CASES)
def test_kernel_equals_the_explicit_recurrence_in_float64(init, discretization):
    torch.manual_seed(0)
    layer = S4DBackbone(d_model=6, d_state=16, init=init, discretization=discretization, dt_min=1e-3,
                        dt_max=0.5).double()
    fast, slow = layer.kernel(200), reference_kernel(layer, 200)
    assert fast.dtype == torch.float64
    assert torch.allclose(fast, slow, rtol=1e-9, atol=1e-9 * slow.abs().max().item())


@pytest.mark.parametrize("init,discretization", CASES)
def test_float32_kernel_is_within_1e_6_of_the_exact_one_at_any_length(init, discretization):
    # Powers from float64 exponents: measured worst 5.8e-7 up to L = 1024 (3 seeds); exp(l · log Ā) with a float32
    # log reached 5.5e-5 (LegS, bilinear) from the phase error l · eps · |log Ā|.
    torch.manual_seed(0)
    layer = S4DBackbone(d_model=8, d_state=64, init=init, discretization=discretization, dt_min=1e-3, dt_max=1.0)
    for length in (1, 2, 17, 64, 1024):
        exact = reference_kernel(layer, length)  # the float32 parameters, evaluated in float64
        fast = layer.kernel(length)
        assert fast.dtype == torch.float32 and fast.shape == (8, length)
        assert (fast.double() - exact).abs().max() <= 1e-6 * exact.abs().max(), length


@pytest.mark.parametrize("init,discretization", CASES)
def test_float32_convolution_matches_stepping_the_recurrence(init, discretization):
    torch.manual_seed(0)
    layer = S4DBackbone(d_model=8, d_state=32, init=init, discretization=discretization)
    x = torch.randn(3, 64, 8)
    y = layer(x)
    state, steps = layer.initial_state(3), []
    for t in range(64):
        y_t, state = layer.step(x[:, t], state)
        steps.append(y_t)
    assert torch.allclose(y, torch.stack(steps, dim=1), atol=1e-4, rtol=1e-4)


def test_legs_nplr_reconstructs_hippo_and_the_diagonal_init_uses_its_eigenvalues():
    a, _ = hippo("legs", 16)
    lam, p, _, v = nplr("legs", 16)
    rebuilt = v @ (torch.diag(lam) - p[:, None] * p.conj()[None, :]) @ v.conj().T
    assert torch.allclose(rebuilt, a.to(torch.complex128), atol=1e-10)
    layer = S4DBackbone(d_model=2, d_state=16, init="legs")
    a_diag = layer.ssm()[0][0].to(torch.complex128)
    assert torch.allclose(a_diag, lam[8:], atol=1e-5), "the positive-frequency half of Λ, one per conjugate pair"


def test_lin_init_is_s4d_lin():
    a, b, _, _ = S4DBackbone(d_model=2, d_state=8, init="lin").ssm()
    assert torch.allclose(a[0].real, torch.full((4,), -0.5))
    assert torch.allclose(a[0].imag, math.pi * torch.arange(4.0))
    assert torch.allclose(b, torch.ones_like(b))


@pytest.mark.parametrize("transform", ["exp", "softplus"])
def test_dt_starts_log_uniform_in_range_under_either_transform(transform):
    torch.manual_seed(0)
    layer = S4DBackbone(d_model=4000, d_state=2, dt_min=1e-3, dt_max=1e-1, dt_transform=transform)
    dt = layer.dt()["ssm"]
    assert dt.shape == (4000,)
    assert dt.min() >= 1e-3 * (1 - 1e-5) and dt.max() <= 1e-1 * (1 + 1e-5)
    assert dt.log10().mean().item() == pytest.approx(-2.0, abs=0.03), "log-uniform: mean log10 in the middle"


def test_dt_transform_changes_the_parameterisation():
    torch.manual_seed(0)
    exp = S4DBackbone(d_model=4, d_state=2, dt_transform="exp")
    torch.manual_seed(0)
    soft = S4DBackbone(d_model=4, d_state=2, dt_transform="softplus")
    assert torch.allclose(exp.dt()["ssm"], soft.dt()["ssm"])
    assert torch.allclose(exp.dt_raw, exp.dt()["ssm"].log())
    assert not torch.allclose(exp.dt_raw, soft.dt_raw)


def test_discretization_changes_the_kernel():
    torch.manual_seed(0)
    a = S4DBackbone(d_model=2, d_state=8, discretization="bilinear", dt_min=0.5, dt_max=0.5)
    torch.manual_seed(0)
    b = S4DBackbone(d_model=2, d_state=8, discretization="zoh", dt_min=0.5, dt_max=0.5)
    assert not torch.allclose(a.kernel(16), b.kernel(16))


@pytest.mark.parametrize("flag,names", [("train_A", {"log_neg_a_real", "a_imag"}), ("train_B", {"b"}),
                                        ("train_dt", {"dt_raw"})])
def test_frozen_parameters_get_no_gradient_and_no_optimiser_slot(flag, names):
    layer = S4DBackbone(d_model=4, d_state=8, **{flag: False})
    layer(torch.randn(2, 10, 4)).sum().backward()
    frozen = {n for n, p in layer.named_parameters() if not p.requires_grad}
    assert frozen == names
    assert all(p.grad is None for n, p in layer.named_parameters() if n in names)
    optimised = {id(p) for g in param_groups(layer, 1e-3, 0.1) for p in g["params"]}
    assert not any(id(p) in optimised for n, p in layer.named_parameters() if n in names)


def test_dynamics_get_no_weight_decay_and_their_own_learning_rate():
    layer = S4DBackbone(d_model=4, d_state=8, lr_dynamics=1e-4)
    groups = param_groups(layer, lr=1e-3, weight_decay=0.1)
    by_param = {id(p): g for g in groups for p in g["params"]}
    for p in (layer.dt_raw, layer.b, layer.a_imag):
        assert by_param[id(p)]["weight_decay"] == 0.0 and by_param[id(p)]["lr"] == 1e-4
    assert by_param[id(layer.c)]["weight_decay"] == 0.1 and by_param[id(layer.c)]["lr"] == 1e-3


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"dt_min": -0.1}, "dt_min=-0.1"),
        ({"dt_min": 0.2, "dt_max": 0.1}, "dt_min=0.2, dt_max=0.1"),
        ({"d_state": 7}, "d_state=7"),
        ({"init": "fout"}, "init='fout'"),
        ({"discretization": "euler"}, "discretization='euler'"),
        ({"dt_transform": "relu"}, "dt_transform='relu'"),
        ({"d_model": 0}, "d_model=0"),
        ({"lr_dynamics": 0.0}, "lr_dynamics=0.0"),
    ],
)
def test_bad_settings_are_rejected(kwargs, message):
    with pytest.raises(UsageError, match=message):
        S4DBackbone(**kwargs)
