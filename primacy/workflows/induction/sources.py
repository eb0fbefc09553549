"""Where ``primacy analyze icl|ablation`` read a model from: a checkpoint of a run trained here, or a pretrained
Hugging Face model (a hub id or a local directory, at a revision)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from primacy.analysis.heads.model import HeadModel, head_model
from primacy.analysis.heads.pretrained import PretrainedHeads, PretrainedMamba
from primacy.errors import UsageError
from primacy.rundir.checkpoints import checkpoint_step
from primacy.rundir.runs import load_run
from primacy.workflows.induction.hf_models import check_source, checkpoint_name_step, load_pretrained

PAPER_PROMPT_ITEMS = 100  # n of Ji-An et al.'s prompts of pretrained models (of their 100 most frequent tokens)


@dataclass(frozen=True)
class TrainedCheckpoint:
    """A checkpoint of a ``primacy fit`` run (its config.yaml and a .ckpt), trained for ``step`` steps, whose units
    are read ``group`` to a head when its backbone has no attention (``InfluenceHeads``)."""

    config: Path
    path: Path
    step: int
    group: int = 1

    def load(self) -> tuple[HeadModel, int | None]:
        """The model and its task's ``prompt_items`` (None if the task has none)."""
        model, task = load_run(self.config, self.path)
        return head_model(model, group=self.group), getattr(task, "prompt_items", None)

    def describe(self, model: HeadModel) -> dict:
        unit = getattr(model, "unit", "head")  # what an InfluenceHeads head is made of
        return {"checkpoint": str(self.path), "step": self.step, "unit": unit, "units_per_head": self.group}

    def written_after(self, path: Path) -> bool:
        """Whether the checkpoint is newer than ``path`` (a result made from it)."""
        return self.path.stat().st_mtime > path.stat().st_mtime


@dataclass(frozen=True)
class PretrainedCheckpoint:
    """A Hugging Face causal LM: hub id or directory ``name`` at ``revision``, trained for ``step`` steps (None:
    unknown), loaded in ``dtype`` on ``device``."""

    name: str
    revision: str | None = None
    step: int | None = None
    dtype: str = "float32"
    device: str = "cpu"
    group: int = 1  # a Mamba's inner channels per head

    def load(self) -> tuple[HeadModel, int | None]:
        """The model and the paper's n for pretrained models' prompts."""
        return load_pretrained(self.name, self.revision, self.dtype, self.device, self.group), PAPER_PROMPT_ITEMS

    def describe(self, model: PretrainedHeads | PretrainedMamba) -> dict:
        return {"hf_model": self.name, "revision": self.revision, "step": self.step, "dtype": self.dtype,
                "model_type": model.model_type, **model.vocab.describe(), "unit": getattr(model, "unit", "head"),
                "units_per_head": self.group}

    def written_after(self, path: Path) -> bool:
        local = Path(self.name).expanduser() / "config.json"
        return not local.is_file() or local.stat().st_mtime > path.stat().st_mtime


Checkpoint = TrainedCheckpoint | PretrainedCheckpoint


def trained_checkpoints(config: str | Path, ckpts: list[str] | list[Path], group: int = 1) -> list[TrainedCheckpoint]:
    """Checkpoints of one run in step order, each step once (of last.ckpt and its numbered twin, the first given)."""
    by_step: dict[int, Path] = {}
    for ckpt in ckpts:
        by_step.setdefault(checkpoint_step(ckpt), Path(ckpt))
    return [TrainedCheckpoint(Path(config), path, step, group) for step, path in sorted(by_step.items())]


def pretrained_checkpoints(names: list[str], revisions: list[str] | None, dtype: str,
                           device: str, group: int = 1) -> list[PretrainedCheckpoint]:
    """One model, or a series of checkpoints of one model (several revisions of a name, or several directories),
    in step order; a series takes each step from the revision's or directory's name (``step1000``)."""
    if len(names) > 1 and revisions is not None and len(revisions) > 1:
        raise UsageError(f"hf_model gives {len(names)} models and revision {len(revisions)} revisions: give several "
                         f"revisions of one model, or several directories without --revision")
    for name in names:
        check_source(name, revisions)
    revisions = revisions or [None]
    pairs = [(name, revision) for name in names for revision in revisions]
    if len(pairs) == 1:
        (name, revision), = pairs
        return [PretrainedCheckpoint(name, revision, checkpoint_name_step(revision or name, required=False), dtype,
                                     device, group)]
    series = [PretrainedCheckpoint(name, revision, checkpoint_name_step(revision or name), dtype, device, group)
              for name, revision in pairs]
    steps = [c.step for c in series]
    if len(set(steps)) < len(steps):
        raise UsageError(f"checkpoints {[r or n for n, r in pairs]} name the steps {steps}: each step must appear "
                         f"once")
    return sorted(series, key=lambda c: c.step)
