"""Backbone discovery through the entry-point group ``primacy.backbones`` (entry name == class name)."""

from __future__ import annotations

import difflib
import importlib
import os
from functools import cache
from importlib.metadata import entry_points

from primacy.errors import UsageError

GROUP = "primacy.backbones"
BUILTINS_ONLY = "PRIMACY_BUILTINS_ONLY"  # set to 1 to ignore backbones from other distributions
# Backbones that live in separate distributions: asking for one that is not installed says what to install.
KNOWN_PLUGINS = {"MambaBackbone": "primacy-mamba (pip install -e plugins/primacy-mamba from a primacy checkout)"}


def _dist(ep) -> str:
    return ep.dist.name if ep.dist is not None else "?"


@cache
def _entry_points() -> dict:
    found = {}
    for ep in entry_points(group=GROUP):
        if os.environ.get(BUILTINS_ONLY) == "1" and _dist(ep) != "primacy":
            continue
        if ep.name in found and found[ep.name].value != ep.value:
            first = found[ep.name]
            raise UsageError(
                f"backbone name {ep.name!r} is registered twice: by {_dist(first)} ({first.value}) and by "
                f"{_dist(ep)} ({ep.value}); uninstall one of the two distributions"
            )
        found[ep.name] = ep
    return found


def names() -> list[str]:
    """Registered backbone names, sorted."""
    return sorted(_entry_points())


def get(name: str) -> type:
    """The backbone class registered as ``name``; an unknown name is rejected with close matches."""
    from primacy.backbones.base import Backbone

    eps = _entry_points()
    if name not in eps and name in KNOWN_PLUGINS:
        raise UsageError(f"backbone {name!r} is provided by the plugin {KNOWN_PLUGINS[name]}, which is not installed")
    if name not in eps:
        close = difflib.get_close_matches(name, eps, n=3, cutoff=0.4)
        hint = f"did you mean {' or '.join(close)}? " if close else ""
        raise UsageError(f"backbone {name!r} is not registered: {hint}registered backbones: {', '.join(sorted(eps))}")
    try:
        cls = eps[name].load()
    except Exception as err:  # a plugin that fails to import is named, not swallowed
        raise UsageError(f"backbone {name!r} ({eps[name].value}) failed to import: {err}") from err
    if not (isinstance(cls, type) and issubclass(cls, Backbone)):
        raise UsageError(f"backbone {name!r} ({eps[name].value}) is not a subclass of primacy.backbones.Backbone")
    if cls.__name__ != name:
        raise UsageError(f"backbone entry point {name!r} points at class {cls.__name__!r}: the names must match")
    return cls


def describe() -> list[dict[str, str]]:
    """One row per registered backbone: name, distribution, entry point and the first line of its docstring.

    A backbone that fails to import is listed with the error instead of a description, so one broken plugin
    does not hide the others.
    """
    rows = []
    for name, ep in sorted(_entry_points().items()):
        try:
            doc = (get(name).__doc__ or "").strip().splitlines()
            summary = doc[0] if doc else ""
        except UsageError as err:
            summary = f"unusable: {err}"
        rows.append({"name": name, "distribution": _dist(ep), "entry_point": ep.value, "description": summary})
    return rows


def load_all() -> list[type]:
    """Import every registered backbone, so their short class names resolve in configs."""
    return [get(name) for name in names()]


def import_class(class_path: str) -> type:
    """The class at a dotted ``class_path``, or the backbone registered under a short name; UsageError otherwise."""
    module, _, name = class_path.rpartition(".")
    if not module:
        return get(name)
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as err:
        raise UsageError(f"class {class_path} cannot be imported: {err}") from None
