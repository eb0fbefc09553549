"""Where a run's files live: everything under one directory, the trainer's default_root_dir. ``RunDir`` names every
file and folder of it, and the folders the analyses of a model write (``analyze icl``, ``ablation``, ``probes``: a
run keeps them as its icl/, ablation/ and probes/; ``--out`` puts one anywhere) name theirs: ``HeadsDir``,
``AblationDir``, ``ProbesDir``. No other module spells these names (tests/test_layout.py checks)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:  # the launchers name runs by their directories in processes that never import Lightning (4-8 s)
    from typing import Self  # Python 3.11's; annotations only

    import lightning as L

SUMMARY = "summary.json"  # the summary of a run's results, of an aggregate and of an analysis directory
DT_HISTORY = "dt_history.npz"  # the trackers' files in results/ (primacy.callbacks.trackers)
TOKEN_DT, HEAD_HISTORY = "token_dt.npz", "head_history.npz"
ACCURACY_ARRAYS = "accuracy.npz"  # the kinds of result's own files: primacy.rundir.kinds
FREE_RECALL_ARRAYS, FREE_RECALL_TABLE = "free_recall.npz", "free_recall.csv"
LAUNCH_STATE = "state.json"  # in logs/: a launcher's record of the run (primacy.workflows.launchers)


@dataclass(frozen=True)
class RunDir:
    """A run directory:

    ``config.yaml``            the full resolved config (``config``)
    ``checkpoints/last.ckpt``  the latest checkpoint (``last_checkpoint``), numbered ones beside it (``checkpoints``)
    ``results/``               what the test wrote (``results``): ``summary.json`` (``summary``) and the files of the
                               model's kind of result (``primacy.rundir.kinds``); what the trackers wrote at the end
                               of training: ``dt_history.npz`` (``dt_history``), ``token_dt.npz`` (``token_dt``),
                               ``head_history.npz`` (``head_history``), with their figures and the latest validation
                               heatmap (``figure``)
    ``icl/``, ``ablation/``    the analyses ``primacy reproduce induction`` makes of the run's checkpoints
    ``probes/``                ``analyze probes`` of the last checkpoint, as ``primacy reproduce weights`` makes it
    ``logs/``                  what a launcher started (``logs``): the run's output, ``state.json`` (``launch_state``)
    """

    path: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))

    @classmethod
    def of(cls, trainer: L.Trainer) -> RunDir:
        """A trainer's run directory: its default_root_dir."""
        return cls(Path(trainer.default_root_dir))

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def config(self) -> Path:
        return self.path / "config.yaml"

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    @property
    def last_checkpoint(self) -> Path:
        return self.checkpoints / "last.ckpt"

    def numbered_checkpoints(self) -> list[Path]:
        """Every checkpoint file of the run (last.ckpt included), sorted by name."""
        return sorted(self.checkpoints.glob("*.ckpt"))

    @property
    def kept_as_results(self) -> bool:
        """Whether the run was kept as its results only: its test's summary is there and its checkpoints folder was
        removed (to save space, or to publish it, as results/ does). It counts as done; it cannot resume."""
        return self.summary.is_file() and not self.checkpoints.exists()

    @property
    def results(self) -> Path:
        return self.path / "results"

    @property
    def summary(self) -> Path:
        return self.results / SUMMARY

    @property
    def dt_history(self) -> Path:
        return self.results / DT_HISTORY

    @property
    def token_dt(self) -> Path:
        return self.results / TOKEN_DT

    @property
    def head_history(self) -> Path:
        return self.results / HEAD_HISTORY

    def figure(self, stem: str) -> Path:
        """A figure of the run's results (``dt_trajectory``, ``val_heatmap``, ...), without its format's suffix."""
        return self.results / stem

    @property
    def logs(self) -> Path:
        """What ``primacy reproduce`` launched: the run's output and its launcher's state."""
        return self.path / "logs"

    @property
    def launch_state(self) -> Path:
        """The launcher's record of the run: running (pid, host, heartbeat) or exited (code, outcome, seconds)."""
        return self.logs / LAUNCH_STATE

    @property
    def icl(self) -> HeadsDir:
        return HeadsDir.inside(self.path)

    @property
    def ablation(self) -> AblationDir:
        return AblationDir.inside(self.path)

    @property
    def probes(self) -> ProbesDir:
        return ProbesDir.inside(self.path)

    @property
    def selection(self) -> SelectionDir:
        return SelectionDir.inside(self.path)

    def is_tested(self) -> bool:
        """Whether a test has written the run's results (its summary.json exists)."""
        return self.summary.is_file()

    def planned_steps(self) -> int | None:
        """The trainer.max_steps the run was started with (its config.yaml); None without the file or the key, or
        when the file does not parse."""
        import yaml

        try:
            trainer = (yaml.safe_load(self.config.read_text()) or {}).get("trainer") or {}
        except (OSError, yaml.YAMLError, AttributeError):
            return None
        planned = trainer.get("max_steps") if isinstance(trainer, dict) else None
        return planned if isinstance(planned, int) else None

    def test_args(self) -> tuple[str, ...]:
        """The ``primacy`` arguments that test the run's latest checkpoint again (rewriting its results), here: its
        config.yaml names the directory it was trained in, which a moved or copied run is no longer in."""
        return ("test", "--config", str(self.config), "--ckpt_path", str(self.last_checkpoint),
                "--trainer.default_root_dir", str(self.path))


@dataclass(frozen=True)
class AnalysisDir:
    """A folder one analysis writes (``FILES``); a run keeps it in its own folder as ``FOLDER``."""

    path: Path
    FOLDER: ClassVar[str]
    FILES: ClassVar[tuple[str, ...]]

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))

    @classmethod
    def inside(cls, directory: str | Path) -> Self:
        """The analysis a run (or a panel's mean over seeds) keeps: its ``FOLDER``."""
        return cls(Path(directory) / cls.FOLDER)

    def file(self, index: int) -> Path:
        return self.path / self.FILES[index]


@dataclass(frozen=True)
class HeadsDir(AnalysisDir):
    """``analyze icl`` (or ``analyze published``) of one checkpoint: ``heads.csv`` (a row per head: scores and
    fits), ``summary.json`` and ``lag_crps.npz`` (every head's lag-CRP and fitted curves). Of several checkpoints of
    one model: one such folder per checkpoint (``step``) and ``emergence.csv`` (a row per checkpoint) beside them."""

    FOLDER: ClassVar[str] = "icl"
    FILES: ClassVar[tuple[str, ...]] = ("heads.csv", SUMMARY, "lag_crps.npz")  # one checkpoint's
    SERIES_FILES: ClassVar[tuple[str, ...]] = ("emergence.csv",)  # a series'

    @property
    def heads(self) -> Path:
        return self.file(0)

    @property
    def summary(self) -> Path:
        return self.file(1)

    @property
    def lag_crps(self) -> Path:
        return self.file(2)

    @property
    def emergence(self) -> Path:
        return self.path / self.SERIES_FILES[0]

    @property
    def emergence_figure(self) -> Path:
        """The emergence figure's path without its format's suffix."""
        return self.emergence.with_suffix("")

    def step(self, step: int) -> HeadsDir:
        """The analysis of the series' checkpoint at ``step``."""
        return HeadsDir(self.path / f"step{step}")


@dataclass(frozen=True)
class AblationDir(AnalysisDir):
    """``analyze ablation`` of one checkpoint: ``ablation.json`` (the ICL scores intact, with the top heads ablated
    and with random ones) and its figure (``figure``: without its format's suffix)."""

    FOLDER: ClassVar[str] = "ablation"
    FILES: ClassVar[tuple[str, ...]] = ("ablation.json",)

    @property
    def result(self) -> Path:
        return self.file(0)

    @property
    def figure(self) -> Path:
        return self.file(0).with_suffix("")


@dataclass(frozen=True)
class ProbesDir(AnalysisDir):
    """``analyze probes`` of one checkpoint (or their mean over seeds): ``probes.csv`` (a row per head, probe and
    query position), ``probes.npz`` (the same as arrays, with the study-position profiles), ``summary.json`` and the
    figure (``figure``: without its format's suffix)."""

    FOLDER: ClassVar[str] = "probes"
    FILES: ClassVar[tuple[str, ...]] = ("probes.csv", "probes.npz", SUMMARY)

    @property
    def table(self) -> Path:
        return self.file(0)

    @property
    def arrays(self) -> Path:
        return self.file(1)

    @property
    def summary(self) -> Path:
        return self.file(2)

    @property
    def figure(self) -> Path:
        return self.file(1).with_suffix("")


@dataclass(frozen=True)
class SelectionDir(AnalysisDir):
    """The selection step Δ of a run's last checkpoint on the first validation sequences, by role (new or repeated
    token, old or new probe; ``primacy.workflows.paper.selection``): ``dt_by_role.npz``, kept so that a page draws it
    again from a run kept without checkpoints."""

    FOLDER: ClassVar[str] = "selection"
    FILES: ClassVar[tuple[str, ...]] = ("dt_by_role.npz",)

    @property
    def arrays(self) -> Path:
        return self.file(0)


def run_dir(trainer: L.Trainer) -> Path:
    """A run's directory is the trainer's default_root_dir (``RunDir.of(trainer).path``; the old name, which
    ``primacy.callbacks.run_dir`` resolves to)."""
    return RunDir.of(trainer).path


def last_checkpoint(root: Path) -> Path:
    """``RunDir(root).last_checkpoint``: the old name, which ``primacy.resume.last_checkpoint`` resolves to."""
    return RunDir(root).last_checkpoint
