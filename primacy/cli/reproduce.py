"""`primacy reproduce FIGURE`: every run of a paper figure (panels x seeds), on this machine or as a SLURM array job,
then each panel's aggregate and the figure in the paper's layout. Repeat the command until the figure is complete:
finished runs are skipped, interrupted ones resume from their checkpoint."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Any

from primacy.checks import positive, writable_directory
from primacy.cli.lightning import parse_run
from primacy.errors import ArgumentParser, UsageError
from primacy.workflows import launchers
from primacy.workflows.launchers import RunJob, SlurmOptions
from primacy.workflows.pages import FIGURES, SCALES
from primacy.workflows.reproduce import Run, Status, count_states, draw, figure, plan, process_count, status

RESERVED = ("--trainer.default_root_dir", "--seed_everything", "--data.init_args.seed")  # set per run


def _parser() -> ArgumentParser:
    parser = ArgumentParser(prog="primacy reproduce", description=__doc__, allow_abbrev=False,
                            epilog="Any other --key value is passed to every run, e.g. --trainer.max_steps 20.")
    parser.add_argument("figure", help=f"the figure to reproduce: {', '.join(sorted(FIGURES))}, or a figure file "
                        "(YAML: panels and their configs; docs/reproduce.md)")
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
    spec = figure(options.figure).select(options.panels)
    out = Path(options.out or f"runs/{spec.name}-{options.scale}")
    runs, configs = plan(spec, options.scale, options.seeds, out, overrides, parse_run)
    statuses = {run: status(run, configs[run.panel]) for run in runs}
    if options.status:
        _print_status(statuses)
        return
    writable_directory("out", out)
    todo = [run for run in runs if statuses[run].args]
    if todo:
        print(f"{spec.name}: {len(runs) - len(todo)} of {len(runs)} runs need nothing; running {len(todo)} "
              f"({', '.join(f'{n} {s}' for s, n in count_states([statuses[r] for r in todo]).items())})", flush=True)
        jobs = [RunJob(str(run.dir), statuses[run].args) for run in todo]
        if options.launcher == "local":
            _run_local(jobs, options.jobs, todo, configs)
        elif not _submit(jobs, todo, out, options, configs, args):
            return
        statuses = {run: status(run, configs[run.panel]) for run in runs}
    unfinished = {run: s for run, s in statuses.items() if s.state != "done"}
    if unfinished:
        _print_status(unfinished)
        counts = ", ".join(f"{n} {state}" for state, n in count_states(list(unfinished.values())).items())
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
    processes = max(process_count(configs[run.panel].trainer.devices) for run in runs)
    parameters = launchers.slurm_parameters(slurm, f"primacy-{Path(options.figure).stem}", processes)
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


def _print_status(statuses: dict[Run, Status]) -> None:
    width = max(len(f"{run.panel}/seed{run.seed}") for run in statuses)
    for run, s in statuses.items():
        print(f"{run.panel + '/seed' + str(run.seed):<{width}}  {s.state:<8} {s.detail}".rstrip())
    print(", ".join(f"{n} {state}" for state, n in count_states(list(statuses.values())).items()))
