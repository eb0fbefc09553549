"""The runs of a paper figure (panels x seeds) and where each stands, read from its files: what ``primacy reproduce``
plans, launches and checks again."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from primacy.errors import UsageError
from primacy.rundir.checkpoints import check_checkpoint
from primacy.rundir.layout import RunDir
from primacy.rundir.resume import other_budget
from primacy.rundir.settings import tested_at
from primacy.workflows import figure_files, launchers, pages, slurm
from primacy.workflows.launchers import state_file
from primacy.workflows.pages import FIGURES, SCALES, FigureSpec
from primacy.workflows.tables import emergence_table, markdown_columns, markdown_table

CONFIGS = Path(__file__).resolve().parents[2] / "configs"  # the repository's configs/ (an editable install)
STATES = ("done", "running", "queued", "stopped", "failed", "missing")


@dataclass(frozen=True)
class Run:
    panel: str  # the config's name, and the panel's directory
    seed: int
    dir: Path
    config: Path
    overrides: tuple[str, ...]

    def fit_args(self) -> tuple[str, ...]:
        return ("fit", "--config", str(self.config), *self.overrides, "--seed_everything", str(self.seed),
                "--data.init_args.seed", str(self.seed), "--trainer.default_root_dir", str(self.dir))

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


def figure(name: str) -> FigureSpec:
    """One of primacy's figures by its name, or the figure a figure file (YAML, ``figure_files``) describes."""
    if name in FIGURES:
        return FIGURES[name]
    if not name.endswith((".yaml", ".yml")):
        raise UsageError(f"figure={name} is not one of primacy's figures ({', '.join(sorted(FIGURES))}) nor a figure "
                         "file (.yaml, see docs/reproduce.md)")
    return figure_files.read_figure(name)


def draw(spec: FigureSpec, scale: str, out: Path, runs: list[Any]) -> list[Path]:
    """The figure of finished runs: a figure file's panels aggregated by their kinds of result and a table
    (``figure_files.draw_aggregates``), a paper figure in its layout (``pages.draw``)."""
    if spec.layout == figure_files.AGGREGATES:
        return figure_files.draw_aggregates(spec, scale, out, runs)
    return pages.draw(spec, scale, out, runs)


def panels_left_out(full: FigureSpec, chosen: FigureSpec, scale: str, out: Path) -> list[str]:
    """The panels of ``full`` that ``chosen`` (the figure as ``--panels`` selects it) leaves out but whose runs are in
    ``out``: the figure drawn from ``chosen`` alone would be drawn over theirs, without their rows."""
    names = {panel.config(scale) for panel in chosen.panels}
    return [panel.label for panel in full.panels
            if panel.config(scale) not in names and any((out / panel.config(scale)).glob("seed*"))]


def table_columns(spec: FigureSpec) -> dict[str, list[str]]:
    """The columns of the figure's markdown table where ``draw`` knows them before reading the runs: a paper figure's
    (the weights page's, a figure file's and the humans page's tables have a column per layer or per number of the
    runs' results)."""
    tables = {"heatmaps": markdown_table, "dt": markdown_table, "probes": markdown_table,
              "emergence": lambda rows, reference: emergence_table(rows)}
    if spec.layout not in tables:
        return {}
    return {f"{spec.name}.md": markdown_columns(tables[spec.layout]([], None))}


def config_dir(scale: str) -> Path:
    for root in (CONFIGS, Path.cwd() / "configs"):
        if (root / scale).is_dir():
            return root / scale
    raise UsageError(f"scale={scale}: no configs/{scale}/ directory in {CONFIGS.parent} or {Path.cwd()}: run from a "
                     "checkout of primacy (pip install -e .)")


def plan(spec: FigureSpec, scale: str, seeds: int, out: Path, overrides: list[str],
         parse: Callable[[list[str]], Any]) -> tuple[list[Run], dict]:
    """Every run of the figure, and each panel's config as ``parse`` (the command line's) reads the arguments of its
    first run, which checks the overrides once per panel."""
    configs = spec.config_root or config_dir(scale)
    runs, parsed = [], {}
    for panel in spec.panels:
        name = panel.config(scale)
        if not name:
            have = [other for other in SCALES if panel.config(other)]
            raise UsageError(f"scale={scale}: figure {spec.name} has no {scale}-scale config for panel {panel.label}; "
                             f"its panels run at --scale {' or '.join(have)}")
        config = configs / f"{name}.yaml"
        quickstart = configs.parent / f"{name}.yaml"  # a quickstart serves as a CPU panel of primacy's figures
        if not config.is_file() and spec.config_root is None and quickstart.is_file():
            config = quickstart
        if not config.is_file():
            raise UsageError(f"figure={spec.name}: its config {config} is missing")
        first = Run(name, 0, out / name / "seed0", config, tuple(overrides))
        parsed[name] = parse(list(first.fit_args()))
        runs += [Run(name, seed, out / name / f"seed{seed}", config, tuple(overrides)) for seed in range(seeds)]
    return runs, parsed


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
