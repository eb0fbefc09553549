"""check_task(): the guarantees every task, built-in or plugin, must keep. Call it from your tests."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from primacy import registry
from primacy.tasks.base import Batch, Task
from primacy.testing.signature import check_signature

WORLDS = (2, 3)  # simulated process counts: an even and an uneven split


@dataclass
class SimulatedProcess:
    """What a task reads of its trainer: this process's rank among ``world_size`` and the step a run resumes at."""

    global_rank: int = 0
    world_size: int = 1
    global_step: int = 0
    accumulate_grad_batches: int = 1


def check_task(cls: type, *, study_items: Callable[[Batch], torch.Tensor] | None = None, batches: int = 5,
               **settings: object) -> None:
    """Assert the Task contract for ``cls(**settings)`` (give small settings); raises AssertionError on a breach.

    Checks: subclass of ``primacy.tasks.base.Task`` with a ``name``; typed constructor without ``*args``/``**kwargs``,
    each argument with a default; training batch i is a pure function of (settings, i): two builds give the same
    batches whatever is asked first and whatever the global random state, and batches differ from one another; every
    batch is a dict of tensors with one row per trial and holds the keys the class declares in ``provides``; the
    training stream of N simulated processes at per-process batch B is that of one process at batch N·B, split
    without overlap; a stream resumed at step k (with gradient accumulation too) goes on with the batch an
    uninterrupted one gives there; the validation and test sets of N processes are the single process's trials,
    each once, without padding.

    A task with held-out sets (``held_out``, as ``HeldOutTask``): they are distinct, test holds the first
    ``num_test_sets`` and validation the last ``num_val_sets``, and no training batch holds one. ``study_items(batch)``
    gives each trial's set (B, n_items), the tokens' first n_items by default; choose settings whose held-out sets are
    a sizeable share of all sets, so that a leak would show.
    """
    name = cls.__name__
    assert isinstance(cls, type) and issubclass(cls, Task), f"{name} must subclass primacy.tasks.base.Task"
    assert isinstance(getattr(cls, "name", None), str), f"{name}.name must be a short name, recorded with results"
    check_signature(cls)
    task, again = cls(**settings), cls(**settings)
    size = task.batch_size

    # a pure stream
    first = [task.stream_batch(i, 2 * size) for i in range(batches)]
    torch.manual_seed(1234)
    backwards = {i: again.stream_batch(i, 2 * size) for i in reversed(range(batches))}
    for i, batch in enumerate(first):
        _check_rows(name, batch, 2 * size, f"training batch {i}")
        assert _equal(batch, backwards[i]), f"{name}: training batch {i} is not a pure function of (settings, {i})"
        assert _equal(batch, task.stream_batch(i, 2 * size)), f"{name}: training batch {i} changes when asked again"
    assert not _equal(first[0], first[1]), f"{name}: training batches 0 and 1 are the same: the stream must vary"

    # one process's stream, and N processes' split of it
    single = _train(task, batches)
    for i, batch in enumerate(single):
        assert _equal(batch, task.stream_batch(i, size)), f"{name}: train_dataloader's batch {i} is not stream_batch's"
    takes_size = "batch_size" in {p.name for p in registry.constructor_parameters(cls)}
    for world in WORLDS:
        ranks = [_train(task, batches, SimulatedProcess(rank, world)) for rank in range(world)]
        whole = _train(cls(**{**settings, "batch_size": world * size}), batches) if takes_size else \
            [task.stream_batch(i, world * size) for i in range(batches)]
        for i in range(batches):
            assert _equal(_cat([rank[i] for rank in ranks]), whole[i]), \
                f"{name}: batch {i} of {world} processes at batch_size {size} is not one process's at {world * size}"

    # resuming
    for step, accumulate in ((2, 1), (1, 2), (batches - 1, 1)):
        resumed = _train(task, 1, SimulatedProcess(global_step=step, accumulate_grad_batches=accumulate))[0]
        assert _equal(resumed, single[step * accumulate]), \
            f"{name}: a run resumed at step {step} (accumulating {accumulate}) does not go on with batch " \
            f"{step * accumulate}"

    # evaluation split across processes
    evaluation = {}
    for stage in ("val", "test"):
        trials = _cat(_eval(task, stage))
        _check_rows(name, trials, _rows(trials), f"the {stage} trials")
        evaluation[stage] = trials
        for world in WORLDS:
            shards = [_eval(task, stage, SimulatedProcess(rank, world)) for rank in range(world)]
            split = _cat([batch for shard in shards for batch in shard])
            assert _equal(split, trials), \
                f"{name}: the {stage} trials of {world} processes are not the single process's, each once"

    declared = getattr(cls, "provides", None)
    if declared is not None:
        assert isinstance(declared, frozenset) and all(isinstance(field, str) for field in declared), \
            f"{name}.provides must be a frozenset of batch fields"
        keys = {field.partition(":")[0] for field in declared}  # a field is a key, then maybe ":what it holds"
        for what, batch in (("training", first[0]), ("val", evaluation["val"]), ("test", evaluation["test"])):
            assert keys <= batch.keys(), f"{name}: its {what} batches lack {sorted(keys - batch.keys())}, " \
                                         "which it declares in provides"

    if hasattr(task, "held_out"):
        _check_held_out(task, first, evaluation, study_items)


def _check_held_out(task: Task, training: list[Batch], evaluation: dict[str, Batch],
                    study_items: Callable[[Batch], torch.Tensor] | None) -> None:
    name, n = type(task).__name__, task.n_items
    items = study_items or (lambda batch: batch["tokens"][:, :n])

    def sets(study: torch.Tensor) -> list[tuple[int, ...]]:
        assert study.ndim == 2 and study.shape[1] == n, f"{name}: study_items must give (B, n_items={n}) sets"
        return [tuple(sorted(row)) for row in study.tolist()]

    held = sets(task.held_out[:, :n])
    assert len(set(held)) == len(held) == task.num_held_out, f"{name}: its {task.num_held_out} held-out sets are " \
                                                              "not distinct"
    expected = {"test": set(held[: task.num_test_sets]), "val": set(held[len(held) - task.num_val_sets :])}
    for stage, batch in evaluation.items():
        assert set(sets(items(batch))) == expected[stage], \
            f"{name}: the {stage} trials are not those of its held-out {stage} sets (or study_items misreads them)"
    for i, batch in enumerate(training):
        leaked = set(sets(items(batch))) & set(held)
        assert not leaked, f"{name}: training batch {i} holds the held-out set {sorted(leaked)[0]}: training must " \
                           "never see one"


def _with(task: Task, process: SimulatedProcess | None):
    task.trainer = process  # what a Trainer sets; None outside one
    return task


def _train(task: Task, n: int, process: SimulatedProcess | None = None) -> list[Batch]:
    """The first ``n`` batches of the task's training loader in ``process``."""
    loader = _with(task, process).train_dataloader()
    task.trainer = None
    it = iter(loader)
    try:
        return [next(it) for _ in range(n)]
    finally:
        shutdown = getattr(it, "_shutdown_workers", None)  # the loader's worker processes, if any
        if shutdown is not None:
            shutdown()


def _eval(task: Task, stage: str, process: SimulatedProcess | None = None) -> list[Batch]:
    loader = getattr(_with(task, process), f"{stage}_dataloader")()
    task.trainer = None
    return list(loader)


def _rows(batch: Batch) -> int:
    return next(iter(batch.values())).shape[0]


def _check_rows(name: str, batch: Batch, rows: int, what: str) -> None:
    assert isinstance(batch, dict) and batch, f"{name}: {what} must be a non-empty dict of tensors"
    for key, value in batch.items():
        assert isinstance(value, torch.Tensor) and value.ndim >= 1 and value.shape[0] == rows, \
            f"{name}: {what}[{key!r}] must be a tensor of {rows} rows, one per trial"


def _cat(batches: list[Batch]) -> Batch:
    batches = [batch for batch in batches if _rows(batch)]
    return {key: torch.cat([batch[key] for batch in batches]) for key in batches[0]} if batches else {}


def _equal(a: Batch, b: Batch) -> bool:
    return a.keys() == b.keys() and all(a[key].dtype == b[key].dtype and torch.equal(a[key], b[key]) for key in a)
