"""Module paths from before the package layout (issue 26), resolved to the modules that hold their names now.

Configs, config.yaml files and checkpoints written before the move name classes by their old paths
(``primacy.model.SequenceModel``, ``primacy.console.LineProgress``, ...). An old module that moved whole imports as
its new module itself (``MOVED``); one whose names went to several modules imports as a small module whose attributes
are looked up where each name is now (``SPLIT``). Either way an old path gives the object of now, not a copy:
``primacy.model.SequenceModel is primacy.models.lists.SequenceModel``, so a checkpoint matched against a config,
``isinstance`` and ``load_from_checkpoint`` see one class whichever path named it. An old module warns once on its
first import, an old name of a split module on its first use (FutureWarning, shown to users by default), with the
path to write instead. An old ``python -m`` entry point runs its command after such a warning (``forward_command``).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from types import CodeType, ModuleType
from typing import Any

MOVED = {  # old module -> the module that holds its public names now
    "primacy.model": "primacy.models.lists",
    "primacy.free_recall_model": "primacy.models.free_recall",
    "primacy.language_model": "primacy.models.language",
    "primacy.optim": "primacy.models.optim",
    "primacy.tasks.recall": "primacy.tasks.associative_recall",
    "primacy.analysis.cmr_grid": "primacy.analysis.behaviour.cmr.grid",
    "primacy.analysis.fits": "primacy.analysis.behaviour.cmr.fits",
    "primacy.pretrained": "primacy.analysis.heads.pretrained",
    # issue 39: analysis/ split into behaviour/ and heads/ (primacy.analysis.heads, the module, in PACKAGES)
    **{f"primacy.analysis.{name}": f"primacy.analysis.behaviour.{name}"
       for name in ("serial_position", "free_recall", "comparison", "cmr", "cmr.simulate", "cmr.reference",
                    "cmr.closed_form", "cmr.grid", "cmr.fits")},
    "primacy.analysis.head_model": "primacy.analysis.heads.model",
    "primacy.analysis.icl": "primacy.analysis.heads.analysis",
    **{f"primacy.analysis.{name}": f"primacy.analysis.heads.{name}"
       for name in ("ablation", "probes", "emergence", "pretrained", "natural_text")},
    "primacy.icl_plots": "primacy.figures.heads",
    "primacy.paper_figures": "primacy.workflows.paper.pages",
    "primacy.results": "primacy.rundir.results",
    "primacy.checkpoints": "primacy.rundir.checkpoints",
    "primacy.resume": "primacy.rundir.resume",
    "primacy.runs": "primacy.rundir.runs",
    "primacy.aggregate": "primacy.workflows.aggregate",
    "primacy.launchers": "primacy.workflows.launchers",
    "primacy.sources": "primacy.workflows.induction.sources",
    "primacy.reproduce": "primacy.cli.reproduce",
    "primacy.analyze": "primacy.cli.analyze",
    "primacy.lightning_cli": "primacy.cli.lightning",
    "primacy.usage": "primacy.cli.help",
    "primacy.parse_errors": "primacy.cli.parse_errors",
    "primacy.console": "primacy.cli.console",
    # issue 70: workflows/ by study (primacy.workflows.atlas and .humans, modules then, are packages now: PACKAGES)
    **{f"primacy.workflows.{old}": f"primacy.workflows.{new}" for old, new in (
        ("atlas_cost", "atlas.cost"), ("atlas_files", "atlas.spec"), ("atlas_search", "atlas.knob_search"),
        *((name, f"induction.{name}") for name in ("analyses", "probes", "published", "published_heads", "sources",
                                                   "hf_models", "texts")),
        *((name, f"humans.{name}") for name in ("people", "cmr_fits", "cmr_grid")),
        *((name, f"paper.{name}") for name in ("pages", "reproduce", "figure_files", "selection")))},
}

_FIGURES = {  # primacy.plots, split by kind of figure
    "primacy.figures.style": ["describe", "fixed", "recall_line", "distractor_label"],
    "primacy.figures.accuracy": ["heatmap", "fig3_page", "delay_heatmap", "contiguity"],
    "primacy.figures.free_recall": ["free_recall", "cmr_overlays"],
    "primacy.figures.dt": ["dt_trajectory", "dt_histogram", "dt_histograms", "fig4_page"],
    "primacy.figures.kernels": ["kernel_discrepancy"],
}

_HF_LOADING = ("DTYPES", "DEVICES", "INSTALL", "REMOTE_CODE", "transformers_module", "check_source", "load_pretrained",
               "checkpoint_name_step")  # primacy.pretrained's names that load a model, in
# primacy.workflows.induction.hf_models

_SLURM = ("SlurmOptions", "slurm_parameters", "check_with_slurm", "submit", "SLURM_ENDED", "SLURM_WAITING",
          "slurm_state", "requeued")  # the launchers' SLURM half, in primacy.workflows.slurm since issue 73

_RUNS = ("CONFIGS", "STATES", "Status", "status", "count_states", "describe_states", "process_count")  # a run's names
# that primacy.workflows.reproduce held, in primacy.workflows.runs since issue 70

_ATLAS = ("AtlasRun", "extrapolation_of", "value_dir", "RowState", "Planner", "slowest_first", "mean_run_seconds",
          "measured", "INDEX_COLUMNS", "draw", "atlas_table", "table_columns")  # primacy.workflows.atlas's, a module
# until issue 70, in primacy.workflows.atlas.planner now
_HUMANS = ("PEOPLE", "Comparison", "person_curves", "run_curves", "compare", "write", "FitResults", "grid_cells",
           "fit_groups", "grid_groups", "fit_results", "TABLE_HEADER", "RMSE_CURVES", "markdown", "run_groups")
# primacy.workflows.humans's, a module until issue 70, in primacy.workflows.humans.page now

COMMANDS = {"primacy.analysis.cmr_grid": "cmr_grid", "primacy.workflows.cmr_grid": "cmr_grid"}  # old modules whose
# ``python -m`` was a command now primacy's

SPLIT = {  # old module -> {public name that its MOVED module does not hold: the name's path now}
    "primacy.model": {"logs_this_step": "primacy.models.base.logs_this_step"},
    "primacy.analysis.cmr_grid": {"main": "primacy.cli.cmr_grid.command"},  # main(argv) was the command
    "primacy.workflows.cmr_grid": {},  # its names all in its MOVED module; split, so that once imported its old path
    # still runs its command (COMMANDS) under ``python -m``, as the old module split above does
    "primacy.resume": {"last_checkpoint": "primacy.rundir.layout.last_checkpoint"},
    "primacy.reproduce": {"config_dir": "primacy.workflows.runs.config_dir",
                          "reproduce_command": "primacy.cli.reproduce.command",
                          "Run": "primacy.workflows.runs.Run", "Status": "primacy.workflows.runs.Status"},
    "primacy.analyze": {"write_icl": "primacy.workflows.induction.analyses.write_icl",
                        "read_heads": "primacy.workflows.induction.analyses.read_heads",
                        "write_emergence": "primacy.workflows.induction.analyses.write_emergence",
                        "write_probes": "primacy.workflows.induction.analyses.write_probes",
                        "analyze_command": "primacy.cli.analyze.command"},
    "primacy.usage": {"load_models_and_tasks": "primacy.registry.load_all"},
    "primacy.workflows.reproduce": {name: f"primacy.workflows.runs.{name}" for name in _RUNS},
    "primacy.launchers": {name: f"primacy.workflows.slurm.{name}" for name in _SLURM},
    "primacy.console": {"LineProgress": "primacy.cli.progress.LineProgress",
                        "wants_line_progress": "primacy.cli.progress.wants_line_progress"},
    "primacy.plots": {name: f"{module}.{name}" for module, names in _FIGURES.items() for name in names},
    # issue 39: loading a Hugging Face model is I/O, in workflows; the heads it yields stay in analysis
    **{old: {name: f"primacy.workflows.induction.hf_models.{name}" for name in _HF_LOADING}
       for old in ("primacy.pretrained", "primacy.analysis.pretrained")},
}


# Packages that kept an old module's path (``primacy.callbacks`` and ``primacy.cli`` were modules): the old names
# their modules no longer hold, resolved by each package's ``__getattr__`` through ``old_name``.
PACKAGES = {
    "primacy.callbacks": {"run_dir": "primacy.rundir.layout.run_dir",
                          "rng_states": "primacy.callbacks.checkpointing.rng_states",
                          "set_rng_states": "primacy.callbacks.checkpointing.set_rng_states",
                          "run_settings": "primacy.rundir.settings.run_settings"},
    "primacy.cli": {"aggregate_command": "primacy.cli.aggregate.command",
                    "kernels_command": "primacy.cli.kernels.command",
                    "models_command": "primacy.cli.models.command"},
    "primacy.workflows.launchers": {name: f"primacy.workflows.slurm.{name}" for name in _SLURM},  # a module, not a
    # package: its __getattr__ resolves them the same way
    "primacy.workflows.atlas": {**{name: f"primacy.workflows.atlas.planner.{name}" for name in _ATLAS},
                                **{name: f"primacy.workflows.atlas.knob_search.{name}"
                                   for name in ("Search", "search", "seeds_accuracy")}},
    "primacy.workflows.humans": {name: f"primacy.workflows.humans.page.{name}" for name in _HUMANS},
    "primacy.rundir.runs": {name: f"primacy.contract.{name}" for name in ("check_pairing", "task_class_and_settings")},
    # a module, whose __getattr__ resolves the model-task contract's names, in primacy.contract since issue 70
    "primacy.analysis.heads": {name: f"primacy.analysis.heads.scores.{name}" for name in (
        "QUERY_WINDOWS", "shortest_prompt", "second_repeat", "induction_score", "duplicate_token_score",
        "previous_token_score", "lag_profile", "attention_lag_crp", "copying_score", "unembed_embed",
        "ov_copying_score")},
}


def old_name(package: str, name: str) -> Any:
    """An old name of ``package`` (``PACKAGES``): the object where it is now, with a FutureWarning naming its path;
    AttributeError for any other name, as a module's ``__getattr__`` must raise."""
    new = PACKAGES.get(package, {}).get(name)
    if new is None:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    warnings.warn(f"{package}.{name} is now {new}: name it by its new path", FutureWarning, stacklevel=3)
    return _resolve(new)


def forward_command(old: str, command: str, args: list[str]) -> None:
    """``python -m old ARGS``, a module's entry point from before its work became ``primacy command``: a
    FutureWarning naming the command to type instead, then that command run with the same arguments (its exit
    status, its one-line errors)."""
    warnings.warn(f"python -m {old} is now primacy {command}: run primacy {command} {' '.join(args)}".rstrip(),
                  FutureWarning, stacklevel=2)
    _resolve("primacy.cli.main")([command, *args])


def current_path(class_path: str) -> str:
    """``class_path`` with an old module replaced by the one that holds the name now: ``primacy.model.SequenceModel``
    -> ``primacy.models.lists.SequenceModel``, ``primacy.console.LineProgress`` ->
    ``primacy.cli.progress.LineProgress``; any other path unchanged."""
    module, _, name = class_path.rpartition(".")
    if name in SPLIT.get(module, {}):
        return SPLIT[module][name]
    if name in PACKAGES.get(module, {}):
        return PACKAGES[module][name]
    return f"{MOVED[module]}.{name}" if module in MOVED else class_path


def _resolve(path: str) -> Any:
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


class _SplitModule(ModuleType):
    """An old module of ``SPLIT``: each name resolves to the object where it is now (kept after its first use)."""

    def __getattr__(self, name: str) -> Any:
        old = f"{self.__name__}.{name}"
        new = current_path(old)
        if new == old or name.startswith("__"):  # not an old name; dunders: the import system probes for them
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")
        value = _resolve(new)
        warnings.warn(f"{old} is now {new}: name it by its new path (in a config's class_path too)", FutureWarning,
                      stacklevel=2)
        setattr(self, name, value)  # later uses find it here, without a second warning
        return value

    def __dir__(self) -> list[str]:
        moved_names = dir(importlib.import_module(MOVED[self.__name__])) if self.__name__ in MOVED else []
        return sorted({*super().__dir__(), *SPLIT[self.__name__], *moved_names})


class _OldPaths(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the old modules: one of ``SPLIT`` loads as a ``_SplitModule``, one of ``MOVED`` as its new module (the
    same object, not a copy)."""

    def find_spec(self, fullname: str, path=None, target=None) -> importlib.machinery.ModuleSpec | None:
        return importlib.util.spec_from_loader(fullname, self) if fullname in MOVED or fullname in SPLIT else None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        if spec.name in SPLIT:
            return _SplitModule(spec.name, f"{spec.name} from before issue 26: its names are elsewhere now")
        new = MOVED[spec.name]
        warnings.warn(f"{spec.name} is now {new}: update the class_path of configs that name it", FutureWarning,
                      stacklevel=2)
        module = importlib.import_module(new)
        spec.loader_state = module.__spec__  # the import system sets __spec__ to the old name's: exec puts it back
        return module

    def exec_module(self, module: ModuleType) -> None:
        if not isinstance(module, _SplitModule):
            module.__spec__ = module.__spec__.loader_state

    def get_code(self, fullname: str) -> CodeType | None:
        """What ``python -m OLD ARGS`` runs: an old entry point's command after its warning (``forward_command``);
        None for another old path (Python then says that it has no code to run)."""
        if fullname not in COMMANDS:
            return None
        return compile(f"import sys\nfrom primacy.moved import forward_command\n"
                       f"forward_command({fullname!r}, {COMMANDS[fullname]!r}, sys.argv[1:])\n", fullname, "exec")


def install() -> None:
    """Make the old paths importable (called by ``primacy/__init__.py``; installing twice adds one finder)."""
    if not any(isinstance(finder, _OldPaths) for finder in sys.meta_path):
        sys.meta_path.insert(0, _OldPaths())  # before the path finder: a moved package's submodules are old paths too
