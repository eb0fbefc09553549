"""`primacy reproduce FIGURE`: every run of a paper figure (panels x seeds), on this machine or as a SLURM array job,
then each panel's aggregate and the figure in the paper's layout. Repeat the command until the figure is complete:
finished runs are skipped, interrupted ones resume from their checkpoint."""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from primacy.checks import positive, writable_directory
from primacy.cli.lightning import parse_run
from primacy.errors import ArgumentParser, UsageError
from primacy.rundir.checkpoints import check_checkpoint
from primacy.rundir.resume import last_checkpoint
from primacy.workflows import launchers
from primacy.workflows.launchers import RunJob, SlurmOptions, state_file
from primacy.workflows.pages import FIGURES, SCALES, FigureSpec, draw

CONFIGS = Path(__file__).resolve().parents[2] / "configs"  # the repository's configs/ (an editable install)
RESERVED = ("--trainer.default_root_dir", "--seed_everything", "--data.init_args.seed")  # set per run
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
        return ("test", "--config", str(self.dir / "config.yaml"), "--ckpt_path", str(last_checkpoint(self.dir)))


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


def plan(spec: FigureSpec, scale: str, seeds: int, out: Path, overrides: list[str]) -> tuple[list[Run], dict]:
    """Every run of the figure, and each panel's parsed config (which checks the overrides once per panel)."""
    configs = config_dir(scale)
    runs, parsed = [], {}
    for panel in spec.panels:
        name = panel.config(scale)
        config = configs / f"{name}.yaml"
        if not config.is_file():
            raise UsageError(f"figure={spec.name}: its config {config} is missing")
        first = Run(name, 0, out / name / "seed0", config, tuple(overrides))
        parsed[name] = parse_run(list(first.fit_args()))
        runs += [Run(name, seed, out / name / f"seed{seed}", config, tuple(overrides)) for seed in range(seeds)]
    return runs, parsed


def status(run: Run, config: Any) -> Status:
    """Where ``run`` stands, from its files: its launcher's state file, checkpoint and results."""
    state = launchers.read_state(run.dir)
    log = f"log {state['log']}" if state.get("log") else ""
    if launchers.is_alive(state):
        return Status("running", f"{state.get('job') or 'pid ' + str(state.get('pid'))}, {log}")
    ended = ""  # a queued job that SLURM says has ended without starting the run: the files say the rest
    if state.get("state") == "queued":
        slurm = launchers.slurm_state(state.get("job"), run.dir.parents[1] / "submitit")
        if slurm not in launchers.SLURM_ENDED:
            where = slurm or f"(if that job no longer exists, delete {state_file(run.dir)})"
            return Status("queued", f"job {state.get('job')} {where}")
        ended, state = f"job {state.get('job')} ended {slurm} before the run started", {}
    max_steps = config.trainer.max_steps
    ckpt = last_checkpoint(run.dir)
    exit_code = state.get("exit_code")
    failed = state.get("state") == "exited" and exit_code not in (0, *launchers.STOPPED)
    if not ckpt.is_file():
        if failed:
            return Status("failed", f"exit code {exit_code}, {log}", run.fit_args())
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
    summary = run.dir / "results" / "summary.json"
    if summary.is_file() and summary.stat().st_mtime >= ckpt.stat().st_mtime:
        return Status("done", f"step {step}")
    return Status("stopped", f"trained ({step} steps), not tested", run.test_args())


def _parser() -> ArgumentParser:
    parser = ArgumentParser(prog="primacy reproduce", description=__doc__, allow_abbrev=False,
                            epilog="Any other --key value is passed to every run, e.g. --trainer.max_steps 20.")
    parser.add_argument("figure", choices=sorted(FIGURES), help="the figure to reproduce")
    parser.add_argument("--scale", choices=SCALES, default="cpu", help="configs/cpu/ (a laptop) or configs/paper/")
    parser.add_argument("--seeds", type=int, default=10, help="seeds 0 .. N-1 of every panel (the paper used 10)")
    parser.add_argument("--out", help="directory of the runs and figures (default runs/FIGURE-SCALE)")
    parser.add_argument("--panels", nargs="+", metavar="PANEL", help="only these panels (their labels, e.g. A C, or config names)")
    parser.add_argument("--status", action="store_true", help="list each run as done/running/queued/stopped/"
                        "failed/missing and exit")
    parser.add_argument("--launcher", choices=("local", "slurm"), default="local",
                        help="local: here, --jobs at a time; slurm: one array job through submitit")
    parser.add_argument("--jobs", type=int, default=1, help="local launcher: runs at once")
    parser.add_argument("--wait", action="store_true", help="slurm launcher: wait for the array job, then draw")
    defaults = SlurmOptions()
    for name, kind, text in (("partition", str, "partition"), ("account", str, "account"), ("qos", str, "QOS"),
                             ("constraint", str, "node constraint"), ("time", int, "time limit per task, minutes"),
                             ("gpus_per_task", int, "GPUs per process"), ("cpus_per_task", int, "CPUs per process"),
                             ("mem_gb", int, "memory per node, GiB"),
                             ("array_parallelism", int, "tasks of the array running at once"),
                             ("cluster", str, "submitit executor: slurm, or local to try the array job here")):
        parser.add_argument(f"--slurm.{name}", dest=f"slurm_{name}", type=kind, default=getattr(defaults, name),
                            help=f"{text} (default {getattr(defaults, name)})")
    return parser


def command(args: list[str]) -> None:
    """``primacy reproduce``: see the module's docstring and ``--help``."""
    options, overrides = _parser().parse_known_args(args)
    _check_overrides(overrides)
    positive(seeds=options.seeds, jobs=options.jobs)
    _check_launcher(options)
    spec = FIGURES[options.figure].select(options.panels)
    out = Path(options.out or f"runs/{options.figure}-{options.scale}")
    runs, configs = plan(spec, options.scale, options.seeds, out, overrides)
    statuses = {run: status(run, configs[run.panel]) for run in runs}
    if options.status:
        _print_status(statuses)
        return
    writable_directory("out", out)
    todo = [run for run in runs if statuses[run].args]
    if todo:
        print(f"{spec.name}: {len(runs) - len(todo)} of {len(runs)} runs need nothing; running {len(todo)} "
              f"({', '.join(f'{n} {s}' for s, n in _counts([statuses[r] for r in todo]).items())})", flush=True)
        jobs = [RunJob(str(run.dir), statuses[run].args) for run in todo]
        if options.launcher == "local":
            _run_local(jobs, options.jobs, todo, configs)
        elif not _submit(jobs, todo, out, options, configs, args):
            return
        statuses = {run: status(run, configs[run.panel]) for run in runs}
    unfinished = {run: s for run, s in statuses.items() if s.state != "done"}
    if unfinished:
        _print_status(unfinished)
        counts = ", ".join(f"{n} {state}" for state, n in _counts(list(unfinished.values())).items())
        print(f"primacy reproduce: {spec.name} is not complete ({counts}): see the logs of failed runs, wait for "
              "running or queued ones, then run the same command again", file=sys.stderr)
        raise SystemExit(1)
    for path in draw(spec, options.scale, out, runs):
        print(f"wrote {path}")


def _check_launcher(options: Any) -> None:
    """Refuses options that the chosen launcher would ignore."""
    if options.launcher == "slurm":
        if options.jobs != 1:
            raise UsageError(f"jobs={options.jobs} is for --launcher local: on SLURM, --slurm.array_parallelism sets "
                             "how many runs go at once")
        launchers.slurm_parameters(_slurm_options(options), "primacy", 1)  # its checks, before any work
    if options.launcher == "local":
        if options.wait:
            raise UsageError("--wait is for --launcher slurm: the local launcher always waits")
        given, defaults = _slurm_options(options), SlurmOptions()
        changed = [name for name in SlurmOptions.__dataclass_fields__
                   if getattr(given, name) != getattr(defaults, name)]
        if changed:
            raise UsageError(f"--slurm.{changed[0]} is for --launcher slurm: add --launcher slurm, or leave it out")


def _slurm_options(options: Any) -> SlurmOptions:
    return SlurmOptions(**{name: getattr(options, f"slurm_{name}") for name in SlurmOptions.__dataclass_fields__})


def _check_overrides(overrides: list[str]) -> None:
    for arg in overrides:
        key = arg.split("=", 1)[0]
        if key in RESERVED:
            raise UsageError(f"{key} is set by primacy reproduce for each run: use --out and --seeds instead")
    if overrides and not overrides[0].startswith("--"):
        raise UsageError(f"unexpected argument {overrides[0]!r}: overrides are --key value pairs passed to every run")


def _run_local(jobs: list[RunJob], parallel: int, runs: list[Run], configs: dict) -> None:
    by_dir = {job.run_dir: run for job, run in zip(jobs, runs)}

    def still_needed(job: RunJob) -> bool:  # another `primacy reproduce` may have taken it since the plan was made
        run = by_dir[job.run_dir]
        return status(run, configs[run.panel]).args == job.args
    started: dict[str, float] = {}
    lock = threading.Lock()  # one line at a time from the launcher's threads

    def report(job: RunJob, event: str) -> None:
        with lock:
            _report(job, event)

    def _report(job: RunJob, event: str) -> None:
        name = f"{by_dir[job.run_dir].panel}/seed{by_dir[job.run_dir].seed}"
        if event == "start":
            started[name] = time.time()
            print(f"  {name}: {' '.join(job.args[:1])} (log in {job.run_dir}/logs/)", flush=True)
        elif event == "skip":
            print(f"  {name}: skipped, another process has started or finished it", flush=True)
        else:
            state = launchers.read_state(job.run_dir)
            print(f"  {name}: exit code {state.get('exit_code')} after {time.time() - started[name]:.0f} s", flush=True)

    try:
        launchers.run_local(jobs, parallel, report, still_needed)
    except KeyboardInterrupt:
        print("primacy reproduce: stopped; the runs saved checkpoints: run the same command again to resume",
              file=sys.stderr)
        raise SystemExit(130) from None


def _submit(jobs: list[RunJob], runs: list[Run], out: Path, options: Any, configs: dict, args: list[str]) -> bool:
    """Submits the runs as one array job; True when they have finished (``--wait``, and always on submitit's local
    executor, whose jobs end with this process), False when they were queued."""
    slurm = _slurm_options(options)
    processes = max(_processes(configs[run.panel].trainer.devices) for run in runs)
    parameters = launchers.slurm_parameters(slurm, f"primacy-{options.figure}", processes)
    submitted = launchers.submit(jobs, out / "submitit", parameters, slurm.cluster)
    for job, run in zip(submitted, runs):
        launchers.write_state(run.dir, state="queued", job=job.job_id)
    print(f"submitted {len(submitted)} runs as job {submitted[0].job_id.split('_')[0]}; "
          f"`{' '.join(['primacy reproduce', *args, '--status'])}` shows where they are", flush=True)
    if not options.wait and slurm.cluster != "local":
        return False
    for job in submitted:
        try:
            job.result()
        except Exception as err:  # noqa: BLE001 - submitit re-raises whatever failed in the job; the status says
            print(f"  job {job.job_id}: {str(err).splitlines()[-1] if str(err) else type(err).__name__}")
    return True


def _processes(devices: Any) -> int:
    """How many processes a run with ``trainer.devices`` starts: a count (2, "2"), a list of ids, or 1 ("auto")."""
    if isinstance(devices, (list, tuple)):
        return len(devices)
    if isinstance(devices, str) and "," in devices:
        return len([d for d in devices.split(",") if d.strip()])
    return int(devices) if str(devices).isdigit() and int(devices) > 0 else 1


def _counts(statuses: list[Status]) -> dict[str, int]:
    counts = {state: sum(s.state == state for s in statuses) for state in STATES}
    return {state: n for state, n in counts.items() if n}


def _print_status(statuses: dict[Run, Status]) -> None:
    width = max(len(f"{run.panel}/seed{run.seed}") for run in statuses)
    for run, s in statuses.items():
        print(f"{run.panel + '/seed' + str(run.seed):<{width}}  {s.state:<8} {s.detail}".rstrip())
    print(", ".join(f"{n} {state}" for state, n in _counts(list(statuses.values())).items()))
