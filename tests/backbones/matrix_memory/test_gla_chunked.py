"""GLA's chunked form, which training runs, is the same map as its parallel form A V (which the analyses read) and as
its recurrence, in float64 to 1e-10: whole chunks, a ragged last chunk and a sequence shorter than a chunk, with gates
that decay strongly; and a whole backbone's outputs and gradients do not change with it."""

import pytest
import torch
from conftest import recurrent_outputs

from primacy.backbones import gla
from primacy.backbones.gla import GatedLinearAttention
from primacy.backbones.matrix_memory import Heads, chunked

LENGTHS = sorted({1, 5, 16, 17, 40, 64, gla.CHUNK, gla.CHUNK + 1})  # whole, ragged and shorter chunks


def random_heads(length: int, generator: torch.Generator, strong: bool = True) -> Heads:
    """B 2, H 2, K 4, V 3. ``strong``: log α per key dimension in [-30, 0), log-uniform from -1e-3 so that both open
    and nearly closed gates occur, and -30 throughout head 0's first key dimension (a chunk's product of gates reaches
    e^(-30 C), whose inverse overflows float32 from C = 3): the chunks take their (C, C, K) decays. Otherwise log α in
    [-1, 0), as trained gates are: every chunk spans less than ``gla.FAST_SPAN`` and takes the one matrix product."""
    def draw(*shape: int) -> torch.Tensor:
        return torch.randn(2, 2, *shape, generator=generator, dtype=torch.float64)

    high = 1.477 if strong else 0.0
    scale = 10.0 ** torch.empty(2, 2, length, 4, dtype=torch.float64).uniform_(-3, high, generator=generator)
    if strong:
        scale[:, 0, :, 0] = 30.0
    return Heads(draw(length, 4), draw(length, 4) / 2, draw(length, 3), {"log_alpha": -scale})  # log α B H T K


def mixer() -> GatedLinearAttention:
    return GatedLinearAttention(d_model=8, n_heads=2, d_key=4, d_value=3, conv_kernel=1).double()


@pytest.mark.parametrize("strong", [True, False], ids=["decays", "one-product"])
@pytest.mark.parametrize("length", LENGTHS)
def test_chunked_form_is_the_parallel_form_and_the_recurrence(length, strong):
    heads = random_heads(length, torch.Generator().manual_seed(length), strong)
    fits = gla._fits_one_product(chunked(heads.gates["log_alpha"], gla.CHUNK).cumsum(dim=3), heads.q)
    assert fits == (not strong or length == 1)  # one position of log α -30 spans exactly FAST_SPAN
    layer = mixer()
    by_chunks = layer._mix(heads)  # B H T V
    torch.testing.assert_close(by_chunks, layer._weights(heads) @ heads.v, rtol=0, atol=1e-10)
    torch.testing.assert_close(by_chunks, recurrent_outputs(layer, heads), rtol=0, atol=1e-10)


def test_float32_with_the_strongest_gates_is_finite_and_accurate():
    """log α = -30 at every position of one head and the random gates elsewhere, in float32: decays within a chunk go
    down to e^(-30 (C - 1)) and their inverses never appear, so outputs and gradients are finite and match float64's."""
    heads = random_heads(40, torch.Generator().manual_seed(0))
    heads.gates["log_alpha"][:, 1] = -30.0
    reference = mixer()._weights(heads) @ heads.v  # B H T V, float64
    log_alpha = heads.gates["log_alpha"].float().requires_grad_()
    q = heads.q.float().requires_grad_()
    o = mixer().float()._mix(Heads(q, heads.k.float(), heads.v.float(), {"log_alpha": log_alpha}))
    o.sum().backward()
    assert torch.isfinite(log_alpha.grad).all() and torch.isfinite(q.grad).all()
    torch.testing.assert_close(o.double(), reference, rtol=0, atol=1e-4)


@pytest.mark.parametrize("strong", [True, False], ids=["decays", "one-product"])
def test_the_chunked_form_passes_gradcheck(strong):
    """Exact gradients of the chunked form itself, for q, k, v and the gates, across a chunk boundary (fast mode: the
    Jacobian checked along random directions)."""
    heads = random_heads(gla.CHUNK + 3, torch.Generator().manual_seed(1), strong)
    layer = mixer()
    parts = (heads.q, heads.k, heads.v, heads.gates["log_alpha"])
    inputs = [x.clone().requires_grad_() for x in parts]
    assert torch.autograd.gradcheck(lambda q, k, v, g: layer._mix(Heads(q, k, v, {"log_alpha": g})), inputs,
                                    fast_mode=True)
