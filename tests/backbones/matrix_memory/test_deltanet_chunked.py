"""DeltaNet's chunked form, which training runs, is the same map as its parallel form A V (which the analyses read)
and as its recurrence, in float64 to 1e-10: whole chunks, a ragged last chunk and a sequence shorter than a chunk, with
and without strongly decaying gates; and a whole backbone's outputs and gradients do not change with it."""

import pytest
import torch
from conftest import recurrent_outputs
from torch.utils._python_dispatch import TorchDispatchMode

from primacy.backbones import deltanet
from primacy.backbones.deltanet import DeltaRule
from primacy.backbones.matrix_memory import Heads

LENGTHS = [1, 5, deltanet.CHUNK, deltanet.CHUNK + 1, 40, 64]


def random_heads(length: int, gated: bool, generator: torch.Generator) -> Heads:
    """B 2, H 2, K 4, V 3: unit keys, β in (0, 1), and with ``gated`` log α in (-20, 0), heavy at both ends."""
    def draw(*shape: int) -> torch.Tensor:
        return torch.randn(2, 2, *shape, generator=generator, dtype=torch.float64)

    k = torch.nn.functional.normalize(draw(length, 4), dim=-1)  # B H T K
    gates = {"beta": torch.rand(2, 2, length, generator=generator, dtype=torch.float64)}  # B H T
    if gated:
        scale = 10.0 ** torch.empty(2, 2, length, dtype=torch.float64).uniform_(-3, 1.3, generator=generator)
        gates["log_alpha"] = -scale  # B H T: from -1e-3 to -20
    return Heads(draw(length, 4) / 2, k, draw(length, 3), gates)


def mixer(gated: bool) -> DeltaRule:
    return DeltaRule(d_model=8, n_heads=2, d_key=4, d_value=3, conv_kernel=1, gated=gated).double()


@pytest.mark.parametrize("gated", [False, True], ids=["deltanet", "gated"])
@pytest.mark.parametrize("length", LENGTHS)
def test_chunked_form_is_the_parallel_form_and_the_recurrence(length, gated):
    heads = random_heads(length, gated, torch.Generator().manual_seed(length))
    layer = mixer(gated)
    chunked = layer._mix(heads)  # B H T V
    torch.testing.assert_close(chunked, layer._weights(heads) @ heads.v, rtol=0, atol=1e-10)
    torch.testing.assert_close(chunked, recurrent_outputs(layer, heads), rtol=0, atol=1e-10)


def test_the_strongest_gates_give_finite_outputs_and_gradients():
    """log α = -20 at every position: decays of e^(-320) within a chunk underflow to 0, never overflow."""
    heads = random_heads(40, True, torch.Generator().manual_seed(0))
    heads.gates["log_alpha"] = torch.full_like(heads.gates["beta"], -20.0).requires_grad_()
    heads.q.requires_grad_()
    mixer(True)._mix(heads).sum().backward()
    assert torch.isfinite(heads.gates["log_alpha"].grad).all() and torch.isfinite(heads.q.grad).all()


class LargestTensor(TorchDispatchMode):
    """Records the most elements of any tensor an operation returns while active (forward or backward)."""

    def __init__(self) -> None:
        super().__init__()
        self.numel = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        sizes = [t.numel() for t in torch.utils._pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]
        self.numel = max([self.numel, *sizes])
        return out


@pytest.mark.parametrize("gated", [False, True], ids=["deltanet", "gated"])
def test_the_chunked_form_builds_chunk_blocks_not_a_sequence_square(gated):
    """One head, T = 256: nothing larger than the C × C blocks of all chunks (T · C elements), where the parallel
    form's A has T²."""
    length, chunk = 256, deltanet.CHUNK
    heads = random_heads(length, gated, torch.Generator().manual_seed(0))
    heads = Heads(*(x[:1, :1].requires_grad_() for x in (heads.q, heads.k, heads.v)),
                  {n: g[:1, :1].requires_grad_() for n, g in heads.gates.items()})
    with LargestTensor() as largest:
        mixer(gated)._mix(heads).sum().backward()
    assert largest.numel <= length * max(chunk, 4 + 3)
