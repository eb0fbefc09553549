"""Contracts of the memory-verification task: what a trial is, what is held out, how the test is designed."""

import json
import math

import pytest
import torch
from conftest import stream_batches

from primacy.errors import UsageError
from primacy.tasks import verification
from primacy.tasks.verification import (
    CyclicDesign,
    VerificationTask,
    held_out_sets,
    stream_generator,
    training_batch,
)


def labels_from_tokens(tokens: torch.Tensor, n_items: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Targets and study positions implied by the tokens alone: (B, 2L) -> (B, L), (B, L)."""
    study, queries = tokens[:, :n_items], tokens[:, n_items:]
    match = queries[:, :, None] == study[:, None, :]  # B L(query) L(study)
    old = match.any(dim=2)
    return old.float(), torch.where(old, match.float().argmax(dim=2), -1)


def check_trials(batch: dict[str, torch.Tensor], n_items: int) -> None:
    tokens = batch["tokens"]
    assert tokens.shape[1] == 2 * n_items
    study = tokens[:, :n_items]
    assert (study.sort(dim=1).values.diff(dim=1) > 0).all(), "study items must be distinct"
    queries = tokens[:, n_items:]
    assert (queries.sort(dim=1).values.diff(dim=1) > 0).all(), "queries (old and new) must be distinct"
    targets, study_pos = labels_from_tokens(tokens, n_items)
    assert torch.equal(batch["targets"], targets), "a query is old exactly when it was studied"
    assert torch.equal(batch["study_pos"], study_pos)


def test_module_docstring_example_is_a_valid_trial():
    """The example in primacy.tasks.verification's docstring, read from the docstring, is a trial of the contract."""
    keys = ("tokens", "targets", "study_pos")
    lines = {line.split("=")[0].strip(): line.split("=")[1].split("#")[0].strip()
             for line in verification.__doc__.splitlines() if line.strip().startswith(keys)}
    example = {key: torch.tensor([json.loads(value)]) for key, value in lines.items()}
    assert example["tokens"].tolist() == [[5, 1, 6, 1, 0, 5]], "the docstring's example is the one checked here"
    check_trials({**example, "targets": example["targets"].float()}, 3)


@pytest.mark.parametrize("n_items,vocab_size,p",
                         [(1, 2, 0.5), (8, 16, 0.5), (32, 512, 0.5), (16, 40, 1.0), (16, 40, 0.0)])
def test_training_trials_are_well_formed(n_items, vocab_size, p):
    batch = training_batch(256, n_items, vocab_size, p, torch.Generator().manual_seed(0))
    check_trials(batch, n_items)
    assert batch["targets"].mean().item() == pytest.approx(1 - p, abs=0.05)


def test_training_queries_are_the_study_items_shuffled():
    batch = training_batch(512, 8, 64, 0.5, torch.Generator().manual_seed(1))
    counts = torch.zeros(8, 8)  # study position x query position of old queries
    for pos, j in zip(*torch.nonzero(batch["study_pos"] >= 0, as_tuple=True)):
        counts[batch["study_pos"][pos, j], j] += 1
    assert counts.min() > 0.5 * counts.mean(), "every study position appears at every query position"


def test_held_out_sets_never_occur_in_training():
    # K = 6, L = 2: only 15 possible sets, 5 of them held out, so a leak would show at once.
    task = VerificationTask(n_items=2, vocab_size=6, num_held_out=5, num_test_sets=3, num_val_sets=2, batch_size=64)
    held = {frozenset(s.tolist()) for s in task.held_out}
    assert len(held) == 5
    stream = iter(task.train_dataloader())
    trained = set()
    for _ in range(20):
        trained |= {frozenset(s.tolist()) for s in next(stream)["tokens"][:, :2]}
    assert not held & trained
    assert len(trained) == math.comb(6, 2) - 5, "every other set is trained on"


def test_held_out_sets_are_distinct():
    study = held_out_sets(10, 2, 6, seed=3)  # 10 of the 15 possible sets
    assert len({frozenset(s.tolist()) for s in study}) == 10


@pytest.mark.parametrize("condition", ["half", "uniform"])
def test_cyclic_design_covers_every_pair_once_per_set(condition):
    n_sets, n_items = 3, 6
    study = held_out_sets(n_sets, n_items, 30, seed=0)
    design = CyclicDesign.build(study, 30, seed=0, condition=condition)
    batch = design.batch(torch.arange(len(design)))
    assert len(design) == n_sets * 2 * n_items
    check_trials(batch, n_items)
    for s in range(n_sets):
        rows = slice(s * 2 * n_items, (s + 1) * 2 * n_items)
        assert (batch["tokens"][rows, :n_items] == study[s]).all(), "one study order per set"
        pos = batch["study_pos"][rows]
        pairs = torch.zeros(n_items, n_items, dtype=torch.long)
        for r, j in zip(*torch.nonzero(pos >= 0, as_tuple=True)):
            pairs[pos[r, j], j] += 1
        assert (pairs == 1).all(), "each (study, query) pair exactly once"
        assert ((pos < 0).sum(dim=0) == n_items).all(), "each query position is a distractor L times"
        if condition == "half":
            assert ((pos[:, 0::2] < 0).all(dim=1) | (pos[:, 1::2] < 0).all(dim=1)).all()


def test_same_seed_same_data_different_seed_different_data():
    def first(seed):
        task = VerificationTask(n_items=8, vocab_size=64, num_held_out=32, num_test_sets=4, num_val_sets=2, seed=seed)
        return next(iter(task.train_dataloader()))["tokens"], next(iter(task.test_dataloader()))["tokens"]

    assert all(torch.equal(a, b) for a, b in zip(first(0), first(0)))
    assert not any(torch.equal(a, b) for a, b in zip(first(0), first(1)))


def test_data_do_not_depend_on_num_workers():
    def stream(workers):
        task = VerificationTask(n_items=4, vocab_size=32, num_held_out=8, num_test_sets=2, num_val_sets=2,
                                batch_size=8, num_workers=workers)
        train = [batch["tokens"] for batch in stream_batches(task.train_dataloader(), 5)]
        test = [b["tokens"] for b in task.test_dataloader()]
        return torch.cat(train), torch.cat(test)

    reference = stream(0)
    assert all(torch.equal(a, b) for a, b in zip(reference, stream(2)))


def test_train_validation_and_test_streams_differ():
    generator = stream_generator(0, 0)
    other = stream_generator(0, 1)
    assert not torch.equal(torch.rand(4, generator=generator), torch.rand(4, generator=other))
    task = VerificationTask(n_items=8, vocab_size=64, num_held_out=40, num_test_sets=30, num_val_sets=10)
    test_sets = {frozenset(s.tolist()) for s in next(iter(task.test_dataloader()))["tokens"][:, :8]}
    val_sets = {frozenset(s.tolist()) for b in task.val_dataloader() for s in b["tokens"][:, :8]}
    assert not test_sets & val_sets


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"n_items": 0}, "n_items=0"),
        ({"n_items": 300, "vocab_size": 512}, "vocab_size=512 is too small for n_items=300"),
        ({"p_distractor": 1.5}, "p_distractor=1.5"),
        ({"num_test_sets": 1020, "num_val_sets": 16, "num_held_out": 1024}, "num_held_out=1024 is too small"),
        ({"n_items": 2, "vocab_size": 4, "num_held_out": 6, "num_test_sets": 1, "num_val_sets": 1}, "num_held_out=6"),
        ({"condition": "all"}, "condition='all'"),
        ({"batch_size": 0}, "batch_size=0"),
    ],
)
def test_impossible_settings_are_rejected(kwargs, message):
    with pytest.raises(UsageError, match=message):
        VerificationTask(**kwargs)
