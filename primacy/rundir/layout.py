"""Where a run's files live: everything under one directory, the trainer's default_root_dir. ``RunDir`` names every
file and folder of it; no other module spells their names (tests/test_layout.py checks)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the launchers name runs by their directories in processes that never import Lightning (4-8 s)
    import lightning as L

SUMMARY = "summary.json"  # the summary of a run's results, of an aggregate and of an analysis directory
DT_HISTORY = "dt_history.npz"
ACCURACY_ARRAYS = "accuracy.npz"  # the kinds of result's own files: primacy.rundir.kinds
FREE_RECALL_ARRAYS, FREE_RECALL_TABLE = "free_recall.npz", "free_recall.csv"


@dataclass(frozen=True)
class RunDir:
    """A run directory:

    ``config.yaml``            the full resolved config (``config``)
    ``checkpoints/last.ckpt``  the latest checkpoint (``last_checkpoint``), numbered ones beside it (``checkpoints``)
    ``results/``               what the test wrote (``results``): ``summary.json`` (``summary``) and the files of the
                               model's kind of result (``primacy.rundir.kinds``), ``dt_history.npz`` (``dt_history``)
    ``icl/``, ``ablation/``    the analyses ``primacy reproduce induction`` makes of the run's checkpoints
    ``probes/``                ``analyze probes`` of the last checkpoint, as ``primacy reproduce weights`` makes it
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
    def logs(self) -> Path:
        """What ``primacy reproduce`` launched: the run's output and its launcher's state."""
        return self.path / "logs"

    @property
    def icl(self) -> Path:
        return self.path / "icl"

    @property
    def ablation(self) -> Path:
        return self.path / "ablation"

    @property
    def probes(self) -> Path:
        return self.path / "probes"

    def is_tested(self) -> bool:
        """Whether a test has written the run's results (its summary.json exists)."""
        return self.summary.is_file()

    def test_args(self) -> tuple[str, ...]:
        """The ``primacy`` arguments that test the run's latest checkpoint again (rewriting its results), here: its
        config.yaml names the directory it was trained in, which a moved or copied run is no longer in."""
        return ("test", "--config", str(self.config), "--ckpt_path", str(self.last_checkpoint),
                "--trainer.default_root_dir", str(self.path))


def run_dir(trainer: L.Trainer) -> Path:
    """A run's directory is the trainer's default_root_dir (``RunDir.of(trainer).path``; the old name, which
    ``primacy.callbacks.run_dir`` resolves to)."""
    return RunDir.of(trainer).path


def last_checkpoint(root: Path) -> Path:
    """``RunDir(root).last_checkpoint``: the old name, which ``primacy.resume.last_checkpoint`` resolves to."""
    return RunDir(root).last_checkpoint
