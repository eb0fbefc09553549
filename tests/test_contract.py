"""The model-task contract: a task declares the fields of its batches (``Task.provides``), a model the fields it reads
and the sizes it takes from its task (``TaskModel.requires``, ``task_sizes``); every registered model x task pair
either trains or is refused in one line when the config is parsed, before anything is written."""

import inspect

import lightning as L
import pytest
from conftest import QUIET, ROOT, TINY_RUNS

from primacy import registry
from primacy.cli.lightning import parse_run
from primacy.cli.main import main
from primacy.contract import check_pairing
from primacy.errors import UsageError
from primacy.models.lists import SequenceModel
from primacy.rundir.runs import load_run
from primacy.tasks.base import batch_keys
from primacy.tasks.verification import VerificationTask

MODELS = registry.names("model")
TASKS = registry.names("task")
ONE_STEP = ["--trainer.max_steps", "1", "--test_after_fit", "false"]


def tiny_run(task: type) -> list[str]:
    """The tiny run of a registered task (tests/conftest.py), which every task of primacy's has."""
    assert task.name in TINY_RUNS, f"{task.__name__} has no tiny run in tests/conftest.py TINY_RUNS"
    return TINY_RUNS[task.name]


def tiny_task(task: type, tmp_path) -> L.LightningDataModule:
    """The task of its tiny run, built from the parsed settings."""
    config = parse_run(["fit", *tiny_run(task), "--trainer.default_root_dir", str(tmp_path / "parsed")])
    return task(**config.data.init_args.as_dict())


@pytest.fixture(scope="module")
def tiny_tasks(tmp_path_factory) -> dict[str, L.LightningDataModule]:
    """Every registered task, built with its tiny run's settings."""
    root = tmp_path_factory.mktemp("tasks")
    return {name: tiny_task(registry.get(name, "task"), root) for name in TASKS}


@pytest.mark.parametrize("name", TASKS)
def test_a_task_declares_the_keys_of_its_training_and_evaluation_batches(name, tiny_tasks):
    task_class = registry.get(name, "task")
    assert isinstance(task_class.provides, frozenset) and task_class.provides, f"{name} declares no provides"
    task = tiny_tasks[name]
    keys = batch_keys(task_class.provides)
    assert set(task.stream_batch(0, 2)) == keys, "training batches"
    assert set(next(iter(task.val_dataloader()))) == keys, "validation batches"
    assert set(next(iter(task.test_dataloader()))) == keys, "test batches"


@pytest.mark.parametrize("name", MODELS)
def test_a_model_declares_what_it_reads_and_the_sizes_it_takes_from_its_task(name):
    model_class = registry.get(name, "model")
    assert isinstance(model_class.requires, frozenset) and model_class.requires, f"{name} declares no requires"
    arguments = set(inspect.signature(model_class.__init__).parameters)
    assert model_class.task_sizes <= arguments, "a size the model takes is one of its arguments"
    assert ("n_items" in arguments) == ("n_items" in model_class.task_sizes), "n_items is linked from the task"


def test_every_registered_model_and_task_either_train_a_step_or_are_refused_in_one_line(tmp_path, capsys):
    """Each pair: `primacy fit` of the task's tiny run with the model, one step (Lightning's sanity check runs two
    validation batches first). A refusal is one line that names both classes, leaves no run directory, and advises
    pairs that do train; each task trains with some model and each model with some task."""
    trained, refused = set(), {}
    for task_name in TASKS:
        task_class = registry.get(task_name, "task")
        for model_name in MODELS:
            run = tmp_path / f"{model_name}-{task_name}"
            args = ["fit", *tiny_run(task_class), "--model", model_name, *ONE_STEP,
                    "--trainer.default_root_dir", str(run)]
            try:
                main(args)
            except SystemExit as exit_info:
                err = capsys.readouterr().err
                lines = [line for line in err.splitlines() if line.strip()]
                assert exit_info.code == 2 and "Traceback" not in err and len(lines) == 1, (model_name, task_name, err)
                assert lines[0].startswith(f"primacy: error: model={model_name} does not fit data={task_name}: ")
                assert not run.exists(), f"{model_name} x {task_name}: refused after writing {run}"
                refused[model_name, task_name] = lines[0]
            else:
                capsys.readouterr()
                assert (run / "checkpoints" / "last.ckpt").is_file(), (model_name, task_name)
                trained.add((model_name, task_name))
    assert {task for _, task in trained} == set(TASKS) and {model for model, _ in trained} == set(MODELS)
    for (model_name, task_name), line in refused.items():
        advice = line.rpartition("; pair ")[2]
        for pair in advice.split(", or "):
            first, _, others = pair.partition(" with ")
            for other in others.split(" or "):
                fitting = (other, first) if first == task_name else (model_name, other)
                assert fitting in trained, f"{line}: advises {fitting}, which does not train"


class FixedLengthVerification(VerificationTask):
    """Verification at a fixed L = 4: batches that SequenceModel reads, but no n_items setting to size it with."""

    def __init__(self, vocab_size: int = 32, batch_size: int = 4, seed: int = 0) -> None:
        super().__init__(n_items=4, vocab_size=vocab_size, batch_size=batch_size, num_held_out=12, num_test_sets=5,
                         num_val_sets=2, seed=seed)

    @classmethod
    def sequence_length(cls, settings: dict) -> int:
        return 8


def test_a_task_without_n_items_is_refused_for_a_model_that_takes_it(tmp_path, capsys):
    run = tmp_path / "run"
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", *TINY_RUNS["verification"], "--data", f"{__name__}.FixedLengthVerification", *ONE_STEP,
              "--trainer.default_root_dir", str(run)])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "Traceback" not in err
    assert err.strip() == ("primacy: error: model=SequenceModel does not fit data=FixedLengthVerification: the model "
                           "takes n_items from the task, which has none; pair SequenceModel with VerificationTask")
    assert not run.exists(), "nothing is written before the refusal"


def test_validate_and_test_refuse_a_pair_as_fit_does(tmp_path, capsys):
    for subcommand in ("validate", "test"):
        with pytest.raises(SystemExit):
            main([subcommand, "--config", str(ROOT / "configs" / "quickstart.yaml"), *QUIET, "--data",
                  "InductionTask", "--trainer.default_root_dir", str(tmp_path / subcommand)])
        err = capsys.readouterr().err
        assert err.startswith("primacy: error: model=SequenceModel does not fit data=InductionTask: "), err
        assert not (tmp_path / subcommand).exists()


def test_classes_that_declare_nothing_are_let_through():
    class Elsewhere(L.LightningDataModule):
        def __init__(self, size: int = 3) -> None:
            super().__init__()

    class Foreign(L.LightningModule):
        pass

    check_pairing(SequenceModel, Elsewhere, {"size": 3})  # no provides: nothing to check, n_items neither
    check_pairing(Foreign, VerificationTask, {"n_items": 4})
    with pytest.raises(UsageError, match=r"^model=SequenceModel does not fit data=Elsewhere"):
        check_pairing(SequenceModel, type("Elsewhere", (Elsewhere,), {"provides": frozenset({"tokens"})}), {})


def test_analyses_refuse_a_run_whose_model_and_task_do_not_fit(tmp_path):
    """load_run (every analysis of a finished run) checks its config as the CLI does, before reading a checkpoint."""
    config = tmp_path / "config.yaml"
    config.write_text("model:\n  class_path: SequenceModel\n  init_args:\n    backbone:\n"
                      "      class_path: LSTMBackbone\ndata:\n  class_path: InductionTask\n")
    with pytest.raises(UsageError, match=r"^model=SequenceModel does not fit data=InductionTask: "):
        load_run(config, tmp_path / "missing.ckpt")


@pytest.mark.filterwarnings("ignore:Attribute 'backbone' is an instance")
def test_the_fields_a_model_requires_are_those_it_reads(tiny_tasks, tmp_path):
    """A model's requires is honest: with only the required keys of a fitting task's batch it trains and validates;
    without any one of them it cannot."""
    for model_name in MODELS:
        model_class = registry.get(model_name, "model")
        task = next(task for task in tiny_tasks.values() if _fits(model_class, task))
        config = parse_run(["fit", *tiny_run(type(task)), "--model", model_name, "--trainer.default_root_dir",
                            str(tmp_path / "parsed")])
        model = _build_model(config.model)
        keys = batch_keys(model_class.requires)
        training = {k: v for k, v in task.stream_batch(0, 2).items() if k in keys}
        evaluation = {k: v for k, v in next(iter(task.val_dataloader())).items() if k in keys}
        model.training_step(training, 0)
        model.validation_step(evaluation, 0)
        for key in keys:
            with pytest.raises(KeyError):
                model.training_step({k: v for k, v in training.items() if k != key}, 0)
                model.validation_step({k: v for k, v in evaluation.items() if k != key}, 0)


def _fits(model: type, task: L.LightningDataModule) -> bool:
    try:
        check_pairing(model, type(task), dict(task.hparams))
    except UsageError:
        return False
    return True


def _build_model(section) -> L.LightningModule:
    """The model of a parsed config section (class_path, init_args with a backbone section)."""
    settings = section.init_args.as_dict()
    backbone = settings.pop("backbone")
    backbone = registry.import_class(backbone["class_path"])(**backbone.get("init_args", {}))
    return registry.import_class(section.class_path)(backbone=backbone, **settings)


def test_n_items_is_checked_once_where_the_task_hands_it_to_the_model(tmp_path):
    """A bad n_items is refused by the contract when the config is parsed, before the task, the model or its metrics
    are built (parse_run builds nothing; they would refuse it in the same words), and the sizes linked into a model
    are derived in one place."""
    from primacy.contract import check_linked_sizes, linked_sizes
    from primacy.models.language import LanguageModel

    with pytest.raises(UsageError, match=r"^n_items=0 is invalid: it must be at least 1$"):
        check_linked_sizes(SequenceModel, {"n_items": 0})
    check_linked_sizes(LanguageModel, {"n_items": 0})  # takes no n_items from its task: the task's own check
    with pytest.raises(UsageError, match="n_items=-2 is invalid: it must be at least 1"):
        parse_run(["fit", "--config", str(ROOT / "configs" / "quickstart.yaml"), "--data.init_args.n_items", "-2",
                   "--trainer.default_root_dir", str(tmp_path)])
    settings = {"n_items": 6, "vocab_size": 40}
    assert linked_sizes(VerificationTask, settings) == {"vocab_size": 40, "n_items": 6, "delays": None,
                                                        "context_length": 12}
