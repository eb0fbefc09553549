"""Every class a config can name by its short name, found through entry points (entry name == class name): backbones
(group ``primacy.backbones``), models (``primacy.models``) and tasks (``primacy.tasks``). primacy registers its own
in pyproject.toml; a plugin registers more the same way, so no list in the code can forget one."""

from __future__ import annotations

import difflib
import importlib
import os
from functools import cache
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from primacy.errors import UsageError

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: a plugin that is not installed is then only "not registered"
    tomllib = None

GROUPS = {"backbone": "primacy.backbones", "model": "primacy.models", "task": "primacy.tasks",
          "result": "primacy.results"}  # kinds of result: primacy.rundir.kinds
GROUP = GROUPS["backbone"]
BASES = {"backbone": "primacy.backbones.Backbone", "model": "lightning.LightningModule",
         "task": "lightning.LightningDataModule", "result": "primacy.rundir.kinds.ResultKind"}
BUILTINS_ONLY = "PRIMACY_BUILTINS_ONLY"  # set to 1 to ignore backbones from other distributions
# The plugins bundled with a primacy checkout, each a distribution of its own: asking for a class that one of them
# declares, when it is not installed, says what to install. Absent when primacy is installed from a wheel.
CHECKOUT_PLUGINS = Path(__file__).resolve().parents[1] / "plugins"


def _dist(ep) -> str:
    return ep.dist.name if ep.dist is not None else "?"


def _base(kind: str) -> type:
    """The class every registered class of ``kind`` must subclass."""
    if kind == "backbone":
        from primacy.backbones.base import Backbone

        return Backbone
    if kind == "result":
        return object  # primacy.rundir.kinds.get checks ResultKind: the registry sits below rundir
    import lightning as L

    return L.LightningModule if kind == "model" else L.LightningDataModule


@cache
def checkout_plugins() -> dict[tuple[str, str], str]:
    """{(kind, name): the distribution that declares it, with how to install it} for every entry point that the
    checkout's ``plugins/*/pyproject.toml`` declare in primacy's groups; empty outside a checkout. An unreadable file
    gives no hints rather than an error: it only serves to word one."""
    kinds = {group: kind for kind, group in GROUPS.items()}
    hints: dict[tuple[str, str], str] = {}
    for path in sorted(CHECKOUT_PLUGINS.glob("*/pyproject.toml")) if tomllib is not None else ():
        try:
            project = tomllib.loads(path.read_text()).get("project", {})
        except (OSError, tomllib.TOMLDecodeError):
            continue
        where = f"pip install -e plugins/{path.parent.name} from a primacy checkout"
        for group, declared in project.get("entry-points", {}).items():
            for name in declared if group in kinds else ():
                hints[kinds[group], name] = f"{project.get('name', path.parent.name)} ({where})"
    return hints


@cache
def _entry_points(kind: str = "backbone") -> dict:
    found = {}
    for ep in entry_points(group=GROUPS[kind]):
        if os.environ.get(BUILTINS_ONLY) == "1" and _dist(ep) != "primacy":
            continue
        if ep.name in found and found[ep.name].value != ep.value:
            first = found[ep.name]
            raise UsageError(
                f"{kind} name {ep.name!r} is registered twice: by {_dist(first)} ({first.value}) and by "
                f"{_dist(ep)} ({ep.value}); uninstall one of the two distributions"
            )
        found[ep.name] = ep
    return found


def plugin_packages() -> list[str]:
    """The top-level packages of every registered class that another distribution than primacy provides."""
    return sorted({ep.value.split(":")[0].split(".")[0] for kind in GROUPS for ep in _entry_points(kind).values()
                   if _dist(ep) != "primacy"})


def names(kind: str = "backbone") -> list[str]:
    """Registered names of ``kind`` (backbone, model or task), sorted."""
    return sorted(_entry_points(kind))


def closest(name: str, kind: str = "backbone", n: int = 3, cutoff: float = 0.4) -> list[str]:
    """The registered names of ``kind`` closest to ``name`` (to the class name of a dotted path), best first."""
    return difflib.get_close_matches(name.rpartition(".")[2], names(kind), n=n, cutoff=cutoff)


def get(name: str, kind: str = "backbone") -> type:
    """The class of ``kind`` registered as ``name``; an unknown name is rejected with close matches."""
    base = _base(kind)
    eps = _entry_points(kind)
    plugin = checkout_plugins().get((kind, name))
    if name not in eps and plugin is not None:
        raise UsageError(f"{kind} {name!r} is provided by the plugin {plugin}, which is not installed")
    if name not in eps:
        close = closest(name, kind)
        hint = f"did you mean {' or '.join(close)}? " if close else ""
        raise UsageError(f"{kind} {name!r} is not registered: {hint}registered {kind}s: {', '.join(sorted(eps))}")
    try:
        cls = eps[name].load()
    except Exception as err:  # a plugin that fails to import is named, not swallowed
        raise UsageError(f"{kind} {name!r} ({eps[name].value}) failed to import: {err}") from err
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise UsageError(f"{kind} {name!r} ({eps[name].value}) is not a subclass of {BASES[kind]}")
    if cls.__name__ != name:
        raise UsageError(f"{kind} entry point {name!r} points at class {cls.__name__!r}: the names must match")
    return cls


def describe(kind: str = "backbone") -> list[dict[str, str]]:
    """One row per registered class of ``kind``: name, distribution, entry point and the first line of its docstring.

    A backbone that fails to import is listed with the error instead of a description, so one broken plugin
    does not hide the others.
    """
    rows = []
    for name, ep in sorted(_entry_points(kind).items()):
        try:
            doc = (get(name, kind).__doc__ or "").strip().splitlines()
            summary = doc[0] if doc else ""
        except UsageError as err:
            summary = f"unusable: {err}"
        rows.append({"name": name, "distribution": _dist(ep), "entry_point": ep.value, "description": summary})
    return rows


def load_all() -> list[type]:
    """Import every registered backbone, model and task, so their short class names resolve in configs."""
    return [get(name, kind) for kind in GROUPS for name in names(kind)]


def import_class(class_path: str) -> type:
    """The class at a dotted ``class_path`` (a module moved since, ``primacy.moved``, included), or the backbone, model
    or task registered under a short name; UsageError otherwise."""
    module, _, name = class_path.rpartition(".")
    if not module:
        known = [kind for kind in GROUPS if name in _entry_points(kind)]
        known += [kind for kind, plugin_name in checkout_plugins() if plugin_name == name]  # not installed
        kind = known[0] if known else "backbone"
        return get(name, kind)
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as err:
        raise UsageError(f"class {class_path} cannot be imported: {err}") from None


def constructor_parameters(cls: type) -> list[Any]:
    """The constructor parameters of ``cls`` as the CLI sees them: its signature's, with the parameters of whatever a
    ``**kwargs`` is handed on to in its place (a model's ``**optimiser``: ``primacy.models.optim.Optimiser``'s), each
    with ``name``, ``kind``, ``annotation``, ``default`` and ``doc`` (its docstring line, or None). It asks
    jsonargparse's resolver, the one LightningCLI builds a class's options with (it has no public name), so help,
    error messages and checks list exactly the options a config can set."""
    from jsonargparse._parameter_resolvers import get_signature_parameters

    return list(get_signature_parameters(cls, logger=False))
