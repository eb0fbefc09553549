"""The free-recall model's settings: the names each choice allows, the reward objective's defaults, and the check
that refuses, in one line, a value out of range or a setting the chosen objective would not read."""

from __future__ import annotations

from primacy.checks import one_of
from primacy.errors import UsageError

LOSSES = ("set_mass", "uniform")
TEACHER_FORCING = ("sampled", "greedy")
DECODING = ("greedy", "sampled")
OBJECTIVES = ("order_agnostic", "reward")
BASELINES = ("leave_one_out", "none")
# The reward objective's settings and their defaults: another value needs objective: reward.
REWARD_DEFAULTS = {"repeat_cost": 0.05, "intrusion_cost": 0.05, "rewarded_recalls": None, "reward_decay": 1.0,
                   "recall_limit": None, "baseline": "leave_one_out", "sampling_seed": None}


def check_objective(objective: str, teacher_forcing: str, n_items: int, reward: dict[str, object],
                    loss_decay: float = 1.0) -> None:
    """Refuses, in one line, an unknown objective, settings out of range, and settings that the chosen objective would
    ignore: reward settings off their defaults without ``objective: reward``, greedy teacher forcing or a
    ``loss_decay`` below 1 with it."""
    one_of("objective", objective, OBJECTIVES)
    if not 0 < loss_decay <= 1:
        raise UsageError(f"loss_decay={loss_decay} is invalid: it must be in (0, 1] (1: every output step's loss "
                         "counts alike)")
    if loss_decay != 1 and objective != "order_agnostic":
        raise UsageError(f"loss_decay={loss_decay} is read only by objective='order_agnostic', and "
                         f"objective={objective!r}: the reward objective's own is reward_decay")
    one_of("baseline", reward["baseline"], BASELINES)
    for name in ("repeat_cost", "intrusion_cost"):
        if not 0 <= reward[name] < float("inf"):
            raise UsageError(f"{name}={reward[name]} is invalid: it must be a finite number >= 0 (a cost, subtracted "
                             "from the reward)")
    if not 0 < reward["reward_decay"] <= 1:
        raise UsageError(f"reward_decay={reward['reward_decay']} is invalid: it must be in (0, 1] (1: every new "
                         "recall earns 1)")
    for name in ("rewarded_recalls", "recall_limit"):
        if reward[name] is not None and not 1 <= reward[name] <= n_items:
            raise UsageError(f"{name}={reward[name]} is invalid: it must be between 1 and n_items={n_items}, or null "
                             f"({'every new recall earns' if name == 'rewarded_recalls' else 'n_items outputs'})")
    if objective == "reward" and teacher_forcing != "sampled":
        raise UsageError(f"teacher_forcing={teacher_forcing!r} does nothing with objective='reward' (the model feeds "
                         "back its own samples): leave it at 'sampled'")
    changed = [f"{name}={value!r}" for name, value in reward.items() if value != REWARD_DEFAULTS[name]]
    if objective != "reward" and changed:
        raise UsageError(f"{', '.join(changed)} {'is' if len(changed) == 1 else 'are'} read only by "
                         f"objective='reward', and objective={objective!r}: set objective: reward, or leave "
                         f"{'it' if len(changed) == 1 else 'them'} out")
