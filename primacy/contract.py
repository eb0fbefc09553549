"""The contract between a model and a task, where LightningCLI meets them: the task's sizes linked into the model
(``link_task_to_model``, each derived once by ``linked_sizes``) and a pair that cannot work refused in one line when
the config is parsed (``check_pairing``: the batch fields a model reads, ``TaskModel.requires``, against those a task's
batches hold, ``Task.provides``; the sizes a model takes from its task, ``TaskModel.task_sizes``; and
``check_linked_sizes``, the one check of those sizes on their way from the task to the model, its metrics and the
figures, which read the checked value)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from primacy import registry
from primacy.checks import positive
from primacy.errors import UsageError

if TYPE_CHECKING:  # the parser LightningCLI builds; nothing here imports Lightning
    from lightning.pytorch.cli import LightningArgumentParser


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
    """``check_pairing`` and ``check_linked_sizes`` for the ``model`` and ``data`` sections of a parsed config
    (Namespaces with class_path and init_args), before anything is built; nothing to check while either is missing
    (``primacy fit --help``)."""
    task, settings = task_class_and_settings(data)
    if task is None or model is None or model.get("class_path") is None:
        return
    model_class = registry.import_class(model.class_path)
    check_pairing(model_class, task, settings)
    check_linked_sizes(model_class, settings)


def check_linked_sizes(model: type, settings: dict[str, Any]) -> None:
    """Refuses, in one UsageError line, a size that a task built with ``settings`` would hand ``model`` through
    ``link_task_to_model`` and that no model can take: n_items, the list length L, must be at least 1. This is the
    one check of n_items on its way from the task to the figures: the model, which takes it from the task, its
    metrics and results read the checked value (a task and a metric built by hand refuse a bad one themselves, with
    the same words, as their own argument)."""
    if "n_items" in getattr(model, "task_sizes", ()) and "n_items" in settings:
        positive(n_items=settings["n_items"])


def linked_sizes(task: type, settings: dict[str, Any]) -> dict[str, Any]:
    """The sizes a task class built with ``settings`` (its init args) hands its model, where LightningCLI links them
    (``link_task_to_model``) and where the conformance kit builds a model for a task (``primacy.testing``): the
    number of tokens its sequences use (``Task.model_vocabulary``; a task from elsewhere: its ``vocab_size``),
    ``n_items``, the evaluation delays (``Task.eval_delays``) and the longest sequence, a backbone's
    ``context_length`` (``Task.sequence_length``). A size the task does not have is None."""
    return {
        "vocab_size": (task.model_vocabulary(settings) if hasattr(task, "model_vocabulary")
                       else settings.get("vocab_size")),
        "n_items": settings.get("n_items"),
        "delays": task.eval_delays(settings) if hasattr(task, "eval_delays") else None,
        "context_length": task.sequence_length(settings) if hasattr(task, "sequence_length") else None,
    }


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
    """The init parameters of ``cls`` with their defaults (those a ``**stream`` stands for included, as the CLI
    resolves them: ``registry.constructor_parameters``): the settings a task would be built with by default."""
    return {p.name: p.default for p in registry.constructor_parameters(cls)}


def task_class_and_settings(data: Any) -> tuple[type | None, dict]:
    """The class and init args of the ``data`` section of a parsed config (a Namespace with class_path, init_args);
    (None, {}) when the config names no task yet (``primacy fit --help``)."""
    if data is None or data.get("class_path") is None:
        return None, {}
    settings = data.init_args.as_dict() if data.get("init_args") is not None else {}
    return registry.import_class(data.class_path), settings


def _linked(data: Any, size: str) -> Any:
    """One of ``linked_sizes`` of the parsed ``data`` section; None while the config names no task."""
    cls, settings = task_class_and_settings(data)
    return None if cls is None else linked_sizes(cls, settings)[size]


def _task_vocabulary(data: Any) -> int | None:
    return _linked(data, "vocab_size")


def _task_delays(data: Any) -> list[int] | None:
    return _linked(data, "delays")


def _task_length(data: Any) -> int | None:
    return _linked(data, "context_length")
