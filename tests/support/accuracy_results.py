"""Results directories of accuracy tasks (reconstruction, associative recall, verification) as a run's test writes
them, of random answers: what `primacy aggregate` and the commands that read runs are tested on, without training."""

import torch

from primacy.metrics import StudyQueryAccuracy
from primacy.rundir import results

L_ITEMS, DELAYS = 4, (0, 4, 8)

RECONSTRUCTION = {
    "task": "reconstruction", "condition": "forward", "n_items": L_ITEMS, "vocab_size": 16, "backbone": "S4DBackbone",
    "backbone_args": {"d_model": 8},
    "data_args": {"n_items": L_ITEMS, "vocab_size": 16, "delay": [0, 8], "test_delays": list(DELAYS),
                  "condition": "forward", "seed": 0},
    "model_args": {"lr": 0.001, "vocab_size": 18, "n_items": L_ITEMS, "delays": list(DELAYS)},
}
RECALL = {
    "task": "recall", "condition": "half", "n_items": L_ITEMS, "vocab_size": None, "backbone": "S4DBackbone",
    "backbone_args": {"d_model": 8},
    "data_args": {"n_items": L_ITEMS, "n_keys": 16, "n_values": 8, "p_unseen": 0.25, "condition": "half", "seed": 0},
    "model_args": {"lr": 0.001, "vocab_size": 25, "n_items": L_ITEMS, "delays": None},
}
VERIFICATION = {
    "task": "verification", "condition": "half", "n_items": L_ITEMS, "vocab_size": 16, "backbone": "S4DBackbone",
    "backbone_args": {"d_model": 8}, "data_args": {"n_items": L_ITEMS, "vocab_size": 16, "seed": 0},
    "model_args": {"lr": 0.001},
}


def study_positions(condition: str, trials: int, generator: torch.Generator) -> torch.Tensor:
    """(trials, L): forward asks study order; cued and seen a random order; half (and verification's half) every
    other query about no studied item (-1)."""
    if condition == "forward":
        return torch.arange(L_ITEMS).expand(trials, -1)
    order = torch.rand(trials, L_ITEMS, generator=generator).argsort(dim=1)
    if condition == "half":
        order = torch.where(torch.arange(L_ITEMS) % 2 == torch.randint(0, 2, (trials, 1), generator=generator), -1,
                            order)
    return order


def accuracy_run(root, name, seed, settings=RECONSTRUCTION, delays=DELAYS, trials=600):
    """A results directory as a test of the task writes it: a StudyQueryAccuracy (with ``delays``, or None) filled
    with random answers, right more often early in the list and at short delays, then ``results.write``."""
    generator = torch.Generator().manual_seed(seed)
    metric = StudyQueryAccuracy(L_ITEMS, None if delays is None else list(delays))
    study_pos = study_positions(settings["condition"], trials, generator)  # T L
    delay = None
    p = 0.9 - 0.1 * study_pos.clamp(min=0).double()  # T L
    if delays is not None:
        delay = torch.tensor(delays)[torch.randint(0, len(delays), (trials,), generator=generator)]  # T
        p = p - 0.03 * delay[:, None]
    correct = torch.rand(trials, L_ITEMS, generator=generator, dtype=torch.float64) < p
    for rows in torch.arange(trials).split(64):  # in batches, as a test step does
        metric.update(correct[rows], study_pos[rows], None if delay is None else delay[rows])
    run = root / name
    settings = {**settings, "data_args": {**settings["data_args"], "seed": seed}}
    if settings.get("task") is None:  # an old verification summary, written before there were other tasks
        settings = {k: v for k, v in settings.items() if k != "task"}
    results.write(run / "results", metric.compute(), settings)
    return run
