"""Backbone discovery through the entry-point group ``primacy.backbones`` (entry name == class name)."""

from __future__ import annotations

import difflib
import os
from functools import cache
from importlib.metadata import entry_points

from primacy.errors import UsageError

GROUP = "primacy.backbones"
BUILTINS_ONLY = "PRIMACY_BUILTINS_ONLY"  # set to 1 to ignore backbones from other distributions


@cache
def _entry_points() -> dict:
    found = {}
    for ep in entry_points(group=GROUP):
        dist = ep.dist.name if ep.dist is not None else "?"
        if os.environ.get(BUILTINS_ONLY) == "1" and dist != "primacy":
            continue
        if ep.name in found and found[ep.name].value != ep.value:
            raise UsageError(
                f"backbone name {ep.name!r} is registered twice ({found[ep.name].value} and {ep.value}): "
                "uninstall one of the two distributions"
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


def load_all() -> list[type]:
    """Import every registered backbone, so their short class names resolve in configs."""
    return [get(name) for name in names()]
