"""What every task guarantees: a seeded training stream that resumes where it stopped and splits across processes,
and evaluation sets split across processes without padding or duplicates."""

from __future__ import annotations

import inspect
import types
from abc import abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

import lightning as L
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from primacy.checks import fits_in_memory, non_negative, positive
from primacy.tasks.sampling import TEST_DESIGN, TRAIN, HeldOut, stream_generator

Batch = dict[str, torch.Tensor]


def batch_keys(fields: frozenset[str]) -> frozenset[str]:
    """The batch keys of contract fields (``Task.provides``, ``TaskModel.requires``): a field is a key, followed after
    a colon by what the key holds where that differs between tasks (``targets:old_new``, ``targets:token``)."""
    return frozenset(field.partition(":")[0] for field in fields)


def process_rank(trainer: L.Trainer | None) -> tuple[int, int]:
    """(global rank, world size) of this process; (0, 1) outside a trainer."""
    return (trainer.global_rank, trainer.world_size) if trainer is not None else (0, 1)


class TrainingStream(IterableDataset):
    """Endless training batches. Global batch i has ``batch_size * world_size`` rows, ``make_batch(i, rows)``, a pure
    function of the task's settings and i; process r keeps rows [r * batch_size, (r + 1) * batch_size).

    So N processes at a per-process batch B / N see exactly the data of one process at batch B, split without
    overlap; batch i is the same whatever the number of DataLoader workers (worker w makes batches w, w + W, ... and
    the loader interleaves them); and a run resumed at batch ``start`` goes on with batch ``start``.
    """

    def __init__(self, make_batch: Callable[[int, int], Batch], batch_size: int, start: int = 0, rank: int = 0,
                 world_size: int = 1) -> None:
        self.make_batch, self.batch_size, self.start = make_batch, batch_size, start
        self.rank, self.world_size = rank, world_size

    def __iter__(self) -> Iterator[Batch]:
        info = get_worker_info()
        index, step = (info.id, info.num_workers) if info is not None else (0, 1)
        index += self.start
        rows = slice(self.rank * self.batch_size, (self.rank + 1) * self.batch_size)
        while True:
            batch = self.make_batch(index, self.batch_size * self.world_size)
            yield {k: v[rows] for k, v in batch.items()}
            index += step


class EvalShard(IterableDataset):
    """This process's share of ``n_trials`` evaluation trials, in batches of ``batch_size``.

    Process r of W takes the contiguous trials [r * n // W, (r + 1) * n // W): every trial is evaluated exactly once
    over all processes, with no padding, so metrics that sum their states are exact on any number of processes.
    ``trials(indices (B,))`` returns the batch of those trials. An IterableDataset, so Lightning never wraps it in a
    (padding) DistributedSampler.
    """

    def __init__(self, trials: Callable[[torch.Tensor], Batch], n_trials: int, batch_size: int, rank: int = 0,
                 world_size: int = 1) -> None:
        self.trials = trials
        first, last = rank * n_trials // world_size, (rank + 1) * n_trials // world_size
        self.batches = list(torch.arange(first, last).split(batch_size))

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Iterator[Batch]:
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        for indices in self.batches[worker::workers]:
            yield self.trials(indices)


class Task(L.LightningDataModule):
    """Base class of every task. A subclass sets ``batch_size``, ``seed`` and ``num_workers``, defines
    ``stream_batch`` and builds its evaluation loaders with ``eval_loader``; it then resumes bitwise and splits its
    data across processes: tests/rundir/test_resume.py and tests/tasks/test_distributed.py check both for every task in
    ``TINY_RUNS`` (tests/conftest.py), where a new task gets a tiny run.

    ``provides`` is the task's side of the model-task contract: the fields of its batches, the same in training,
    validation and test (``batch_keys`` gives the keys). A model whose ``requires`` it does not cover is refused when
    the config is parsed (``primacy.contract.check_pairing``); a task that leaves it unset is not checked."""

    name: str  # a short name, recorded with the results
    provides: ClassVar[frozenset[str]]  # the fields of every batch, training and evaluation (see batch_keys)
    batch_size: int
    seed: int
    num_workers: int = 0

    @classmethod
    def model_vocabulary(cls, settings: dict[str, Any]) -> int:
        """The number of different tokens in the sequences of a task built with ``settings`` (its init args), which the
        model embeds: the CLI links it to the model's ``vocab_size``. By default the task's ``vocab_size``."""
        return settings["vocab_size"]

    @classmethod
    def eval_delays(cls, settings: dict[str, Any]) -> list[int] | None:
        """The delays between study and queries that evaluation trials of a task built with ``settings`` use, linked
        to the model's ``delays`` (RecallModel counts accuracy by delay); None for a task without delays."""
        return None

    @classmethod
    def sequence_length(cls, settings: dict[str, Any]) -> int | None:
        """The longest input sequence (training or evaluation) of a task built with ``settings``, linked to the
        ``context_length`` of backbones that take one; None when a task does not say."""
        return None

    def check_sequences(self, batch_size: int, **settings: Any) -> None:
        """Refuses, before anything is drawn, ``settings`` (the init args that ``sequence_length`` reads) whose
        longest sequence, in a batch of ``batch_size``, would not fit in this machine's memory as token ids alone
        (int64): the least any training or evaluation batch holds, before the model's activations."""
        length = self.sequence_length(settings)
        if length is None:
            return
        named = {name: value for name, value in settings.items() if value is not None}
        fits_in_memory(f"a batch of {length}-token sequences (their token ids alone)", 8 * batch_size * length,
                       **named, batch_size=batch_size)

    @classmethod
    def at_list_length(cls, settings: dict[str, Any], n_items: int) -> dict[str, Any]:
        """The init args that change when a model trained on a task built with ``settings`` is tested at ``n_items``
        items (``primacy atlas --extrapolate`` tests at 2L): ``n_items`` alone by default, as a trial's other parts
        follow from it."""
        return {"n_items": n_items}

    @abstractmethod
    def stream_batch(self, index: int, size: int) -> Batch:
        """Global training batch ``index`` with ``size`` rows: a pure function of the task's settings and ``index``."""

    def train_dataloader(self) -> DataLoader:
        trainer = self.trainer
        start = trainer.global_step * trainer.accumulate_grad_batches if trainer is not None else 0  # on resume
        stream = TrainingStream(self.stream_batch, self.batch_size, start, *process_rank(trainer))
        return DataLoader(stream, batch_size=None, num_workers=self.num_workers,
                          persistent_workers=self.num_workers > 0, generator=_loader_generator())

    def eval_loader(self, trials: Callable[[torch.Tensor], Batch], n_trials: int) -> DataLoader:
        """This process's share of ``n_trials`` trials (``EvalShard``), in batches of ``batch_size``."""
        shard = EvalShard(trials, n_trials, self.batch_size, *process_rank(self.trainer))
        return DataLoader(shard, batch_size=None, num_workers=min(self.num_workers, len(shard)),
                          generator=_loader_generator())


@dataclass(frozen=True)
class HeldOutStream:
    """The settings of a held-out task's data that every such task has: its batches, held-out sets, seed and loader.

    A task takes them as its own arguments without declaring them: its constructor ends with ``**stream`` and passes
    them to this class (or to a subclass that changes a default, as MQAR's does), and jsonargparse, following that
    call, gives the task these parameters with their types, defaults and the descriptions below, so the CLI shows,
    checks and saves them as before. Settings no task can use are refused when it is built, in one line naming the
    setting. A task whose saved configs hold one of its own settings among these (verification's ``condition``, free
    recall's distractors after them) declares them in that order and builds this class from them.

    Args:
        batch_size: trials per batch and process (N processes at B / N train on the data of one at B).
        num_held_out: sets kept out of training; test and validation sets come from them.
        num_test_sets: held-out sets the test uses.
        num_val_sets: held-out sets validation uses, disjoint from the test sets.
        seed: the data's seed; training, held-out and design streams are derived from it.
        num_workers: DataLoader workers; the data do not depend on it.
    """

    batch_size: int = 64
    num_held_out: int = 1024
    num_test_sets: int = 256
    num_val_sets: int = 16
    seed: int = 0
    num_workers: int = 0

    def __post_init__(self) -> None:
        positive(batch_size=self.batch_size, num_test_sets=self.num_test_sets, num_val_sets=self.num_val_sets)
        non_negative(num_workers=self.num_workers)


class HeldOutTask(Task):
    """A task tested on held-out study sets through a design: test takes the first ``num_test_sets`` held-out sets
    with design stream 0, validation the last ``num_val_sets`` with stream 1, each set with one random query order. A
    subclass's constructor, after its own checks, hands its held-out sets and its ``HeldOutStream`` to ``hold_out``;
    it draws training sets with ``training_rows`` and defines ``design`` (or ``draw_design``)."""

    n_items: int
    num_held_out: int
    num_test_sets: int
    num_val_sets: int
    stream: HeldOutStream
    _held_out: HeldOut

    def hold_out(self, held_out: HeldOut, stream: HeldOutStream, drawing: str | None = "item") -> None:
        """Checks, then keeps, the held-out sets and the settings every held-out task has (``stream``, from which
        ``held_out`` was drawn: its ``num_held_out`` sets from its ``seed``).

        Refuses (UsageError) sets that would not fit in memory while drawn, as the largest draw holds one random key
        per token and row (``drawing`` names what a set is made of in the error; None: the task checks its memory
        itself), then sets that leave training none or cannot hold the test and validation sets
        (``HeldOut.check``). Then keeps ``stream`` and sets ``batch_size``, ``num_test_sets``, ``num_val_sets``,
        ``num_workers`` and, from ``held_out``, ``n_items``, ``num_held_out`` (its ``n_sets``) and ``seed``.
        """
        batch_size = stream.batch_size
        if drawing is not None:
            tokens, rows = held_out.vocab_size, max(batch_size, held_out.n_sets)
            fits_in_memory(f"drawing {drawing} sets", 4 * tokens * rows, **{held_out.setting: tokens},
                           batch_size=batch_size, num_held_out=held_out.n_sets)
        held_out.check(stream.num_test_sets, stream.num_val_sets)
        self._held_out, self.stream = held_out, stream
        self.n_items, self.num_held_out, self.seed = held_out.n_items, held_out.n_sets, held_out.seed
        self.batch_size, self.num_test_sets, self.num_val_sets = batch_size, stream.num_test_sets, stream.num_val_sets
        self.num_workers = stream.num_workers

    def save_hyperparameters(self, *args: Any, ignore: Sequence[str] | str | None = None,
                             frame: types.FrameType | None = None, logger: bool = True) -> None:
        """Lightning's, with the settings a constructor takes as ``**stream`` in ``HeldOutStream``'s order where the
        first of them stands (after the task's own arguments, before the CLI's ``_instantiator``), as when each task
        declared them: those it was not given (a task built in Python with their defaults; the CLI gives them all, in
        order) are added, so hparams, a checkpoint and summary.json hold them however the task was built. A task that
        declares them in its signature (verification, free recall) keeps Lightning's record, in its own order, as does
        one that saves them before ``hold_out`` has its stream."""
        super().save_hyperparameters(*args, ignore=ignore, frame=frame or inspect.currentframe().f_back, logger=logger)
        settings = asdict(self.stream) if hasattr(self, "stream") else {}
        if args or not settings or settings.keys() & inspect.signature(type(self).__init__).parameters.keys():
            return  # the caller chose which to save, or the constructor declares the settings
        ignored = {ignore} if isinstance(ignore, str) else set(ignore or ())
        items = list(self.hparams.items())  # the task's own, then those it was given, then the CLI's _instantiator
        at = next((i for i, (name, _) in enumerate(items) if name in settings), len(items))
        rest = [(name, value) for name, value in items if name not in settings]
        self.hparams.clear()
        self.hparams.update([*rest[:at], *((name, value) for name, value in settings.items() if name not in ignored),
                             *rest[at:]])

    def training_rows(self, index: int, size: int) -> tuple[torch.Tensor, torch.Generator]:
        """The ``size`` rows (size, M) of global training batch ``index``, drawn as the held-out sets are but from
        generator (seed, train, index), a row that drew a held-out set drawn again; and that generator, from which the
        rest of the batch is drawn."""
        generator = stream_generator(self.seed, TRAIN, index)
        return self._held_out.avoided(self._held_out.draw(size, generator), generator), generator

    @property
    def held_out(self) -> torch.Tensor:
        """The held-out rows (num_held_out, M), whose first L columns are the sets: test uses the first ones,
        validation the last ones."""
        return self._held_out.rows

    @abstractmethod
    def design(self, rows: torch.Tensor, orders: torch.Tensor) -> Any:
        """The evaluation trials (with ``batch(indices)`` and ``len``) over held-out ``rows`` (S, M), set s asking its
        study positions in the order ``orders[s]`` (S, L)."""

    def draw_design(self, rows: torch.Tensor, generator: torch.Generator) -> Any:
        """The evaluation trials over held-out ``rows`` (S, M), drawn from ``generator`` (a design stream): one random
        order of the study positions per set, then ``design``. A task whose design draws more from the stream after
        the orders (verification's distractors) overrides this instead of ``design``."""
        orders = torch.rand(rows.shape[0], self.n_items, generator=generator).argsort(dim=1)  # S L
        return self.design(rows, orders)

    def _design(self, rows: torch.Tensor, stream: int) -> Any:
        return self.draw_design(rows, stream_generator(self.seed, TEST_DESIGN, stream))

    def test_design(self) -> Any:
        """The test trials, over the first ``num_test_sets`` held-out sets."""
        return self._design(self.held_out[: self.num_test_sets], 0)

    def val_dataloader(self) -> DataLoader:
        design = self._design(self.held_out[self.num_held_out - self.num_val_sets :], 1)
        return self.eval_loader(design.batch, len(design))

    def test_dataloader(self) -> DataLoader:
        design = self.test_design()
        return self.eval_loader(design.batch, len(design))


def _loader_generator() -> torch.Generator:
    """A DataLoader draws its workers' base seed from this generator each time it is iterated; by default it draws
    from the global one, so a resumed run (which iterates its loaders anew) would see other dropout masks. Our data
    never depend on that seed."""
    return torch.Generator().manual_seed(0)


class LengthSetting:
    """For a task whose sequences have a ``length`` setting of their own (MQAR, selective copying): that length is its
    longest sequence, and it grows with the items when the task is tested at another list length (``in_proportion``).
    Listed before the task's base class, whose defaults it overrides: ``class MQARTask(LengthSetting, HeldOutTask)``."""

    @classmethod
    def sequence_length(cls, settings: dict[str, Any]) -> int:
        return settings["length"]

    @classmethod
    def at_list_length(cls, settings: dict[str, Any], n_items: int) -> dict[str, Any]:
        return in_proportion(settings, n_items)


def in_proportion(settings: dict[str, Any], n_items: int) -> dict[str, Any]:
    """``Task.at_list_length`` of a task whose trials have a ``length`` of their own (MQAR, selective copying): the
    length grows with the items (rounded up), so a longer list is as dense as the trained one, not squeezed in."""
    return {"n_items": n_items, "length": -(-settings["length"] * n_items // settings["n_items"])}
