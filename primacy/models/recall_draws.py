"""The free-recall model's random numbers, each list's from its own generator, so that what a list draws depends
neither on batching nor on the number of processes, and a resumed run draws what an unbroken one does."""

from __future__ import annotations

import torch

from primacy.tasks.sampling import stream_generator

POLICY_STREAM = 101  # stream_generator's stream of the reward objective's samples (the tasks' streams are 0..3)


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
