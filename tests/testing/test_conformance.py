"""Every registered task and model keeps the guarantees of primacy's conformance kit (primacy.testing), and the kit
catches a breach of each: a task whose batches depend on the global random state, that leaks a held-out set, that
splits its stream or its evaluation wrongly across processes, or resumes elsewhere; a model whose parameter gets no
gradient. The tiny-run helper runs ``primacy fit`` quietly and leaves a tested run."""

import pytest
import torch
from torch.utils.data import DataLoader

from primacy import registry
from primacy.tasks.associative_recall import AssociativeRecallTask
from primacy.tasks.base import TrainingStream
from primacy.tasks.free_recall import FreeRecallTask
from primacy.testing import check_model, check_task, tiny_args, tiny_fit, tiny_settings

# which registered task each registered model is built for (its quickstart's)
TASKS_OF = {"SequenceModel": ["VerificationTask"],
            "RecallModel": ["ReconstructionTask", "AssociativeRecallTask", "MQARTask", "SelectiveCopyingTask"],
            "FreeRecallModel": ["FreeRecallTask"], "LanguageModel": ["InductionTask"]}
PAIRS = [(model, task) for model, tasks in TASKS_OF.items() for task in tasks]
# Held-out sets most of all sets (10 of C(5, 2) = 10 sets, 5 held out), so a leak shows at once.
CROWDED = {
    "VerificationTask": {"n_items": 2, "vocab_size": 5, "num_held_out": 5, "num_test_sets": 3, "num_val_sets": 2},
    "ReconstructionTask": {"n_items": 2, "vocab_size": 5, "delay": [0, 1], "num_held_out": 5, "num_test_sets": 3,
                           "num_val_sets": 2},
    "AssociativeRecallTask": {"n_items": 2, "n_keys": 5, "n_values": 3, "p_unseen": 0.25, "num_held_out": 5,
                              "num_test_sets": 3, "num_val_sets": 2},
    "FreeRecallTask": {"n_items": 2, "vocab_size": 5, "num_held_out": 5, "num_test_sets": 3, "num_val_sets": 2},
    "MQARTask": {"n_items": 2, "length": 12, "n_keys": 5, "n_values": 3, "num_held_out": 5, "num_test_sets": 3,
                 "num_val_sets": 2},
    "SelectiveCopyingTask": {"n_items": 2, "length": 8, "vocab_size": 3, "num_held_out": 4, "num_test_sets": 2,
                             "num_val_sets": 2},
}


def study_items(task: str, n_items: int):
    """Where a task's trials hold their study set: associative recall's and MQAR's keys alternate with values;
    selective copying's list is what its markers ask for."""
    pairs = task in ("AssociativeRecallTask", "MQARTask")
    if task == "SelectiveCopyingTask":  # the data tokens, scattered among noise: the targets, in order
        return lambda batch: batch["targets"]
    return (lambda batch: batch["tokens"][:, 0 : 2 * n_items : 2]) if pairs else None


def test_every_registered_model_and_task_is_checked():
    assert set(TASKS_OF) == set(registry.names("model"))
    assert {task for tasks in TASKS_OF.values() for task in tasks} == set(registry.names("task"))
    assert set(CROWDED) | {"InductionTask"} == set(registry.names("task")), "every task with held-out sets"


@pytest.mark.parametrize("name", registry.names("task"))
def test_task_contract(name):
    settings = tiny_settings(name)
    check_task(registry.get(name, "task"), study_items=study_items(name, settings.get("n_items")), **settings)


@pytest.mark.parametrize("name", sorted(CROWDED))
def test_training_never_holds_a_held_out_set_when_they_are_most_sets(name):
    settings = {**tiny_settings(name), **CROWDED[name]}
    check_task(registry.get(name, "task"), study_items=study_items(name, 2), batches=10, **settings)


@pytest.mark.parametrize("model,task", PAIRS)
def test_model_contract(model, task):
    check_model(registry.get(model, "model"), registry.get(task, "task")(**tiny_settings(task)))


@pytest.mark.parametrize("model,task", PAIRS)
def test_each_model_needs_what_its_task_provides(model, task):
    """Once tasks declare what their batches hold and models what they need (issue 39), each pair fits."""
    provides = getattr(registry.get(task, "task"), "provides", None)
    requires = getattr(registry.get(model, "model"), "requires", None)
    if provides is None or requires is None:
        pytest.skip("tasks do not declare provides, or models requires, yet")
    assert requires <= provides


# Tasks that break one guarantee each; check_task must refuse every one.
class ImpureTask(FreeRecallTask):
    """Batches drawn from the global random state."""

    def stream_batch(self, index: int, size: int):
        batch = super().stream_batch(index, size)
        return {**batch, "noise": torch.rand(size)}


class LeakyTask(FreeRecallTask):
    """The first row of every batch is a held-out set."""

    def stream_batch(self, index: int, size: int):
        batch = super().stream_batch(index, size)
        batch["tokens"][0, : self.n_items] = self.held_out[0, : self.n_items]
        return batch


class RankBlindTask(FreeRecallTask):
    """Every process trains on the first rows."""

    def train_dataloader(self) -> DataLoader:
        return DataLoader(TrainingStream(self.stream_batch, self.batch_size), batch_size=None)


class ForgetfulTask(FreeRecallTask):
    """A resumed run starts the stream again."""

    def train_dataloader(self) -> DataLoader:
        rank, world = (self.trainer.global_rank, self.trainer.world_size) if self.trainer is not None else (0, 1)
        return DataLoader(TrainingStream(self.stream_batch, self.batch_size, 0, rank, world), batch_size=None)


class PaddedTask(FreeRecallTask):
    """Each process's test shard repeats its first trial (as a padding sampler would)."""

    def test_dataloader(self) -> DataLoader:
        batches = list(super().test_dataloader())
        return [batches[0], *batches] if self.trainer is not None else batches


class OverpromisingTask(FreeRecallTask):
    provides = frozenset({"tokens", "targets"})


@pytest.mark.parametrize("cls,breach", [
    (ImpureTask, "ImpureTask: training batch 0 is not a pure function of"),
    (LeakyTask, "LeakyTask: training batch 0 holds the held-out set"),
    (RankBlindTask, "RankBlindTask: batch 0 of 2 processes at batch_size 4 is not one process's at 8"),
    (ForgetfulTask, "ForgetfulTask: a run resumed at step 2"),
    (PaddedTask, "PaddedTask: the test trials of 2 processes are not the single process's, each once"),
    (OverpromisingTask, r"OverpromisingTask: its training batches lack \['targets'\], which it declares in provides"),
])
def test_check_task_names_the_class_and_the_broken_guarantee(cls, breach):
    with pytest.raises(AssertionError, match=breach):
        check_task(cls, **tiny_settings("FreeRecallTask"))


def test_check_task_reads_study_sets_where_it_is_told():
    """Associative recall's keys alternate with values: read as its first n_items tokens, its test trials are not
    those of its held-out sets, which the check says rather than passing a misreading."""
    with pytest.raises(AssertionError, match="the val trials are not those of its held-out val sets"):
        check_task(AssociativeRecallTask, **tiny_settings("AssociativeRecallTask"))


class IdleParameterModel(registry.get("FreeRecallModel", "model")):
    """A parameter that no loss reaches: training on several processes (DDP) would stop at it."""

    def __init__(self, backbone: torch.nn.Module, vocab_size: int = 34, n_items: int = 12) -> None:
        super().__init__(backbone, vocab_size=vocab_size, n_items=n_items)
        self.idle = torch.nn.Linear(2, 2)


def test_check_model_finds_a_parameter_without_gradient():
    task = FreeRecallTask(**tiny_settings("FreeRecallTask"))
    with pytest.raises(AssertionError, match="IdleParameterModel: parameter idle.weight gets no gradient"):
        check_model(IdleParameterModel, task)


def test_tiny_fit_trains_and_tests_quietly(tmp_path, capsys):
    run = tiny_fit(tmp_path / "run", "RecallModel", "AssociativeRecallTask", "LSTMBackbone", steps=2,
                   data_settings={"num_test_sets": 1})
    assert run == tmp_path / "run" and (run / "config.yaml").is_file()
    assert (run / "results").is_dir() and not list((run / "results").glob("*.png")), "tested, without figures"
    config = (run / "config.yaml").read_text()
    assert "num_test_sets: 1" in config and "max_steps: 2" in config and "d_model: 8" in config


def test_tiny_args_start_from_a_config_when_given_one(tmp_path):
    args = tiny_args(None, None, None, config=tmp_path / "c.yaml", data_settings={"n_items": 3})
    assert args[:2] == ["--config", str(tmp_path / "c.yaml")] and "--model" not in args and "--data" not in args
    assert args[args.index("--data.init_args.n_items") + 1] == "3"
