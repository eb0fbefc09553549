"""The free-recall model's random numbers, each list's from its own generator, so that what a list draws depends
neither on batching nor on the number of processes, and a resumed run draws what an unbroken one does."""

from __future__ import annotations

import torch

from primacy.tasks.sampling import stream_generator

POLICY_STREAM = 101  # stream_generator's stream of the reward objective's samples (the tasks' streams are 0..3)
# the input noise's streams: of the training lists (by row of the training stream), of the evaluation lists (by index)
TRAIN_NOISE_STREAM, EVAL_NOISE_STREAM = 102, 103


def gumbel_noise(generators: list[torch.Generator], shape: tuple[int, int], device: torch.device) -> torch.Tensor:
    """Gumbel noise (B, *shape), row b drawn (in float64) from ``generators[b]``."""
    rows = [torch.rand(shape, generator=g, dtype=torch.float64) for g in generators]
    uniform = torch.stack(rows).clamp_min(1e-300)  # B L V
    return (-(-uniform.log()).log()).float().to(device)


def policy_uniforms(seed: int, index: torch.Tensor, n_items: int, device: torch.device) -> torch.Tensor:
    """The reward objective's random numbers (B, L) float64 in [0, 1), one per output, for the training lists of
    rows ``index`` (B,): each list's from generator (seed, POLICY_STREAM, row)."""
    rows = [torch.rand(n_items, generator=stream_generator(seed, POLICY_STREAM, int(i)), dtype=torch.float64)
            for i in index.tolist()]
    return torch.stack(rows).to(device)  # B L


def input_noise(seed: int, stream: int, index: torch.Tensor, shape: tuple[int, int], std: float,
                device: torch.device) -> torch.Tensor:
    """Gaussian noise (B, *shape) = (B, T, H) of standard deviation ``std``, float32: list b's drawn from generator
    (seed, stream, index[b]), so position t of a list gets the same noise in every pass over it. Draw the whole
    length every time: torch's randn draws a longer tensor in another order, so the first T rows of a longer draw
    are not these."""
    rows = [torch.randn(shape, generator=stream_generator(seed, stream, int(i))) for i in index.tolist()]
    return (std * torch.stack(rows)).to(device)  # B T H
