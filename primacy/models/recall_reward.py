"""The reward objective of free recall: the rewards of a recall sequence, their returns, a leave-one-out baseline and
the REINFORCE loss (policy gradient on the model's own sampled recalls). Pure functions of tensors; FreeRecallModel
samples the sequences and calls them.

An episode is the model's outputs a_0, a_1, ... after the recall cue, each fed back, until it outputs stop or has made
``limit`` outputs (stop included). Each output earns, by what it is:

* a studied item not output before in the episode (a new recall): the k-th new recall (k = 0, 1, ...) earns
  ``decay ** k`` if k < ``rewarded`` (None: every one), else 0;
* a studied item output before (a repeat): ``-repeat_cost``;
* anything else but stop (an intrusion: an item not on the list, a distractor, the cue): ``-intrusion_cost``;
* stop: 0, and the episode ends.

Example (study [5, 1, 6], stop 9, repeat_cost 0.5, intrusion_cost 0.25, rewarded 2, decay 1)::

    actions = [1, 1, 7, 5, 6, 9]    rewards = [1, -0.5, -0.25, 1, 0, 0]    taken = all six

The third new recall (6) earns nothing: only the first two are rewarded.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class RewardSettings:
    """What an episode's outputs earn (module docstring). ``rewarded`` None: every new recall; ``limit`` the most
    outputs in an episode, stop included."""

    limit: int
    repeat_cost: float = 0.05
    intrusion_cost: float = 0.05
    rewarded: int | None = None
    decay: float = 1.0


@dataclass(frozen=True)
class Episode:
    """The scored outputs of a batch of episodes, each (B, A) for A outputs: ``rewards`` (float64, 0 where not
    taken), ``taken`` (the output is part of its episode: at most ``limit`` of them, none after stop) and ``new``
    (a new recall)."""

    rewards: torch.Tensor
    taken: torch.Tensor
    new: torch.Tensor


def score_recalls(study: torch.Tensor, actions: torch.Tensor, stop: int, settings: RewardSettings) -> Episode:
    """The rewards of each episode's outputs: study (B, L) the lists, actions (B, A) the outputs in order, ``stop``
    the stop token."""
    steps = actions.shape[1]
    is_stop = actions == stop  # B A
    before_stop = is_stop.long().cumsum(1) - is_stop.long() == 0  # B A: no stop before this output
    taken = before_stop & (torch.arange(steps, device=actions.device) < settings.limit)  # B A
    studied = (actions[:, :, None] == study[:, None, :]).any(-1)  # B A
    earlier = torch.ones(steps, steps, dtype=torch.bool, device=actions.device).tril(-1)  # A A: s < r
    seen = ((actions[:, :, None] == actions[:, None, :]) & earlier).any(-1)  # B A: output before in the episode
    new, repeat = taken & studied & ~seen, taken & studied & seen  # B A each
    intrusion = taken & ~studied & ~is_stop  # B A
    rank = new.long().cumsum(1) - 1  # B A: k of the k-th new recall, where new
    gain = torch.full(rank.shape, settings.decay, dtype=torch.float64, device=actions.device).pow(rank.clamp_min(0))
    if settings.rewarded is not None:
        gain = gain * (rank < settings.rewarded)
    rewards = gain * new - settings.repeat_cost * repeat.double() - settings.intrusion_cost * intrusion.double()
    return Episode(rewards, taken, new)


def returns_to_go(rewards: torch.Tensor) -> torch.Tensor:
    """G_r = sum of rewards from output r to the episode's end (undiscounted): (B, A) -> (B, A)."""
    return rewards.flip(1).cumsum(1).flip(1)


def step_totals(returns: torch.Tensor, taken: torch.Tensor) -> torch.Tensor:
    """(2, A) float64: per output step the sum of the returns of the episodes that take it, and their number. Summed
    over processes, they give the baseline of the whole batch (``leave_one_out``)."""
    return torch.stack([(returns * taken).sum(0), taken.sum(0).double()])


def leave_one_out(returns: torch.Tensor, taken: torch.Tensor, totals: torch.Tensor | None = None) -> torch.Tensor:
    """The baseline of each episode at each step (B, A): the mean return from that step of the other episodes that
    take it (0 when none does). It does not depend on the episode's own outputs, so the gradient stays unbiased.
    ``totals`` (2, A): ``step_totals`` of the whole batch, these episodes included (by default of these alone)."""
    totals = step_totals(returns, taken) if totals is None else totals
    others = totals[0] - returns * taken  # B A
    count = totals[1] - taken.double()  # B A
    return torch.where(count > 0, others / count.clamp_min(1), torch.zeros_like(others))


def reinforce_loss(log_probs: torch.Tensor, returns: torch.Tensor, baseline: torch.Tensor,
                   taken: torch.Tensor) -> torch.Tensor:
    """-(1 / B) sum_b sum_r taken (G - b) log pi(a_r): minimising it follows the policy gradient. log_probs (B, A),
    the log-probability of each output (with gradient); returns, baseline (B, A) constants."""
    advantage = ((returns - baseline) * taken).to(log_probs.dtype)  # B A
    return -(advantage * log_probs).sum(1).mean()
