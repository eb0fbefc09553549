"""Every model, task and backbone is found from one place, the entry points: each answers to its short name on the
command line (``primacy fit --model FreeRecallModel``), and every class the docs and configs name is registered."""

import re

import pytest
import tomllib
import yaml
from conftest import ROOT

from primacy import registry
from primacy.cli import main
from primacy.errors import UsageError

# a config of each model's task, so that --model NAME meets settings it accepts
CONFIG_OF = {"SequenceModel": "quickstart", "RecallModel": "quickstart-recall",
             "FreeRecallModel": "quickstart-free-recall", "LanguageModel": "induction-quickstart",
             "VerificationTask": "quickstart", "ReconstructionTask": "quickstart-reconstruction",
             "AssociativeRecallTask": "quickstart-recall", "FreeRecallTask": "quickstart-free-recall",
             "InductionTask": "induction-quickstart", "MQARTask": "quickstart-mqar",
             "SelectiveCopyingTask": "quickstart-selective-copying"}
SECTION = {"model": "model", "task": "data"}
TEXTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "configs").rglob("*.yaml"))]


def named_classes(suffix: str) -> set[str]:
    """Class names ending in ``suffix`` that the docs and configs give as a short name or the last part of a path."""
    found = set()
    for path in TEXTS:
        found.update(re.findall(rf"\b([A-Z]\w*{suffix})\b", path.read_text()))
    return found


def plugin_examples() -> set[str]:
    """The classes docs/plugins.md writes as examples of plugins: registered only once their example is installed."""
    return set(re.findall(r"^class (\w+)\(", (ROOT / "docs" / "plugins.md").read_text(), flags=re.MULTILINE))


def test_every_model_and_task_the_docs_and_configs_name_is_registered():
    not_models = {"HeadModel", "TaskModel"} | plugin_examples()  # a protocol of the head analyses, the models' base
    assert named_classes("Model") - not_models <= set(registry.names("model"))
    not_tasks = {"HeldOutTask"} | plugin_examples()  # HeldOutTask: a base class
    assert named_classes("Task") - not_tasks <= set(registry.names("task"))
    assert set(CONFIG_OF) == set(registry.names("model")) | set(registry.names("task"))


@pytest.mark.parametrize("kind,name", [(kind, name) for kind in SECTION for name in registry.names(kind)])
def test_fit_takes_every_registered_model_and_task_by_its_short_name(kind, name, capsys):
    section = SECTION[kind]
    with pytest.raises(SystemExit) as printed:
        main(["fit", "--config", str(ROOT / "configs" / f"{CONFIG_OF[name]}.yaml"), f"--{section}", name,
              "--print_config"])
    assert printed.value.code == 0
    chosen = yaml.safe_load(capsys.readouterr().out)[section]
    cls = registry.get(name, kind)
    assert chosen["class_path"] == f"{cls.__module__}.{name}" and chosen["init_args"]


@pytest.mark.parametrize("kind", sorted(registry.GROUPS))
def test_a_registered_name_imports_the_class_of_that_name(kind):
    for name in registry.names(kind):
        assert registry.get(name, kind).__name__ == name
        assert registry.import_class(name) is registry.get(name, kind)


def test_an_unknown_model_is_refused_with_the_close_names():
    message = ("model 'FreeRecalModel' is not registered: did you mean FreeRecallModel or RecallModel or "
               "SequenceModel? registered models: FreeRecallModel, LanguageModel, RecallModel, SequenceModel")
    with pytest.raises(UsageError) as refused:
        registry.get("FreeRecalModel", "model")
    assert str(refused.value) == message


def test_primacy_models_lists_backbones_models_and_tasks_with_the_distribution_of_each(capsys):
    main(["models"])
    out = capsys.readouterr().out
    sections = dict(re.findall(r"^(\w+):\n((?:  .*\n)+)", out, flags=re.M))
    assert list(sections) == ["backbones", "models", "tasks"]
    for kind, heading in (("backbone", "backbones"), ("model", "models"), ("task", "tasks")):
        for row in registry.describe(kind):
            assert re.search(rf"^  {row['name']}\s+{re.escape(row['distribution'])}\s", sections[heading], flags=re.M)
    assert re.search(r"^  VerificationTask\s+primacy\s", sections["tasks"], flags=re.M)


@pytest.fixture
def checkout_plugins(tmp_path, monkeypatch):
    """The registry reading its plugin hints from ``tmp_path`` (a checkout's plugins/ folder) for one test."""
    monkeypatch.setattr(registry, "CHECKOUT_PLUGINS", tmp_path)
    registry.checkout_plugins.cache_clear()
    yield tmp_path
    registry.checkout_plugins.cache_clear()


def test_a_checkout_plugin_that_is_not_installed_is_named_from_its_pyproject(checkout_plugins):
    (checkout_plugins / "primacy-count").mkdir()
    (checkout_plugins / "primacy-count" / "pyproject.toml").write_text(
        '[project]\nname = "primacy-count"\n\n[project.entry-points."primacy.tasks"]\n'
        'CountTask = "primacy_count:CountTask"\n')
    (checkout_plugins / "broken").mkdir()
    (checkout_plugins / "broken" / "pyproject.toml").write_text("[project\n")  # gives no hint, and no error
    message = ("task 'CountTask' is provided by the plugin primacy-count (pip install -e plugins/primacy-count from a "
               "primacy checkout), which is not installed")
    for ask in (lambda: registry.get("CountTask", "task"), lambda: registry.import_class("CountTask")):
        with pytest.raises(UsageError) as refused:
            ask()
        assert str(refused.value) == message
    with pytest.raises(UsageError, match="^model 'CountTask' is not registered"):  # declared as a task, not a model
        registry.get("CountTask", "model")


def test_the_bundled_plugins_are_read_from_their_pyprojects_not_named_in_the_code():
    source = (ROOT / "primacy" / "registry.py").read_text()
    pyprojects = sorted(ROOT.glob("plugins/*/pyproject.toml"))
    assert len(pyprojects) >= 2
    kinds = {group: kind for kind, group in registry.GROUPS.items()}
    for path in pyprojects:
        project = tomllib.loads(path.read_text())["project"]
        for group, declared in project["entry-points"].items():
            for name in declared:
                assert registry.checkout_plugins()[kinds[group], name].startswith(f"{project['name']} (pip install")
                assert name not in source and project["name"] not in source
