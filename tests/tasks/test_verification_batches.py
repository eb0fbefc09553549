"""VerificationTask's data are pinned: the quickstart's numbers depend on every bit of its training, validation and
test batches, so a change to how the task is built (issue 39 built it on HeldOutTask) must not move one."""

import hashlib

import pytest
import torch

from primacy.tasks.sampling import TRAIN, set_hash, stream_generator, token_hashes
from primacy.tasks.verification import CyclicDesign, VerificationTask, held_out_sets, training_batch

QUICKSTART = {"n_items": 32, "vocab_size": 512, "batch_size": 64, "num_held_out": 1024, "num_test_sets": 256,
              "num_val_sets": 16, "seed": 0}  # configs/quickstart.yaml's data

# SHA-256 (first 16 hex digits) of the batches, computed with the code of commit b758e20, before VerificationTask was
# built on HeldOutTask: the held-out sets, training batches 0-2, every validation and every test batch.
PINNED = {
    "half": {"held_out": "988f1a98ce74a2c9", "train": "14e04454816ff08b", "val": "157a21477eb1c8aa",
             "test": "63f6d1b28074b9a5"},
    "uniform": {"held_out": "988f1a98ce74a2c9", "train": "14e04454816ff08b", "val": "bbf65b16a8a9422f",
                "test": "18272e480ccb4ba4"},
}


def digest(batches: list[dict[str, torch.Tensor]]) -> str:
    """A hash of the keys, dtypes, shapes and bytes of ``batches``, in order."""
    h = hashlib.sha256()
    for batch in batches:
        for key in sorted(batch):
            value = batch[key].contiguous()
            h.update(f"{key}{value.dtype}{tuple(value.shape)}".encode())
            h.update(value.numpy().tobytes())
    return h.hexdigest()[:16]


@pytest.mark.parametrize("condition", ["half", "uniform"])
def test_the_quickstart_batches_are_bitwise_those_of_before_heldouttask(condition):
    task = VerificationTask(**QUICKSTART, condition=condition)
    found = {
        "held_out": digest([{"held_out": task.held_out}]),
        "train": digest([task.stream_batch(i, task.batch_size) for i in range(3)]),
        "val": digest(list(task.val_dataloader())),
        "test": digest(list(task.test_dataloader())),
    }
    assert found == PINNED[condition]


@pytest.mark.parametrize("condition", ["half", "uniform"])
def test_the_task_serves_the_pure_generators_batches(condition):
    """The DataModule is a thin wrapper: held-out sets, training batches that avoid them, and the test and validation
    designs (streams 0 and 1) are those of the module's pure functions."""
    task = VerificationTask(n_items=4, vocab_size=12, batch_size=8, num_held_out=20, num_test_sets=3, num_val_sets=2,
                            seed=5, condition=condition)
    held = held_out_sets(20, 4, 12, seed=5)
    assert torch.equal(task.held_out, held)

    token_hash = token_hashes(12, 5)
    excluded = set_hash(held, token_hash).sort().values
    for index in (0, 3):
        expected = training_batch(8, 4, 12, 0.5, stream_generator(5, TRAIN, index), excluded, token_hash)
        got = task.stream_batch(index, 8)
        assert all(torch.equal(got[k], expected[k]) for k in expected) and got.keys() == expected.keys()

    for design, loader in ((CyclicDesign.build(held[:3], 12, 5, condition, 0), task.test_dataloader()),
                           (CyclicDesign.build(held[18:], 12, 5, condition, 1), task.val_dataloader())):
        expected = design.batch(torch.arange(len(design)))
        got = list(loader)
        assert all(torch.equal(torch.cat([b[k] for b in got]), expected[k]) for k in expected)
