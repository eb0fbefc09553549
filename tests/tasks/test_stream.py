"""The settings every held-out task has (batch_size, num_held_out, num_test_sets, num_val_sets, seed, num_workers) are
declared and checked once (``HeldOutStream``); a task taking them as ``**stream`` offers them to the CLI and saves them
as when it declared them, with its own defaults."""

import pytest

from primacy.errors import UsageError
from primacy.registry import constructor_parameters
from primacy.tasks.associative_recall import AssociativeRecallTask
from primacy.tasks.base import HeldOutStream
from primacy.tasks.free_recall import FreeRecallTask
from primacy.tasks.mqar import MQARTask
from primacy.tasks.reconstruction import ReconstructionTask
from primacy.tasks.selective_copying import SelectiveCopyingTask
from primacy.tasks.verification import VerificationTask

SETTINGS = ["batch_size", "num_held_out", "num_test_sets", "num_val_sets", "seed", "num_workers"]
DEFAULTS = {"batch_size": 64, "num_held_out": 1024, "num_test_sets": 256, "num_val_sets": 16, "seed": 0,
            "num_workers": 0}
# The tasks that take them as **stream, with the defaults they had when each declared them.
TASKS = {MQARTask: {**DEFAULTS, "num_test_sets": 64}, SelectiveCopyingTask: {**DEFAULTS, "num_test_sets": 512,
                                                                             "num_val_sets": 64},
         AssociativeRecallTask: DEFAULTS, ReconstructionTask: DEFAULTS}
SMALL = {MQARTask: {"n_items": 2, "length": 8, "n_keys": 8, "n_values": 4},
         SelectiveCopyingTask: {"n_items": 2, "length": 8, "vocab_size": 4},
         AssociativeRecallTask: {"n_items": 2, "n_keys": 8, "n_values": 4},
         ReconstructionTask: {"n_items": 2, "vocab_size": 8}}


@pytest.mark.parametrize("task", TASKS, ids=lambda cls: cls.__name__)
def test_a_task_takes_the_streams_settings_last_typed_described_with_its_defaults(task):
    """What the CLI offers, checks, prints and documents in --help."""
    params = constructor_parameters(task)
    assert [p.name for p in params][-6:] == SETTINGS
    assert {p.name: p.default for p in params[-6:]} == TASKS[task]
    assert all(p.annotation is int and p.doc for p in params[-6:])


@pytest.mark.parametrize("task", TASKS, ids=lambda cls: cls.__name__)
def test_a_task_built_in_python_saves_every_setting_in_order(task):
    """hparams (and so a checkpoint and summary.json) hold the settings it was not given, in the declared order after
    its own, whatever order it was given some in."""
    built = task(**SMALL[task], num_workers=0, seed=3, num_val_sets=2, num_test_sets=2, num_held_out=8)
    names = list(built.hparams)
    assert names[-6:] == SETTINGS and set(names[:-6]) >= set(SMALL[task])
    assert dict(built.hparams)["seed"] == 3 == built.seed and built.batch_size == TASKS[task]["batch_size"]


def test_a_task_declaring_them_keeps_its_order():
    """Verification's condition stands between num_val_sets and seed in its saved configs; free recall's distractors
    after num_workers."""
    assert list(VerificationTask().hparams)[-4:] == ["num_val_sets", "condition", "seed", "num_workers"]
    assert list(FreeRecallTask().hparams)[-4:] == ["num_workers", "delay", "gap", "distractor_vocab"]


@pytest.mark.parametrize(("setting", "value", "allowed"), [
    ("batch_size", 0, "at least 1"), ("num_test_sets", -1, "at least 1"), ("num_val_sets", 0, "at least 1"),
    ("num_workers", -1, "at least 0")])
@pytest.mark.parametrize("task", [HeldOutStream, MQARTask, VerificationTask, FreeRecallTask],
                         ids=lambda cls: cls.__name__)
def test_a_bad_setting_is_refused_in_one_line_by_every_task(task, setting, value, allowed):
    with pytest.raises(UsageError, match=rf"^{setting}={value} is invalid: it must be {allowed}$"):
        task(**{setting: value})
