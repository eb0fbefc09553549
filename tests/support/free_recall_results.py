"""Free-recall results directories as a run's test writes them, without training: random lists with intrusions and
repetitions (``random_free_recall_run``, lists of ``L_ITEMS``), or recalls with primacy, early items more often
(``free_recall_run``, of any list length)."""

import torch

from primacy.analysis.behaviour.free_recall import free_recall_counts, recall_positions
from primacy.rundir import results

L_ITEMS, VOCAB = 6, 16

SETTINGS = {
    "task": "free_recall", "condition": None, "n_items": L_ITEMS, "vocab_size": VOCAB, "backbone": "S4DBackbone",
    "backbone_args": {"d_model": 8},
    "data_args": {"n_items": L_ITEMS, "vocab_size": VOCAB, "num_test_sets": 60, "seed": 0},
    "model_args": {"vocab_size": VOCAB + 2, "n_items": L_ITEMS, "loss": "set_mass", "lr": 0.003},
}


def random_recall(n_lists: int, generator: torch.Generator, p_studied: float = 0.8) -> tuple[torch.Tensor, ...]:
    """study (B, L) of distinct items and recalls (B, L): a studied item (repetitions likely) with probability
    ``p_studied``, else any id (intrusions), stopping after 0..L outputs (-1 after)."""
    study = torch.rand(n_lists, VOCAB, generator=generator).argsort(dim=1)[:, :L_ITEMS]  # B L
    studied = study.gather(1, torch.randint(L_ITEMS, (n_lists, L_ITEMS), generator=generator))  # B L
    other = torch.randint(VOCAB, (n_lists, L_ITEMS), generator=generator)  # B L
    recalls = torch.where(torch.rand(n_lists, L_ITEMS, generator=generator) < p_studied, studied, other)
    length = torch.randint(L_ITEMS + 1, (n_lists, 1), generator=generator)  # B 1
    return study, recalls.masked_fill(torch.arange(L_ITEMS) >= length, -1)


def random_free_recall_run(root, name, seed, n_lists=60, recalls=None):
    """A results directory as a free-recall test writes it: ``results.write_free_recall`` of random lists (or of
    ``recalls``, a function of the study lists), with subject ``name``, as a run directory of that name has."""
    study, random = random_recall(n_lists, torch.Generator().manual_seed(seed))
    recalls = random if recalls is None else recalls(study)
    counts = free_recall_counts(recall_positions(study, recalls), L_ITEMS)
    settings = {**SETTINGS, "data_args": {**SETTINGS["data_args"], "seed": seed}}
    run = root / name
    results.write_free_recall(run / "results", counts, study, recalls, settings, subject=name, loss=1.5)
    return run


def free_recall_run(root, name: str, n_items: int, seed: int, task: str = "free_recall"):
    """A free-recall results directory as a test writes it, of random recalls (primacy: early items more often)."""
    generator = torch.Generator().manual_seed(seed)
    study = torch.rand(40, 200, generator=generator).argsort(dim=1)[:, :n_items]  # B L
    keep = torch.rand(40, n_items, generator=generator) < torch.linspace(0.9, 0.3, n_items)  # B L
    order = torch.rand(40, n_items, generator=generator).argsort(dim=1)  # B L: output order
    recalls = torch.where(keep, study, -1).gather(1, order)
    recalls = recalls.gather(1, (recalls == -1).to(torch.int8).argsort(dim=1, stable=True))  # outputs first, then -1
    counts = free_recall_counts(recall_positions(study, recalls), n_items)
    settings = {"task": task, "n_items": n_items, "vocab_size": 200, "backbone": "S4DBackbone", "condition": None}
    results.write_free_recall(root / name / "results", counts, study, recalls, settings, subject=name)
    return root / name
