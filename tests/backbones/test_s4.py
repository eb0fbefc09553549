"""S4 (DPLR) numerics against dense matrix powers of its own ssm(), and every constructor flag doing what it says."""

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from primacy.backbones.s4 import S4Backbone
from primacy.errors import UsageError
from primacy.models.optim import param_groups
from primacy.ssm.dplr import FeedbackSeries, dplr_kernel_reference
from primacy.ssm.hippo import nplr

MEASURES = ("legs", "lagt", "fout", "fout2")


def dense_kernel(layer: S4Backbone, length: int) -> torch.Tensor:
    """Re(C Ā^l B̄) for l < length from the dense ssm() with the bilinear Ā, B̄, in float64."""
    a, b, c, dt = (t.detach().to(torch.complex128 if t.is_complex() else torch.float64) for t in layer.ssm())
    eye = torch.eye(a.shape[-1], dtype=a.dtype)
    back = torch.linalg.inv(eye - dt[:, None, None] / 2 * a)  # H N N
    a_bar = back @ (eye + dt[:, None, None] / 2 * a)
    x, out = dt[:, None] * (back @ b[:, :, None])[..., 0], []  # H N: B̄
    for _ in range(length):
        out.append((c * x).sum(-1).real)
        x = (a_bar @ x[:, :, None])[..., 0]
    return torch.stack(out, dim=-1)


def perturbed(layer: S4Backbone, scale: float = 0.3) -> S4Backbone:
    """A copy with every SSM parameter moved off the HiPPO initialisation, as training would."""
    layer = copy.deepcopy(layer)
    torch.manual_seed(1)
    with torch.no_grad():
        for name in ("a_imag", "p", "b", "c"):
            param = getattr(layer, name)
            param.add_(scale * torch.randn_like(param) * param.abs().mean())
        layer.log_neg_a_real.add_(scale * torch.randn_like(layer.log_neg_a_real))
    return layer


def relative_error(fast: torch.Tensor, slow: torch.Tensor) -> float:
    return ((fast.double() - slow).abs().max() / slow.abs().max()).item()


@pytest.mark.parametrize("measure", MEASURES)
@pytest.mark.parametrize("d_state", [4, 64])
@pytest.mark.parametrize("dt_range", [(1e-3, 1e-2), (1e-2, 1.0)])
def test_float64_kernel_equals_dense_matrix_powers_of_ssm(measure, d_state, dt_range):
    torch.manual_seed(0)
    layer = S4Backbone(d_model=3, d_state=d_state, measure=measure, dt_min=dt_range[0], dt_max=dt_range[1]).double()
    for model in (layer, perturbed(layer)):
        for length in (1, 7, 64, 200):
            fast = model.kernel(length)
            assert fast.dtype == torch.float64 and fast.shape == (3, length)
            assert relative_error(fast, dense_kernel(model, length)) < 1e-9, (measure, length)


# Powers come from float64 exponents and the feedback series runs in float64, so the error is a few float32
# roundings of the parameters' products; FouT's barely decaying modes still accumulate a little with the length.
# Measured worst cases over this grid (3 seeds): LegS 2.9e-7, LagT 3.0e-7, FouT 1.9e-6 (6.6e-7 up to L = 64).
# The frequency-domain kernel this replaced reached LegS 5.7e-6, LagT 2.7e-6, FouT 1.2e-5.
FLOAT32_TOLERANCE = {"legs": 1e-6, "lagt": 1e-6, "fout": 5e-6, "fout2": 5e-6}


@pytest.mark.parametrize("measure", MEASURES)
def test_float32_kernel_is_within_a_few_roundings_of_the_exact_one(measure):
    torch.manual_seed(0)
    layer = S4Backbone(d_model=8, d_state=64, measure=measure, dt_min=1e-3, dt_max=1.0)
    for model in (layer, perturbed(layer)):
        for length in (1, 7, 64, 256):
            exact = dense_kernel(model, length)  # the float32 parameters, evaluated in float64
            fast = model.kernel(length)
            assert fast.dtype == torch.float32
            assert relative_error(fast, exact) < FLOAT32_TOLERANCE[measure], (measure, length)


@pytest.mark.parametrize("measure", MEASURES)
def test_fast_kernel_equals_the_materialised_cauchy_reference(measure):
    torch.manual_seed(0)
    layer = perturbed(S4Backbone(d_model=4, d_state=16, measure=measure, dt_max=0.5).double())
    for length in (5, 64):
        slow = dplr_kernel_reference(*layer.halves(), length).detach()
        assert relative_error(layer.kernel(length), slow) < 1e-9


@pytest.mark.parametrize("measure", MEASURES)
def test_kernel_gradients_equal_those_of_the_reference(measure):
    torch.manual_seed(0)
    layer = perturbed(S4Backbone(d_model=3, d_state=8, measure=measure, dt_max=0.5).double())
    weights = torch.randn(3, 20, dtype=torch.float64)
    params = [p for p in layer.parameters() if p.requires_grad]
    fast = torch.autograd.grad((layer.kernel(20) * weights).sum(), params, allow_unused=True, materialize_grads=True)
    slow = torch.autograd.grad((dplr_kernel_reference(*layer.halves(), 20) * weights).sum(), params,
                               allow_unused=True, materialize_grads=True)
    for name, f, s in zip([n for n, p in layer.named_parameters() if p.requires_grad], fast, slow):
        assert torch.allclose(f, s, rtol=1e-8, atol=1e-10 * s.abs().max().item()), name


def test_the_feedback_series_backward_is_its_derivative():
    torch.manual_seed(0)
    for n in (1, 2, 5, 33):
        alpha = torch.randn(3, n, dtype=torch.float64, requires_grad=True)
        beta = (0.3 * torch.randn(3, n, dtype=torch.float64)).requires_grad_()
        assert torch.autograd.gradcheck(FeedbackSeries.apply, (alpha, beta))


@pytest.mark.parametrize("measure", MEASURES)
@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-9), (torch.float32, 1e-4)])
def test_convolution_matches_stepping_the_recurrence(measure, dtype, tol):
    torch.manual_seed(0)
    layer = perturbed(S4Backbone(d_model=8, d_state=16, measure=measure)).to(dtype)
    x = torch.randn(3, 50, 8, dtype=dtype)
    state, steps = layer.initial_state(3), []
    for t in range(50):
        y_t, state = layer.step(x[:, t], state)
        steps.append(y_t)
    assert torch.allclose(layer(x), torch.stack(steps, dim=1), atol=tol, rtol=tol)


def test_kernels_of_different_lengths_are_prefixes_of_one_impulse_response():
    torch.manual_seed(0)
    layer = S4Backbone(d_model=4, d_state=16).double()
    assert torch.allclose(layer.kernel(100)[:, :37], layer.kernel(37), atol=1e-12)


def test_kernel_stays_float32_under_autocast():
    torch.manual_seed(0)
    layer = S4Backbone(d_model=4, d_state=16)
    x = torch.randn(2, 32, 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        kernel = layer.kernel(32)
        y = layer(x)
    assert kernel.dtype == torch.float32 and torch.equal(kernel, layer.kernel(32))
    assert torch.isfinite(y).all()


def test_init_is_the_positive_half_of_the_hippo_nplr_form():
    for measure in MEASURES:
        lam, p, b, _ = nplr(measure, 16)
        got_lam, got_p, got_b, _, _ = S4Backbone(d_model=2, d_state=16, measure=measure).halves()
        expected = torch.complex(lam[8:].real.clamp(max=-1e-4), lam[8:].imag)
        assert torch.allclose(got_lam[1].to(torch.complex128), expected, atol=1e-5)
        assert torch.allclose(got_p[0].to(torch.complex128), p[8:], atol=1e-5)
        assert torch.allclose(got_b[0].to(torch.complex128), b[8:], atol=1e-5)


def test_measure_changes_the_dynamics():
    systems = []
    for measure in MEASURES:
        torch.manual_seed(0)
        systems.append(S4Backbone(d_model=2, d_state=8, measure=measure).ssm()[0])
    assert not torch.allclose(systems[0], systems[1]) and not torch.allclose(systems[1], systems[2])


@pytest.mark.parametrize("transform", ["exp", "softplus"])
def test_dt_starts_log_uniform_in_range_under_either_transform(transform):
    torch.manual_seed(0)
    dt = S4Backbone(d_model=4000, d_state=2, dt_min=1e-3, dt_max=1e-1, dt_transform=transform).dt()["ssm"]
    assert dt.shape == (4000,)
    assert dt.min() >= 1e-3 * (1 - 1e-5) and dt.max() <= 1e-1 * (1 + 1e-5)
    assert dt.log10().mean().item() == pytest.approx(-2.0, abs=0.03)


def test_dt_transform_changes_the_parameterisation_not_the_step():
    torch.manual_seed(0)
    exp = S4Backbone(d_model=4, d_state=4, dt_transform="exp")
    torch.manual_seed(0)
    soft = S4Backbone(d_model=4, d_state=4, dt_transform="softplus")
    assert torch.allclose(exp.dt()["ssm"], soft.dt()["ssm"])
    assert torch.allclose(exp.dt_raw, exp.dt()["ssm"].log())
    assert not torch.allclose(exp.dt_raw, soft.dt_raw)
    assert torch.allclose(exp.kernel(20), soft.kernel(20), atol=1e-6)


@pytest.mark.parametrize(
    "flag,names",
    [("train_A", {"log_neg_a_real", "a_imag", "p"}), ("train_B", {"b"}), ("train_C", {"c"}), ("train_dt", {"dt_raw"})],
)
def test_frozen_parameters_get_no_gradient_and_no_optimiser_slot(flag, names):
    layer = S4Backbone(d_model=4, d_state=8, **{flag: False})
    layer(torch.randn(2, 10, 4)).sum().backward()
    assert {n for n, p in layer.named_parameters() if not p.requires_grad} == names
    assert all(p.grad is None for n, p in layer.named_parameters() if n in names)
    assert all(p.grad is not None for n, p in layer.named_parameters() if n not in names)
    optimised = {id(p) for g in param_groups(layer, 1e-3, 0.1) for p in g["params"]}
    assert not any(id(p) in optimised for n, p in layer.named_parameters() if n in names)


def test_hippo_setting_freezes_a_and_b_but_still_learns_c_and_dt():
    layer = S4Backbone(d_model=4, d_state=8, train_A=False, train_B=False)
    trainable = {n for n, p in layer.named_parameters() if p.requires_grad}
    assert trainable == {"c", "dt_raw", "skip", "out.weight", "out.bias"}


def test_dynamics_get_no_weight_decay_and_their_own_learning_rate():
    layer = S4Backbone(d_model=4, d_state=8, lr_dynamics=1e-4)
    by_param = {id(p): g for g in param_groups(layer, lr=1e-3, weight_decay=0.1) for p in g["params"]}
    for p in (layer.dt_raw, layer.b, layer.p, layer.a_imag, layer.log_neg_a_real):
        assert by_param[id(p)]["weight_decay"] == 0.0 and by_param[id(p)]["lr"] == 1e-4
    for p in (layer.c, layer.skip, layer.out.weight):
        assert by_param[id(p)]["weight_decay"] == 0.1 and by_param[id(p)]["lr"] == 1e-3
    default = S4Backbone(d_model=4, d_state=8)
    group = next(g for g in param_groups(default, lr=1e-3, weight_decay=0.1)
                 if any(p is default.b for p in g["params"]))
    assert group["lr"] == 1e-3 and group["weight_decay"] == 0.0, "no lr_dynamics: the model's rate, still no decay"


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"dt_min": -0.1}, "dt_min=-0.1"),
        ({"dt_min": 0.2, "dt_max": 0.1}, "dt_min=0.2, dt_max=0.1"),
        ({"d_state": 7}, "d_state=7"),
        ({"d_state": 0}, "d_state=0"),
        ({"measure": "legt"}, "measure='legt'"),
        ({"dt_transform": "relu"}, "dt_transform='relu'"),
        ({"d_model": 0}, "d_model=0"),
        ({"lr_dynamics": 0.0}, "lr_dynamics=0.0"),
    ],
)
def test_bad_settings_are_rejected(kwargs, message):
    with pytest.raises(UsageError, match=message):
        S4Backbone(**kwargs)


def test_the_kernel_benchmark_runs_and_its_references_compute_the_same_layers():
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "s4_kernel.py"
    out = subprocess.run([sys.executable, str(script), "--repeats", "1", "--widths", "4", "--lengths", "8", "24"],
                         capture_output=True, text=True, check=True).stdout
    rows = [line.split() for line in out.splitlines() if line.split()[0] in ("kernel", "layer")]
    assert [(r[0], r[2]) for r in rows] == [("kernel", "8"), ("layer", "8"), ("kernel", "24"), ("layer", "24")]
    assert all(float(value) > 0 for row in rows for value in row[3:])
