"""A sweep's runs, shared by every workflow that launches them (a paper figure's panels x seeds, an atlas's rows, a
figure file's panels): a run of a config at a seed (``Run``), where it stands read from its files (``status``,
``Status``), the configs' scales and folders, and the YAML files a command names."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from primacy.errors import UsageError
from primacy.rundir.checkpoints import check_checkpoint
from primacy.rundir.layout import RunDir
from primacy.rundir.resume import other_budget
from primacy.rundir.settings import tested_at
from primacy.workflows import launchers, slurm
from primacy.workflows.launchers import state_file

CONFIGS = Path(__file__).resolve().parents[2] / "configs"  # the repository's configs/ (an editable install)
SCALES = ("cpu", "paper")
STATES = ("done", "running", "queued", "stopped", "failed", "missing")


@dataclass(frozen=True)
class Run:
    panel: str  # the config's name, and the panel's directory
    seed: int
    dir: Path
    config: Path | tuple[Path, ...]  # its config file, or the files that compose it, in order
    overrides: tuple[str, ...]

    def fit_args(self) -> tuple[str, ...]:
        files = self.config if isinstance(self.config, tuple) else (self.config,)
        return ("fit", *(arg for path in files for arg in ("--config", str(path))), *self.overrides,
                "--seed_everything", str(self.seed), "--data.init_args.seed", str(self.seed),
                "--trainer.default_root_dir", str(self.dir))

    def test_args(self) -> tuple[str, ...]:
        return RunDir(self.dir).test_args()

    @property
    def label(self) -> str:
        """How status lines and the launcher's reports name the run."""
        return f"{self.panel}/seed{self.seed}"


@dataclass(frozen=True)
class Status:
    state: str  # one of STATES
    detail: str = ""
    args: tuple[str, ...] = ()  # the primacy command that moves the run on; () when there is none to start


def config_dir(scale: str) -> Path:
    for root in (CONFIGS, Path.cwd() / "configs"):
        if (root / scale).is_dir():
            return root / scale
    raise UsageError(f"scale={scale}: no configs/{scale}/ directory in {CONFIGS.parent} or {Path.cwd()}: run from a "
                     "checkout of primacy (pip install -e .)")


def read_yaml(parameter: str, path: Path) -> Any:
    """The content of a YAML file a command line names as ``parameter``; not YAML is one line naming both."""
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise UsageError(f"{parameter}={path} is not valid YAML: {' '.join(str(err).split())}") from None


def status(run: Run, config: Any) -> Status:
    """Where ``run`` stands, from its files: its launcher's state file, checkpoint and results (tested: a summary of
    its test of the last checkpoint, ``tested_at``)."""
    state = launchers.read_state(run.dir)
    log = f"log {state['log']}" if state.get("log") else ""
    if launchers.is_alive(state):
        return Status("running", f"{state.get('job') or 'pid ' + str(state.get('pid'))}, {log}")
    ended = ""  # a queued job that SLURM says has ended without starting the run: the files say the rest
    again = slurm.requeued(state, run.dir.parents[1] / "submitit")
    if again is not None:
        return Status("queued", f"job {state.get('job')} {again}: preempted, resumes from its checkpoint, {log}")
    if state.get("state") == "queued":
        slurm_now = slurm.slurm_state(state.get("job"), run.dir.parents[1] / "submitit")
        if slurm_now not in slurm.SLURM_ENDED:
            where = slurm_now or f"(if that job no longer exists, delete {state_file(run.dir)})"
            return Status("queued", f"job {state.get('job')} {where}")
        ended, state = f"job {state.get('job')} ended {slurm_now} before the run started", {}
    max_steps = config.trainer.max_steps
    ckpt = RunDir(run.dir).last_checkpoint
    planned = other_budget(run.dir, max_steps)
    if planned is not None and (ckpt.is_file() or RunDir(run.dir).kept_as_results):
        return Status("failed", f"trained with trainer.max_steps={planned} (its config.yaml), not {max_steps}: "
                                f"give --trainer.max_steps {planned}, move {run.dir} away or choose another --out")
    exit_code = state.get("exit_code")
    failed = state.get("state") == "exited" and exit_code not in (0, *launchers.STOPPED)
    if not ckpt.is_file():
        if failed:
            return Status("failed", f"exit code {exit_code}, {log}", run.fit_args())
        if RunDir(run.dir).kept_as_results:
            return Status("done", "results kept, checkpoints removed")
        return Status("missing", ended, run.fit_args())
    try:
        step = check_checkpoint(ckpt, config.model, "fit")["global_step"]
    except UsageError as err:
        return Status("failed", f"{err}: delete {run.dir} or choose another --out")
    if step < max_steps:
        if failed:
            return Status("failed", f"at step {step} of {max_steps}, exit code {exit_code}, {log}", run.fit_args())
        return Status("stopped", f"at step {step} of {max_steps}: resumes" + (f" ({ended})" if ended else ""),
                      run.fit_args())
    if tested_at(RunDir(run.dir), step):
        return Status("done", f"step {step}")
    return Status("stopped", f"trained ({step} steps), not tested", run.test_args())


def process_count(devices: Any) -> int:
    """How many processes a run with ``trainer.devices`` starts: a count (2, "2"), a list of ids, or 1 ("auto")."""
    if isinstance(devices, (list, tuple)):
        return len(devices)
    if isinstance(devices, str) and "," in devices:
        return len([d for d in devices.split(",") if d.strip()])
    return int(devices) if str(devices).isdigit() and int(devices) > 0 else 1


def count_states(statuses: list[Status]) -> dict[str, int]:
    counts = {state: sum(s.state == state for s in statuses) for state in STATES}
    return {state: n for state, n in counts.items() if n}


def describe_states(statuses: list[Status]) -> str:
    """How many runs are in each state, as a phrase: "3 done, 1 failed" (empty without runs)."""
    return ", ".join(f"{n} {state}" for state, n in count_states(statuses).items())
