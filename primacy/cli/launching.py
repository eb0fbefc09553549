"""What the commands that launch runs share (``primacy reproduce``, ``primacy atlas``): the launcher options, their
checks, running the runs here or submitting them to SLURM, and the status listing."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from primacy.errors import ArgumentParser, UsageError
from primacy.workflows import launchers, slurm
from primacy.workflows.launchers import RunJob
from primacy.workflows.runs import Run, Status, describe_states
from primacy.workflows.slurm import SlurmOptions

RESERVED = ("--trainer.default_root_dir", "--seed_everything", "--data.init_args.seed")  # set per run


def add_launcher_options(parser: ArgumentParser, defaults: SlurmOptions = SlurmOptions()) -> None:
    """--status, --launcher, --jobs, --wait and --slurm.* (each defaulting to ``defaults``'s value)."""
    parser.add_argument("--status", action="store_true", help="list each run as done/running/queued/stopped/"
                        "failed/missing and exit")
    parser.add_argument("--launcher", choices=("local", "slurm"), default="local",
                        help="local: here, --jobs at a time; slurm: one array job through submitit")
    parser.add_argument("--jobs", type=int, default=1, help="local launcher: runs at once")
    parser.add_argument("--wait", action="store_true", help="slurm launcher: wait for the array job, then draw")
    for name, kind, text in (("partition", str, "partition"), ("account", str, "account"), ("qos", str, "QOS"),
                             ("constraint", str, "node constraint"), ("time", int, "time limit per task, minutes"),
                             ("gpus_per_task", int, "GPUs per process"), ("cpus_per_task", int, "CPUs per process"),
                             ("mem_gb", int, "memory per node, GiB"),
                             ("array_parallelism", int, "tasks of the array running at once"),
                             ("cluster", str, "submitit executor: slurm, or local to try the array job here")):
        parser.add_argument(f"--slurm.{name}", dest=f"slurm_{name}", type=kind, default=getattr(defaults, name),
                            help=f"{text} (default {getattr(defaults, name)})")


def check_launcher(options: Any, defaults: SlurmOptions = SlurmOptions()) -> None:
    """Refuses options that the chosen launcher would ignore (``defaults``: those ``add_launcher_options`` had)."""
    if options.launcher == "slurm":
        if options.jobs != 1:
            raise UsageError(f"jobs={options.jobs} is for --launcher local: on SLURM, --slurm.array_parallelism sets "
                             "how many runs go at once")
        slurm.slurm_parameters(slurm_options(options), "primacy", 1)  # its checks, before any work
        slurm.check_with_slurm(slurm_options(options), 1)
    if options.launcher == "local":
        if options.wait:
            raise UsageError("--wait is for --launcher slurm: the local launcher always waits")
        given = slurm_options(options)
        changed = [name for name in SlurmOptions.__dataclass_fields__
                   if getattr(given, name) != getattr(defaults, name)]
        if changed:
            raise UsageError(f"--slurm.{changed[0]} is for --launcher slurm: add --launcher slurm, or leave it out")


def check_draw(options: Any) -> None:
    """--draw launches nothing: refuses --status beside it (another mode) and the launcher options it would ignore."""
    if options.draw and options.status:
        raise UsageError("--draw and --status are two modes (draw what is done; list every run): give one of them")
    if options.draw and (options.launcher != "local" or options.jobs != 1):
        raise UsageError("--draw launches nothing: leave out --launcher and --jobs, or --draw to train the runs")


def slurm_options(options: Any) -> SlurmOptions:
    return SlurmOptions(**{name: getattr(options, f"slurm_{name}") for name in SlurmOptions.__dataclass_fields__})


def check_overrides(overrides: list[str], command: str) -> None:
    for arg in overrides:
        key = arg.split("=", 1)[0]
        if key in RESERVED:
            raise UsageError(f"{key} is set by {command} for each run: use --out and --seeds instead")
    if overrides and not overrides[0].startswith("--"):
        raise UsageError(f"unexpected argument {overrides[0]!r}: overrides are --key value pairs passed to every run")


def run_local(jobs: list[RunJob], parallel: int, runs: list[Run], status_of: Callable[[Run], Status],
              command: str, follow: Callable[[RunJob], list[tuple[RunJob, Run]]] | None = None) -> None:
    """``launchers.run_local`` with a line per start and end; a run another process has taken since the plan
    (``status_of`` no longer gives its arguments) is skipped; ``follow`` (the runs a finished one makes possible)
    as ``launchers.run_local``'s, with their runs."""
    by_dir = {job.run_dir: run for job, run in zip(jobs, runs)}

    def still_needed(job: RunJob) -> bool:  # another process may have taken it since the plan was made
        return status_of(by_dir[job.run_dir]).args == job.args
    started: dict[str, float] = {}
    lock = threading.Lock()  # one line at a time from the launcher's threads

    def report(job: RunJob, event: str) -> None:
        with lock:
            _report(job, event)

    def _report(job: RunJob, event: str) -> None:
        name = by_dir[job.run_dir].label
        if event == "start":
            started[name] = time.time()
            print(f"  {name}: {' '.join(job.args[:1])} (log in {job.run_dir}/logs/)", flush=True)
        elif event == "skip":
            print(f"  {name}: skipped, another process has started or finished it", flush=True)
        else:
            state = launchers.read_state(job.run_dir)
            print(f"  {name}: exit code {state.get('exit_code')} after {time.time() - started[name]:.0f} s", flush=True)

    def more(job: RunJob) -> list[RunJob]:
        with lock:
            pairs = follow(job) if follow else []
            by_dir.update({new.run_dir: run for new, run in pairs})
        return [new for new, _ in pairs]

    try:
        launchers.run_local(jobs, parallel, report, still_needed, more if follow else None)
    except KeyboardInterrupt:
        print(f"{command}: stopped; the runs saved checkpoints: run the same command again to resume",
              file=sys.stderr)
        raise SystemExit(130) from None


def submit(jobs: list[RunJob], runs: list[Any], out: Path, options: Any, processes: int, name: str,
           command: list[str]) -> bool:
    """Submits the runs (each with a ``dir`` and a ``label``) as one array job named ``primacy-<name>``, each task
    with ``processes`` processes; True when they have finished (``--wait``, and always on submitit's local executor,
    whose jobs end with this process), False when they were queued."""
    chosen = slurm_options(options)
    parameters = slurm.slurm_parameters(chosen, f"primacy-{name}", processes)
    submitted = slurm.submit(jobs, out / "submitit", parameters, chosen.cluster)
    for job, run in zip(submitted, runs):
        launchers.write_state(run.dir, state="queued", job=job.job_id)
    print(f"submitted {len(submitted)} runs as job {submitted[0].job_id.split('_')[0]}; "
          f"`{' '.join([*command, '--status'])}` shows where they are", flush=True)
    if not options.wait and chosen.cluster != "local":
        return False
    for job in submitted:
        try:
            job.result()
        except Exception as err:  # noqa: BLE001 - submitit re-raises whatever failed in the job; the status says
            print(f"  job {job.job_id}: {str(err).splitlines()[-1] if str(err) else type(err).__name__}")
    return True


def print_status(statuses: dict[Run, Status]) -> None:
    width = max(len(run.label) for run in statuses)
    for run, s in statuses.items():
        print(f"{run.label:<{width}}  {s.state:<8} {s.detail}".rstrip())
    print(describe_states(list(statuses.values())))


def stop_unless_done(statuses: dict[Any, Status], subject: str, kind: str) -> None:
    """Lists the runs (or jobs) that are not done and exits with 1, saying what to do; nothing when all are done.
    ``subject``: the start of the message ("primacy reproduce: fig3 is"); ``kind``: what the statuses are of."""
    unfinished = {run: s for run, s in statuses.items() if s.state != "done"}
    if unfinished:
        print_status(unfinished)
        counts = describe_states(list(unfinished.values()))
        print(f"{subject} not complete ({counts}): see the logs of failed {kind}, wait for running or queued ones, "
              "then run the same command again", file=sys.stderr)
        raise SystemExit(1)


def launch(todo: list[Any], statuses: dict[Any, Status], status_of: Callable[[Any], Status], options: Any,
           folder: Path, processes: int, name: str, command: list[str]) -> bool:
    """Starts the runs (or jobs) ``todo``, each the primacy command of its status: here (``run_local``, --jobs at a
    time) or as one SLURM array job (``submit``, its files in ``folder``). True when they have ended, False when they
    were queued on SLURM."""
    jobs = [RunJob(str(run.dir), statuses[run].args) for run in todo]
    if options.launcher == "local":
        run_local(jobs, options.jobs, todo, status_of, command[0])
        return True
    return submit(jobs, todo, folder, options, processes, name, command)
