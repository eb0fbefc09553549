"""HiPPO matrices: the definitions we chose, their normal-plus-low-rank decomposition for every measure, and the
impulse responses `primacy kernels` draws from them."""

import math

import numpy as np
import pytest
import torch
from conftest import extra_module

from primacy.errors import UsageError
from primacy.ssm.dense import impulse_responses
from primacy.ssm.hippo import LAGT_BETA, MEASURES, hippo, low_rank, nplr

SIZES = {"legs": (1, 2, 7, 16, 64), "lagt": (1, 2, 7, 16, 64), "fout": (2, 4, 16, 64), "fout2": (2, 4, 16, 64)}
CASES = [(measure, n) for measure in MEASURES for n in SIZES[measure]]


def test_legs_is_the_scaled_legendre_matrix():
    a, b = hippo("legs", 3)
    s3, s5, s15 = 3**0.5, 5**0.5, 15**0.5
    expected = torch.tensor([[-1.0, 0, 0], [-s3, -2, 0], [-s5, -s15, -3]], dtype=torch.float64)
    assert torch.allclose(a, expected) and torch.allclose(b, torch.tensor([1.0, s3, s5], dtype=torch.float64))


@pytest.mark.parametrize("n", [1, 7, 16, 64])
def test_legs_at_any_size_is_its_formula(n):
    """Gu et al. (2020): A[i, k] = -sqrt(2i+1) sqrt(2k+1) below the diagonal, -(i+1) on it, 0 above;
    B[i] = sqrt(2i+1)."""
    a, b = hippo("legs", n)
    for i in range(n):
        assert b[i].item() == pytest.approx(math.sqrt(2 * i + 1), rel=1e-15)
        for k in range(n):
            expected = -math.sqrt(2 * i + 1) * math.sqrt(2 * k + 1) if i > k else -(i + 1.0) if i == k else 0.0
            assert a[i, k].item() == pytest.approx(expected, rel=1e-15, abs=0), (i, k)


@pytest.mark.parametrize("measure,n,dt", [("legs", 8, 0.05), ("lagt", 6, 0.5), ("fout", 8, 0.01)])
def test_impulse_responses_are_the_matrix_exponential_and_the_bilinear_powers(measure, n, dt):
    """Against scipy's expm (the continuous solution exp(jΔA)B) and the bilinear recurrence written out in numpy."""
    expm = extra_module("scipy.linalg").expm
    a, b = hippo(measure, n)
    continuous, discrete = impulse_responses(a, b, dt, 20)
    a_np, b_np = a.numpy(), b.numpy()
    for j in (0, 1, 7, 19):
        np.testing.assert_allclose(continuous[j].numpy(), expm(j * dt * a_np) @ b_np, rtol=1e-10, atol=1e-12)
    eye = np.eye(n)
    back = np.linalg.inv(eye - dt / 2 * a_np)
    a_bar, b_bar = back @ (eye + dt / 2 * a_np), dt * back @ b_np
    for j in (0, 1, 7, 19):
        np.testing.assert_allclose(discrete[j].numpy(), np.linalg.matrix_power(a_bar, j) @ b_bar / dt, rtol=1e-10,
                                   atol=1e-12)


def test_lagt_is_the_tilted_laguerre_matrix_with_beta_one_hundredth():
    a, b = hippo("lagt", 3)
    d = -(1 + LAGT_BETA) / 2
    expected = torch.tensor([[d, 0, 0], [-1, d, 0], [-1, -1, d]], dtype=torch.float64)
    assert LAGT_BETA == 0.01
    assert torch.allclose(a, expected)
    assert torch.allclose(b, torch.full((3,), 0.1, dtype=torch.float64)), "B = sqrt(beta)"


def test_fout_rotates_sine_cosine_pairs_minus_the_rank_one_endpoint_term():
    a, b = hippo("fout", 6)
    assert torch.allclose(b, torch.tensor([1, 0, 2**0.5, 0, 2**0.5, 0], dtype=torch.float64))
    rotation = a + b[:, None] * b[None, :]
    assert torch.allclose(rotation, -rotation.T), "A + B B^T is skew-symmetric"
    assert rotation[2, 3] == pytest.approx(-torch.pi) and rotation[4, 5] == pytest.approx(-2 * torch.pi)
    assert torch.count_nonzero(rotation[:2]) == 0, "the constant and the unused zero-frequency sine do not rotate"


def test_fout2_is_the_fourier_basis_on_a_unit_window_and_fout_at_twice_the_step():
    """Morita's FouT, sqrt2 sin(2 pi n t) and sqrt2 cos(2 pi n t) (S4's fourier2): pair j turns at 2 pi j, and A, B are
    twice fout's, so its impulse responses at Δt are twice fout's at 2Δt, continuous and bilinear alike."""
    a, b = hippo("fout2", 6)
    rotation = a + b[:, None] * b[None, :] / 2
    assert torch.allclose(rotation, -rotation.T)
    assert rotation[2, 3] == pytest.approx(-2 * torch.pi) and rotation[4, 5] == pytest.approx(-4 * torch.pi)
    assert torch.allclose(b, 2 * torch.tensor([1, 0, 2**0.5, 0, 2**0.5, 0], dtype=torch.float64))
    a1, b1 = hippo("fout", 8)
    a2, b2 = hippo("fout2", 8)
    for twice, once in zip(impulse_responses(a2, b2, 0.01, 30), impulse_responses(a1, b1, 0.02, 30)):
        torch.testing.assert_close(twice, 2 * once, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("measure,n", CASES)
def test_hippo_is_float64_and_a_plus_low_rank_is_normal(measure, n):
    a, b = hippo(measure, n)
    assert a.shape == (n, n) and b.shape == (n,) and a.dtype == b.dtype == torch.float64
    p = low_rank(measure, n)
    normal = a + p[:, None] * p[None, :]
    assert torch.allclose(normal @ normal.T, normal.T @ normal, atol=1e-9 * n**2)


@pytest.mark.parametrize("measure,n", CASES)
def test_nplr_reconstructs_a_and_b_with_a_unitary_v(measure, n):
    a, b = hippo(measure, n)
    lam, p, b_tilde, v = nplr(measure, n)
    assert all(t.dtype == torch.complex128 for t in (lam, p, b_tilde, v))
    rebuilt = v @ (torch.diag(lam) - p[:, None] * p.conj()[None, :]) @ v.conj().T
    scale = a.abs().max().item()
    assert torch.allclose(rebuilt, a.to(torch.complex128), atol=1e-12 * scale * n)
    assert torch.allclose(v @ b_tilde, b.to(torch.complex128), atol=1e-12 * n)
    assert torch.allclose(v.conj().T @ v, torch.eye(n, dtype=torch.complex128), atol=1e-12 * n)


@pytest.mark.parametrize("measure,n", [(m, n) for m, n in CASES if n % 2 == 0])
def test_nplr_mirrors_conjugate_pairs_so_the_last_half_describes_the_system(measure, n):
    lam, p, b, v = nplr(measure, n)
    assert torch.all(lam.imag[:-1] <= lam.imag[1:]), "ordered by imaginary part"
    assert torch.all(lam.imag[n // 2:] >= 0)
    for t in (lam, p, b):
        assert torch.allclose(t, t.flip(0).conj(), atol=1e-12)
    assert torch.allclose(v, v.flip(1).conj(), atol=1e-12)


def test_fout_zero_frequency_pair_is_split_into_conjugates():
    lam, _, _, v = nplr("fout", 8)
    assert torch.allclose(lam[3:5], torch.zeros(2, dtype=torch.complex128), atol=1e-12)
    # (e0 ± i e1)/√2 spans the constant and the unused sine, the only states that do not rotate
    assert torch.allclose(v[2:, 3:5].abs(), torch.zeros(6, 2, dtype=torch.float64), atol=1e-12)


@pytest.mark.parametrize(
    "measure,n,message",
    [("legt", 4, "measure='legt'"), ("legs", 0, "state size 0"),
     ("fout", 5, "state size 5 is invalid for measure='fout'")],
)
def test_bad_measure_or_size_is_rejected(measure, n, message):
    with pytest.raises(UsageError, match=message):
        hippo(measure, n)
    with pytest.raises(UsageError, match=message):
        nplr(measure, n)
