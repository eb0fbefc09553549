"""Checkpoints are read safely and checked against the config they are used with, before anything is built."""

from __future__ import annotations

import inspect
import math
import pickle
from pathlib import Path
from typing import Any

import torch

from primacy import registry
from primacy.errors import UsageError

LIGHTNING_KEYS = ("state_dict", "global_step", "hyper_parameters")
# A resumed fit restores the optimiser and its schedule from the checkpoint, so these must match only for fit.
OPTIMISER_SETTINGS = frozenset({"lr", "betas", "eps", "weight_decay", "warmup_steps"})
# Backbone settings the CLI derives from the task (primacy.contract.link_task_to_model): Lightning's hyper_parameters
# leave a link's target out of a nested class's init_args, and the task they follow from is the run's own.
TASK_DERIVED = frozenset({"context_length"})
_ZIP, _PICKLE = b"PK\x03\x04", b"\x80"  # how torch's zip format and its legacy pickle format begin
_NO_DEFAULT = object()


def read_checkpoint(path: str | Path, parameter: str = "ckpt_path", mmap: bool = False) -> dict:
    """The Lightning checkpoint at ``path``, on the CPU, loaded without running pickled code; any file that is
    not one (missing, empty, truncated, another format) is a UsageError naming ``parameter`` and the file. With
    ``mmap`` the tensors of a zip-format file are mapped, not read: cheap when only the metadata is wanted."""
    path = Path(path)
    if not path.exists():
        raise UsageError(f"{parameter}={path} does not exist: give a checkpoint, e.g. <run>/checkpoints/last.ckpt")
    if path.is_dir():
        raise UsageError(f"{parameter}={path} is a directory: give a checkpoint file, e.g. <run>/checkpoints/last.ckpt")
    unreadable = f"{parameter}={path} is not a readable Lightning checkpoint"
    try:
        with path.open("rb") as f:
            head = f.read(4)
    except OSError as err:
        raise UsageError(f"{unreadable}: {err.strerror}") from None
    if not head:
        raise UsageError(f"{unreadable}: the file is empty")
    if not head.startswith((_ZIP, _PICKLE)):
        raise UsageError(f"{unreadable}: it is not a torch file")
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap and head == _ZIP)
    except Exception as err:  # torch raises EOFError, OSError, RuntimeError, UnpicklingError, ... on bad files
        if isinstance(err, pickle.UnpicklingError) and "weights only" in str(err).lower():
            reason = "it holds pickled Python objects besides tensors and plain data, which are not loaded for safety"
        else:
            reason = "the file is truncated or corrupted"
        raise UsageError(f"{unreadable}: {reason}") from None
    missing = [key for key in LIGHTNING_KEYS if not isinstance(checkpoint, dict) or key not in checkpoint]
    if missing:
        raise UsageError(f"{parameter}={path} is a torch file but not a Lightning checkpoint: it has no "
                         f"{', '.join(missing)}")
    return checkpoint


def checkpoint_difference(hparams: dict, model_config: Any, subcommand: str) -> str | None:
    """The first setting in which a checkpoint's ``hyper_parameters`` and the config's model section
    (class_path and init_args, as parsed) disagree, as ``key: the config says A, the checkpoint B``; None if
    they agree. Optimiser settings count only for ``fit``, which restores the optimiser and schedule; the sizes a
    model takes from its task (``task_sizes``: n_items) too, since a trained model may be tested on lists of another
    length (they size its metrics, never its weights)."""
    saved = {key: value for key, value in hparams.items() if key not in ("_class_path", "_instantiator")}
    saved = {"class_path": hparams.get("_class_path"), "init_args": saved}
    config = _plain(model_config)
    if saved["class_path"] is None:  # not written through the CLI: only the arguments can be compared
        saved["class_path"] = config.get("class_path")
    ignore = frozenset() if subcommand == "fit" else OPTIMISER_SETTINGS | _task_sizes(config.get("class_path"))
    return _difference("model", config, saved, ignore)


def _task_sizes(class_path: str | None) -> frozenset[str]:
    """The settings the model class at ``class_path`` takes from its task (none if it cannot be imported)."""
    try:
        return frozenset(getattr(registry.import_class(class_path), "task_sizes", ()))
    except (UsageError, TypeError, ValueError, AttributeError):
        return frozenset()


def checkpoint_step(path: str | Path, parameter: str = "ckpt_path") -> int:
    """The optimiser steps a checkpoint was trained for (its ``global_step``)."""
    return int(read_checkpoint(path, parameter, mmap=True)["global_step"])


def check_checkpoint(path: str | Path, model_config: Any, subcommand: str) -> dict:
    """The checkpoint at ``path``, after checking that it was trained with the model the config describes."""
    checkpoint = read_checkpoint(path)
    difference = checkpoint_difference(checkpoint["hyper_parameters"], model_config, subcommand)
    if difference is not None:
        raise UsageError(f"ckpt_path={path} does not match the config: {difference}; use the run's own config.yaml, "
                         f"or another checkpoint")
    return checkpoint


def _difference(key: str, config: Any, saved: Any, ignore: frozenset = frozenset()) -> str | None:
    if _is_class(config) and _is_class(saved):
        if not _same_class(config["class_path"], saved["class_path"]):
            return _describe(f"{key}.class_path", config["class_path"], saved["class_path"])
        return _args_difference(f"{key}.init_args", config.get("init_args") or {}, saved.get("init_args") or {},
                                config["class_path"], ignore)
    if isinstance(config, dict) and isinstance(saved, dict):
        return _args_difference(key, config, saved, None, ignore)
    return None if _same(config, saved) else _describe(key, config, saved)


def _args_difference(key: str, config: dict, saved: dict, class_path: str | None, ignore: frozenset) -> str | None:
    for name, value in config.items():
        if name in ignore:
            continue
        if name not in saved and name in TASK_DERIVED:
            continue
        if name not in saved:
            # a setting added to the code after the checkpoint was written: fine while it keeps its default
            if not _same(value, _default(class_path, name)):
                return f"{key}.{name}: the config says {_show(value)}, the checkpoint has no such setting"
            continue
        difference = _difference(f"{key}.{name}", value, saved[name])
        if difference is not None:
            return difference
    extra = [name for name in saved if name not in config and name not in ignore]
    if extra:
        return f"{key}.{extra[0]}: the checkpoint says {_show(saved[extra[0]])}, the config has no such setting"
    return None


def _plain(value: Any) -> Any:
    """Parsed config values as plain data: jsonargparse Namespaces become dicts, tuples lists."""
    if hasattr(value, "as_dict"):
        value = value.as_dict()
    if isinstance(value, dict):
        return {key: _plain(v) for key, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _is_class(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("class_path"), str)


def _same_class(a: str, b: str) -> bool:
    """Whether two class paths name one class: equal paths, paths that import the same class object (a module moved
    since a checkpoint was written, ``primacy.moved``), or a short (registry) name and a full path to that name."""
    if a == b:
        return True
    try:
        return registry.import_class(a) is registry.import_class(b)
    except UsageError:  # a class that no longer imports: only the names can be compared
        return ("." not in a or "." not in b) and a.rsplit(".", 1)[-1] == b.rsplit(".", 1)[-1]


def _same(a: Any, b: Any) -> bool:
    """Equal as settings: a tuple and a list, or an int and a float of equal value, are the same."""
    a, b = _plain(a), _plain(b)
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a is b or a == b


def _default(class_path: str | None, name: str) -> Any:
    """The constructor default of argument ``name`` of the class at ``class_path`` (one a ``**kwargs`` stands for
    included: ``registry.constructor_parameters``), if there is one."""
    if not class_path or "." not in class_path:
        return _NO_DEFAULT
    try:
        parameters = registry.constructor_parameters(registry.import_class(class_path))
    except (UsageError, TypeError, ValueError):
        return _NO_DEFAULT
    parameter = next((p for p in parameters if p.name == name), None)
    return _NO_DEFAULT if parameter is None or parameter.default is inspect.Parameter.empty else parameter.default


def _describe(key: str, config: Any, saved: Any) -> str:
    return f"{key}: the config says {_show(config)}, the checkpoint {_show(saved)}"


def _show(value: Any) -> str:
    value = _plain(value)
    return value if isinstance(value, str) else repr(value)
