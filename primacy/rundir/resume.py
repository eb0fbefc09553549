"""What ``primacy fit`` does with a run directory: start a new run, resume an unfinished one, refuse a finished one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lightning.pytorch.utilities import rank_zero_info

from primacy.errors import UsageError
from primacy.rundir.checkpoints import check_checkpoint
from primacy.rundir.layout import RunDir


def resume_point(root: Path, max_steps: int, model_config: Any) -> Path | None:
    """The checkpoint to resume from when ``root`` holds an unfinished run of the same model, None when it holds no
    run; a finished run (at ``max_steps``), a damaged checkpoint or another model's run is refused in one line."""
    last = RunDir(root).last_checkpoint
    if not last.exists():
        return None
    planned = other_budget(root, max_steps)
    if planned is not None:
        raise UsageError(
            f"trainer.max_steps={max_steps} is not the budget of the run in trainer.default_root_dir={root} "
            f"({planned}, its config.yaml): its learning rate decays to 0 at step {planned}, so a run of {max_steps} "
            f"steps is another run: give --trainer.max_steps {planned} to resume it, or choose another directory"
        )
    try:
        step = check_checkpoint(last, model_config, "fit")["global_step"]
    except UsageError as err:
        raise UsageError(f"trainer.default_root_dir={root} holds a run that cannot be resumed: {err}") from None
    if step >= max_steps:
        raise UsageError(
            f"trainer.default_root_dir={root} already holds a finished run (step {step} of max_steps={max_steps}): "
            f"choose another directory, or test it with primacy {' '.join(RunDir(root).test_args())}"
        )
    rank_zero_info(f"Resuming the unfinished run in {root} from step {step} of {max_steps} ({last})")
    return last


def other_budget(root: Path, max_steps: int) -> int | None:
    """The trainer.max_steps the run in ``root`` was started with (its config.yaml), if it is not ``max_steps``. None
    when they agree, and without the file or the key, or when the file does not parse (the checkpoint still decides;
    a resumed fit writes the file again)."""
    planned = RunDir(root).planned_steps()
    return planned if planned is not None and planned != max_steps else None


def wandb_run_id(root: Path) -> str | None:
    """The id of the latest wandb run stored in ``root/wandb`` (directories are named ``[offline-]run-<time>-<id>``),
    so a resumed run continues the same wandb run instead of starting another."""
    runs = sorted((root / "wandb").glob("*run-*-*"), key=lambda p: p.name.split("run-", 1)[1])
    return runs[-1].name.rsplit("-", 1)[1] if runs else None
