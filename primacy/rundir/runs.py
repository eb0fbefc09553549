"""Rebuilding a finished run's model and task from its config.yaml and a checkpoint, for post-hoc analyses."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning as L
import yaml
from lightning.pytorch.cli import LightningArgumentParser

from primacy import moved, registry
from primacy.contract import check_parsed_pairing, link_task_to_model
from primacy.errors import UsageError
from primacy.rundir.checkpoints import check_checkpoint


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
    parser, parsed = _parsed_run(config)
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


def untrained_run(config: str | Path) -> tuple[L.LightningModule, L.LightningDataModule]:
    """The model, freshly initialised, and the task that a run's ``config.yaml`` describes: what the run is made of,
    for a run kept without its checkpoints."""
    parser, parsed = _parsed_run(Path(config))
    built = parser.instantiate_classes(parsed)
    return built.model, built.data


def _parsed_run(config: Path) -> tuple[Any, Any]:
    """The run parser and a run's model and task settings parsed by it, their pairing checked."""
    settings = run_settings(config)
    parser = _run_parser()
    parsed = parser.parse_object({"model": settings["model"], "data": settings["data"]})
    check_parsed_pairing(parsed.model, parsed.data)
    return parser, parsed


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


def __getattr__(name: str) -> object:  # the model-task contract, in primacy.contract since issue 70
    return moved.old_name(__name__, name)
