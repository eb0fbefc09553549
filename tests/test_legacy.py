"""Runs, configs and checkpoints written before the package layout of issue 26 keep working (tests/legacy, made
with the code before the move: tests/legacy/make.py). Their class paths (primacy.model.SequenceModel, ...) resolve
to the classes that live elsewhere now, the run tests, resumes bitwise and aggregates, and new runs name new paths."""

import ast
import importlib
import json
import shutil
import subprocess
import sys
import warnings

import pytest
import torch
import yaml
from conftest import QUIET, ROOT, TINY_RUNS
from support.configs import TASK_SIZES

from primacy import moved
from primacy.cli import main
from primacy.models.lists import SequenceModel
from primacy.testing.runs import NO_FIGURES

LEGACY = ROOT / "tests" / "legacy"
OLD_CONFIGS = sorted((LEGACY / "configs").glob("*.yaml"))
# One old config per task names every old model, task and callback path; the others differ from them only in the
# backbone (a short name, unchanged by the move) and run with -m slow.
EVERY_OLD_PATH = ("quickstart", "quickstart-recall", "quickstart-reconstruction", "quickstart-free-recall",
                  "induction-quickstart")


@pytest.fixture
def legacy_run(tmp_path):
    """A copy of the run stopped at step 4 of 8 (its checkpoint, config.yaml and Δt history)."""
    run = tmp_path / "legacy"
    shutil.copytree(LEGACY / "run", run)
    return run


def with_run_dir(run) -> list[str]:
    return ["--config", str(run / "config.yaml"), "--trainer.default_root_dir", str(run)]


@pytest.mark.parametrize("old", sorted(set(moved.MOVED) - set(moved.SPLIT)))
def test_an_old_module_path_is_the_new_module_and_says_where_it_went(old):
    new = importlib.import_module(moved.MOVED[old])
    fresh = old not in sys.modules
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(old)  # imported fresh, or from sys.modules after a first import
    assert module is new and module.__spec__.name == moved.MOVED[old]
    # The first import of a path in this process warns; later ones find it in sys.modules. An old parent package
    # imported for the first time here warns too, before it (which comes first depends on the tests run before).
    olds = {".".join(old.split(".")[:i]) for i in range(1, old.count(".") + 2)} & set(moved.MOVED)
    assert all(w.category is FutureWarning for w in caught)
    for warning in caught:
        assert any(str(warning.message).startswith(f"{path} is now {moved.MOVED[path]}") for path in olds), warning
    if fresh:
        assert any(str(w.message).startswith(f"{old} is now {moved.MOVED[old]}") for w in caught)


def resolve(path: str):
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize("old", sorted(moved.SPLIT))
def test_an_old_name_of_a_split_module_is_the_object_of_now_and_says_where_it_went(old, monkeypatch):
    parent, _, child = old.rpartition(".")
    monkeypatch.delitem(sys.modules, old, raising=False)  # a fresh import, so each name's first use is this test's
    monkeypatch.setattr(importlib.import_module(parent), child, None, raising=False)  # put back after, as sys.modules
    module = importlib.import_module(old)
    for name, new in moved.SPLIT[old].items():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            value = getattr(module, name)
        assert value is resolve(new) and moved.current_path(f"{old}.{name}") == new
        said = [(w.category, str(w.message).split(":")[0]) for w in caught]
        assert said == [(FutureWarning, f"{old}.{name} is now {new}")]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert getattr(module, name) is value and not caught  # later uses: the same object, no second warning
        assert name in dir(module)
    with pytest.raises(AttributeError):
        module.not_a_name_it_ever_had  # noqa: B018


@pytest.mark.parametrize("old", sorted(moved.PACKAGES))
def test_an_old_name_of_a_module_that_became_a_package_is_the_object_of_now(old):
    package = importlib.import_module(old)
    for name, new in moved.PACKAGES[old].items():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert getattr(package, name) is resolve(new) and moved.current_path(f"{old}.{name}") == new
        assert [(w.category, str(w.message).split(":")[0]) for w in caught] == [(FutureWarning,
                                                                                 f"{old}.{name} is now {new}")]
    with pytest.raises(AttributeError):
        package.not_a_name_it_ever_had  # noqa: B018


# Public names of the old modules that have no successor: known_classes(base) listed primacy's subclasses of a base
# class; the registry (registry.names, registry.load_all) replaced it.
NO_SUCCESSOR = {"primacy.usage.known_classes"}


def old_public_names() -> dict[str, list[str]]:
    """Each old module (MOVED, SPLIT, PACKAGES) -> its classes and functions not starting with _, as the code defined
    them before it moved: read from git history, at the parent of the last commit that deleted its file, or at HEAD
    for a file whose move is not committed yet. A module that was a file and later a package (``primacy.analysis.cmr``,
    ``primacy.callbacks``) counts the names of both."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True).stdout

    def source(path: str) -> str:
        deleted = git("log", "--no-renames", "--diff-filter=D", "-1", "--format=%H", "--", path).strip()
        try:
            return git("show", f"{deleted}^:{path}" if deleted else f"HEAD:{path}")
        except subprocess.CalledProcessError:
            return ""  # never this file: the module was only ever a file, or only a package

    try:
        git("rev-parse", "--verify", "HEAD")
        sources = {old: [source(old.replace(".", "/") + suffix) for suffix in (".py", "/__init__.py")]
                   for old in {*moved.MOVED, *moved.SPLIT, *moved.PACKAGES}}
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("needs the git history of primacy")
    missing = sorted(old for old, texts in sources.items() if not any(texts))
    assert not missing, f"old modules with no file in git history: {missing}"
    return {old: [node.name for text in texts for node in ast.parse(text).body
                  if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and not node.name.startswith("_")]
            for old, texts in sources.items()}


def test_every_public_name_of_an_old_module_resolves_to_the_object_of_now():
    unresolved = []
    for old, names in old_public_names().items():
        for name in names:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                value = getattr(importlib.import_module(old), name, None)
            if f"{old}.{name}" in NO_SUCCESSOR:
                assert value is None, f"{old}.{name} resolves now: take it out of NO_SUCCESSOR"
            elif value is None or value is not resolve(moved.current_path(f"{old}.{name}")):
                unresolved.append(f"{old}.{name}")
    assert not unresolved, f"old public names that do not resolve to where they are now: {unresolved}"


def test_a_config_naming_line_progress_by_its_old_path_runs(tmp_path, capfd):
    """primacy.console.LineProgress, a public callback before its module was split, named as a trainer callback."""
    config = tmp_path / "line-progress.yaml"
    callback = {"class_path": "primacy.console.LineProgress", "init_args": {"every_seconds": 0.0}}
    config.write_text(yaml.safe_dump({"trainer": {"callbacks": [callback], "enable_progress_bar": True}}))
    run = tmp_path / "run"
    main(["fit", *TINY_RUNS["verification"], "--config", str(config), "--trainer.default_root_dir", str(run),
          "--trainer.max_steps", "1", "--test_after_fit", "false"])
    assert "step 1/1" in capfd.readouterr().err  # its line after the one training step
    written = yaml.safe_load((run / "config.yaml").read_text())
    assert [c["class_path"] for c in written["trainer"]["callbacks"]] == ["primacy.cli.progress.LineProgress"]


def test_the_old_class_paths_of_the_configs_name_the_classes_of_now():
    from primacy.callbacks.trackers import DtTracker
    from primacy.models.free_recall import FreeRecallModel
    from primacy.models.language import LanguageModel
    from primacy.models.lists import RecallModel
    from primacy.tasks.associative_recall import AssociativeRecallTask

    old = {"primacy.model.SequenceModel": SequenceModel, "primacy.model.RecallModel": RecallModel,
           "primacy.free_recall_model.FreeRecallModel": FreeRecallModel,
           "primacy.language_model.LanguageModel": LanguageModel,
           "primacy.tasks.recall.AssociativeRecallTask": AssociativeRecallTask,
           "primacy.callbacks.DtTracker": DtTracker}
    for path, cls in old.items():
        module, _, name = path.rpartition(".")
        assert getattr(importlib.import_module(module), name) is cls, path
        assert moved.current_path(path) == f"{cls.__module__}.{name}" or module == "primacy.callbacks"


def test_load_from_checkpoint_of_an_old_run_returns_the_class_of_now():
    model = SequenceModel.load_from_checkpoint(LEGACY / "run" / "checkpoints" / "last.ckpt", map_location="cpu")
    assert type(model) is SequenceModel and type(model).__module__ == "primacy.models.lists"


def test_an_old_run_tests_and_then_aggregates(legacy_run, tmp_path, capsys):
    main(["test", *with_run_dir(legacy_run), "--ckpt_path", str(legacy_run / "checkpoints" / "last.ckpt")])
    summary = json.loads((legacy_run / "results" / "summary.json").read_text())
    assert summary["n_items"] == 4 and summary["backbone"] == "S4DBackbone"
    assert 0.0 <= summary["overall_accuracy"] <= 1.0 and len(summary["serial_position_curve"]) == 4
    main(["aggregate", str(legacy_run), "--out", str(tmp_path / "mean")])
    aggregated = json.loads((tmp_path / "mean" / "summary.json").read_text())
    assert aggregated["n_runs"] == 1
    assert aggregated["overall_accuracy"]["mean"] == pytest.approx(summary["overall_accuracy"])


# straight.ckpt and the run were made on another machine: there, the resumed run ended in straight.ckpt's state bit
# for bit; a CPU whose float kernels round differently ends up to an ulp away (7e-9 in backbone.c on an AMD EPYC), so
# across machines the states are compared to 1e-6, three orders below what one step of Adam at these learning rates
# moves (a lost optimiser state or a restarted schedule is 1e-4 or more away). Bitwise resumption on one machine is
# test_resume.py's contract.
CROSS_MACHINE = {"rtol": 0.0, "atol": 1e-6}


def test_an_old_run_resumes_to_the_end_the_old_code_reached(legacy_run, caplog):
    """straight.ckpt is the uninterrupted run of the old code: the resumed run of the new code ends in its state, Δt
    history included (the DtTracker's state key is its class name, unchanged)."""
    main(["fit", *with_run_dir(legacy_run), "--test_after_fit", "false"])
    assert "Resuming the unfinished run" in caplog.text
    resumed = torch.load(legacy_run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    expected = torch.load(LEGACY / "straight.ckpt", map_location="cpu", weights_only=True)
    assert resumed["global_step"] == expected["global_step"] == 8
    assert resumed["state_dict"].keys() == expected["state_dict"].keys()
    for key, value in expected["state_dict"].items():
        torch.testing.assert_close(resumed["state_dict"][key], value, **CROSS_MACHINE, msg=key)
    for ours, theirs in zip(resumed["optimizer_states"][0]["state"].values(),
                            expected["optimizer_states"][0]["state"].values()):
        for k in theirs:
            torch.testing.assert_close(ours[k], theirs[k], **CROSS_MACHINE)
    assert resumed["lr_schedulers"] == expected["lr_schedulers"]
    tracker = next(state for key, state in resumed["callbacks"].items() if key.startswith("DtTracker"))
    old_tracker = next(state for key, state in expected["callbacks"].items() if key.startswith("DtTracker"))
    assert tracker["steps"] == old_tracker["steps"] == [0, 2, 4, 6, 8]
    assert tracker["values"] == old_tracker["values"]  # every channel's Δt at each of those steps


def test_a_new_run_writes_the_new_class_paths(tmp_path):
    run = tmp_path / "new"
    main(["fit", *TINY_RUNS["verification"], "--trainer.default_root_dir", str(run), "--trainer.max_steps", "2",
          "--test_after_fit", "false"])
    config = yaml.safe_load((run / "config.yaml").read_text())
    assert config["model"]["class_path"] == "primacy.models.lists.SequenceModel"
    assert config["trainer"]["callbacks"][0]["class_path"] == "primacy.callbacks.trackers.DtTracker"
    assert config["data"]["class_path"] == "primacy.tasks.verification.VerificationTask"


@pytest.mark.parametrize("config", [pytest.param(p, id=p.stem,
                                                 marks=() if p.stem in EVERY_OLD_PATH else pytest.mark.slow)
                                    for p in OLD_CONFIGS])
def test_an_old_config_runs_one_batch(config, tmp_path):
    task = yaml.safe_load(config.read_text())["data"]["class_path"].rsplit(".", 1)[-1]
    main(["fit", "--config", str(config), *QUIET, "--trainer.default_root_dir", str(tmp_path / "run"),
          "--trainer.accelerator", "cpu", "--trainer.max_steps", "1", "--trainer.val_check_interval", "1",
          "--trainer.limit_val_batches", "2", "--trainer.limit_test_batches", "2",
          "--trainer.num_sanity_val_steps", "0", "--data.init_args.batch_size", "4", *TASK_SIZES[task], *NO_FIGURES])
    assert (tmp_path / "run" / "results" / "summary.json").is_file()
    written = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert not any(written["model"]["class_path"].startswith(old + ".") for old in moved.MOVED)
