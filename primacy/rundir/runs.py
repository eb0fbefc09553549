"""Rebuilding a finished run's model and task from its config.yaml and a checkpoint, for post-hoc analyses."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning as L
import yaml
from lightning.pytorch.cli import LightningArgumentParser

from primacy import registry
from primacy.errors import UsageError
from primacy.rundir.checkpoints import check_checkpoint


def link_task_to_model(parser: LightningArgumentParser) -> None:
    """The task's sizes are the model's: the number of tokens its sequences use (``Task.model_vocabulary``) always,
    n_items and the evaluation delays (``Task.eval_delays``) for the models that take them, and the longest sequence
    (``Task.sequence_length``) for backbones with a ``context_length``."""
    parser.link_arguments("data", "model.init_args.vocab_size", compute_fn=_task_vocabulary, apply_on="parse")
    parser.link_arguments("data.init_args.n_items", "model.init_args.n_items", apply_on="parse")
    parser.link_arguments("data", "model.init_args.delays", compute_fn=_task_delays, apply_on="parse")
    parser.link_arguments("data", "model.init_args.backbone.init_args.context_length", compute_fn=_task_length,
                          apply_on="parse")


def check_pairing(model: type, task: type, settings: dict[str, Any]) -> None:
    """Refuses, in one UsageError line, a model class and a task class (built with init args ``settings``) that do not
    fit: the model reads batch fields (``TaskModel.requires``) that the task's batches do not hold (``Task.provides``),
    or takes a size from the task (``TaskModel.task_sizes``, linked by ``link_task_to_model``) that the task does not
    have. The line names both classes, what is missing and the registered models and tasks that would fit. Nothing
    is checked when either class declares nothing (a LightningModule or LightningDataModule from elsewhere)."""
    gaps = _gaps(model, task, settings)
    if not gaps:
        return
    models = [name for name, cls in _declared("model", "requires") if not _gaps(cls, task, settings)]
    tasks = [name for name, cls in _declared("task", "provides") if not _gaps(model, cls, _parameters(cls))]
    pairs = [f"{task.__name__} with {' or '.join(models)}" if models else "",
             f"{model.__name__} with {' or '.join(tasks)}" if tasks else ""]
    advice = f"pair {', or '.join(pair for pair in pairs if pair)}" if any(pairs) else "no registered class fits either"
    raise UsageError(f"model={model.__name__} does not fit data={task.__name__}: {', and '.join(gaps)}; {advice}")


def check_parsed_pairing(model: Any, data: Any) -> None:
    """``check_pairing`` for the ``model`` and ``data`` sections of a parsed config (Namespaces with class_path and
    init_args); nothing to check while either is missing (``primacy fit --help``)."""
    task, settings = task_class_and_settings(data)
    if task is None or model is None or model.get("class_path") is None:
        return
    check_pairing(registry.import_class(model.class_path), task, settings)


def _gaps(model: type, task: type, settings: dict[str, Any]) -> list[str]:
    """What ``model`` needs and ``task`` (with ``settings``) lacks, one phrase per kind; empty when they fit."""
    requires, provides = getattr(model, "requires", None), getattr(task, "provides", None)
    if requires is None or provides is None:
        return []  # a class from elsewhere that declares nothing: no contract to check
    gaps = []
    if not requires <= provides:
        gaps.append(f"the model reads {', '.join(sorted(requires - provides))}, which the task's batches do not hold "
                    f"(they hold {', '.join(sorted(provides))})")
    lacking = sorted(size for size in getattr(model, "task_sizes", ()) if size not in settings)
    if lacking:
        gaps.append(f"the model takes {', '.join(lacking)} from the task, which has none")
    return gaps


def _declared(kind: str, side: str) -> list[tuple[str, type]]:
    """The registered classes of ``kind`` that declare their ``side`` of the contract: the only ones that can be
    advised. Those that fail to import are left out."""
    found = []
    for name in registry.names(kind):
        try:
            cls = registry.get(name, kind)
        except UsageError:
            continue
        if getattr(cls, side, None) is not None:
            found.append((name, cls))
    return found


def _parameters(cls: type) -> dict[str, Any]:
    """The init parameters of ``cls`` with their defaults: the settings a task would be built with by default."""
    return {name: p.default for name, p in inspect.signature(cls.__init__).parameters.items() if name != "self"}


def task_class_and_settings(data: Any) -> tuple[type | None, dict]:
    """The class and init args of the ``data`` section of a parsed config (a Namespace with class_path, init_args);
    (None, {}) when the config names no task yet (``primacy fit --help``)."""
    if data is None or data.get("class_path") is None:
        return None, {}
    settings = data.init_args.as_dict() if data.get("init_args") is not None else {}
    return registry.import_class(data.class_path), settings


def _task_vocabulary(data: Any) -> int | None:
    cls, settings = task_class_and_settings(data)
    if hasattr(cls, "model_vocabulary"):
        return cls.model_vocabulary(settings)
    return settings.get("vocab_size")  # a LightningDataModule from elsewhere, or none


def _task_delays(data: Any) -> list[int] | None:
    cls, settings = task_class_and_settings(data)
    return cls.eval_delays(settings) if hasattr(cls, "eval_delays") else None


def _task_length(data: Any) -> int | None:
    cls, settings = task_class_and_settings(data)
    return cls.sequence_length(settings) if hasattr(cls, "sequence_length") else None


def run_settings(config: str | Path) -> dict:
    """A run's config.yaml as a dict, refused unless it has model and data sections."""
    config = Path(config)
    if not config.is_file():
        raise UsageError(f"config={config} does not exist: give a run's config.yaml")
    try:
        settings = yaml.safe_load(config.read_text())
    except yaml.YAMLError as err:
        raise UsageError(f"config={config} is not valid YAML: {str(err).splitlines()[0]}") from None
    if not isinstance(settings, dict) or "model" not in settings or "data" not in settings:
        raise UsageError(f"config={config} is not a run config: it needs model and data sections")
    return settings


def require_backbone(config: str | Path, required: type, command: str) -> None:
    """Refuses, before anything is loaded, a run whose backbone (from its config.yaml) is not a ``required``."""
    _require_class(config, "model.init_args.backbone", "backbone", command, _subclass_of(required),
                   f"a {required.__name__} run", required.__name__)


def require_influence(config: str | Path, command: str) -> None:
    """Refuses, before anything is loaded, a run whose backbone (from its config.yaml) has neither attention nor an
    exact token-to-token influence (``Backbone.influence``): the backbones every head analysis reads."""
    _require_class(config, "model.init_args.backbone", "backbone", command,
                   lambda cls: isinstance(cls, type) and hasattr(cls, "influence"),
                   "attention or an exact token-to-token influence (Transformer, S4, S4D, Mamba, xLSTM with mLSTM "
                   "blocks)")


def require_task(config: str | Path, required: type, command: str) -> None:
    """Refuses, before anything is loaded, a run whose task (``data`` in its config.yaml) is not a ``required``."""
    _require_class(config, "data", "task", command, _subclass_of(required), f"a {required.__name__} run",
                   required.__name__)


def _subclass_of(required: type) -> Callable[[object], bool]:
    return lambda cls: isinstance(cls, type) and issubclass(cls, required)


def _require_class(config: str | Path, key: str, what: str, command: str, accepts: Callable[[object], bool],
                   wanted: str, name: str | None = None) -> None:
    """Refuses a run whose class at ``key`` (a ``what``) is not one ``accepts``: ``command`` needs ``wanted``; a
    class written as ``name``, the short name the CLI accepts, passes."""
    section = run_settings(config)
    for part in key.split("."):
        section = section.get(part) if isinstance(section, dict) else None
    class_path = section.get("class_path") if isinstance(section, dict) else section
    if not isinstance(class_path, str):
        raise UsageError(f"config={config} names no {key}: {command} needs {wanted}")
    if class_path == name:
        return
    try:
        cls = registry.import_class(class_path)
    except UsageError as err:
        if "." not in class_path:  # a short name that is not a registered backbone: a task's, say
            raise UsageError(f"config={config} has {what} {class_path}: {command} needs {wanted}") from None
        raise UsageError(f"config={config} names a {what} that cannot be used: {err}") from None
    if not accepts(cls):
        name = getattr(cls, "__name__", class_path)
        raise UsageError(f"config={config} has {what} {name}: {command} needs {wanted}")


def load_run(config: str | Path, ckpt_path: str | Path) -> tuple[L.LightningModule, L.LightningDataModule]:
    """The model (weights from ``ckpt_path``, in eval mode) and the task described by a run's ``config.yaml``."""
    config = Path(config)
    settings = run_settings(config)
    parser = _run_parser()
    parsed = parser.parse_object({"model": settings["model"], "data": settings["data"]})
    check_parsed_pairing(parsed.model, parsed.data)
    checkpoint = check_checkpoint(ckpt_path, parsed.model, "analyze")  # before anything is built
    built = parser.instantiate_classes(parsed)
    try:
        missing, unexpected = built.model.load_state_dict(checkpoint["state_dict"], strict=False)
    except RuntimeError as err:  # shapes that differ although the settings agree
        raise UsageError(f"ckpt_path={ckpt_path} does not match config={config}: {str(err).splitlines()[0]}") from None
    if missing or unexpected:
        raise UsageError(f"ckpt_path={ckpt_path} does not match config={config}: missing {missing[:3]}, "
                         f"unexpected {unexpected[:3]}")
    return built.model.eval(), built.data


def build_run(model: Any, data: Any) -> tuple[L.LightningModule, L.LightningDataModule]:
    """The model and task of a parsed config's ``model`` and ``data`` sections (Namespaces), built as a run builds
    them, so that every check of their constructors runs; nothing is trained, loaded or written."""
    parser = _run_parser()
    parsed = parser.parse_object({"model": model.as_dict(), "data": data.as_dict()})
    built = parser.instantiate_classes(parsed)
    return built.model, built.data


def _run_parser() -> LightningArgumentParser:
    """A parser of a run's model and data sections, the task's sizes linked to the model's as in ``primacy fit``."""
    registry.load_all()
    parser = LightningArgumentParser()
    parser.add_lightning_class_args(L.LightningModule, "model", subclass_mode=True)
    parser.add_lightning_class_args(L.LightningDataModule, "data", subclass_mode=True)
    link_task_to_model(parser)
    return parser
