"""Module paths from before the package layout (issue 26), resolved to the modules that hold their classes now.

Configs, config.yaml files and checkpoints written before the move name classes by their old paths
(``primacy.model.SequenceModel``, ``primacy.free_recall_model.FreeRecallModel``, ...). Importing an old path returns
the new module itself, so ``primacy.model.SequenceModel is primacy.models.lists.SequenceModel``: a checkpoint matched
against a config, ``isinstance`` and ``load_from_checkpoint`` see one class whichever path named it. The first import
of an old path warns once (FutureWarning, shown to users by default) with the path to write instead.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from types import ModuleType

MOVED = {  # old module -> the module that holds its public names now
    "primacy.model": "primacy.models.lists",
    "primacy.free_recall_model": "primacy.models.free_recall",
    "primacy.language_model": "primacy.models.language",
    "primacy.optim": "primacy.models.optim",
    "primacy.tasks.recall": "primacy.tasks.associative_recall",
    "primacy.analysis.cmr_grid": "primacy.analysis.cmr.grid",
    "primacy.analysis.fits": "primacy.analysis.cmr.fits",
    "primacy.pretrained": "primacy.analysis.pretrained",
    "primacy.icl_plots": "primacy.figures.heads",
    "primacy.paper_figures": "primacy.workflows.pages",
    "primacy.results": "primacy.rundir.results",
    "primacy.checkpoints": "primacy.rundir.checkpoints",
    "primacy.resume": "primacy.rundir.resume",
    "primacy.runs": "primacy.rundir.runs",
    "primacy.aggregate": "primacy.workflows.aggregate",
    "primacy.launchers": "primacy.workflows.launchers",
    "primacy.sources": "primacy.workflows.sources",
    "primacy.reproduce": "primacy.cli.reproduce",
    "primacy.analyze": "primacy.cli.analyze",
    "primacy.lightning_cli": "primacy.cli.lightning",
    "primacy.usage": "primacy.cli.help",
    "primacy.parse_errors": "primacy.cli.parse_errors",
    "primacy.console": "primacy.cli.console",
}


def current_path(class_path: str) -> str:
    """``class_path`` with a moved module replaced by its new one (``primacy.model.SequenceModel`` ->
    ``primacy.models.lists.SequenceModel``); any other path unchanged."""
    module, _, name = class_path.rpartition(".")
    return f"{MOVED[module]}.{name}" if module in MOVED else class_path


class _OldPaths(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the modules of ``MOVED`` and loads each as its new module (the same object, not a copy)."""

    def find_spec(self, fullname: str, path=None, target=None) -> importlib.machinery.ModuleSpec | None:
        return importlib.util.spec_from_loader(fullname, self) if fullname in MOVED else None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        new = MOVED[spec.name]
        warnings.warn(f"{spec.name} is now {new}: update the class_path of configs that name it", FutureWarning,
                      stacklevel=2)
        module = importlib.import_module(new)
        spec.loader_state = module.__spec__  # the import system sets __spec__ to the old name's: exec puts it back
        return module

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = module.__spec__.loader_state


def install() -> None:
    """Make the old paths importable (called by ``primacy/__init__.py``; installing twice adds one finder)."""
    if not any(isinstance(finder, _OldPaths) for finder in sys.meta_path):
        sys.meta_path.append(_OldPaths())
