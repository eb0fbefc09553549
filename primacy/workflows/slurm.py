"""The SLURM side of the launchers: the array job's options and their checks before anything is submitted
(``SlurmOptions``, ``slurm_parameters``, ``check_with_slurm``), the submission of ``RunJob``s through submitit
(``submit``) and what SLURM says of a job afterwards (``slurm_state``, ``requeued``). Which process owns which signal
in a job: docs/reproduce.md, "Running on SLURM"."""

from __future__ import annotations

import math
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from primacy.checks import positive
from primacy.errors import UsageError
from primacy.workflows.launchers import ROOM_SECONDS, SIGNAL_EARLY_SECONDS, SIGNAL_LEAD_SECONDS, RunJob


@dataclass(frozen=True)
class SlurmOptions:
    """What ``--slurm.*`` sets for every task of the array job (``time`` in minutes; ``gpus_per_task`` per process
    of a run; a run with ``trainer.devices`` N is N tasks of one node, which Lightning's SLURM support joins)."""

    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    constraint: str | None = None
    time: int = 24 * 60
    gpus_per_task: int = 1
    cpus_per_task: int = 4
    mem_gb: int | None = None
    array_parallelism: int = 32
    cluster: str = "slurm"  # submitit's executor: "local" runs the same array job on this machine


def slurm_parameters(options: SlurmOptions, name: str, processes: int) -> dict[str, Any]:
    """submitit ``update_parameters`` arguments for one array job of runs with ``processes`` processes each."""
    positive(**{f"slurm.{key}": getattr(options, key) for key in ("time", "cpus_per_task", "array_parallelism")})
    shortest = math.ceil((SIGNAL_LEAD_SECONDS + SIGNAL_EARLY_SECONDS + ROOM_SECONDS) / 60)
    if options.cluster == "slurm" and options.time < shortest:
        raise UsageError(f"slurm.time={options.time} is too short: submitit asks SLURM to signal a task "
                         f"{SIGNAL_LEAD_SECONDS} s before its limit, SLURM may signal up to {SIGNAL_EARLY_SECONDS} s "
                         f"earlier, and a run needs {ROOM_SECONDS} s to start and train: give at least {shortest} "
                         "(minutes); each requeue then resumes from the checkpoint written at the signal")
    if options.gpus_per_task < 0:
        raise UsageError(f"slurm.gpus_per_task={options.gpus_per_task} is invalid: it must be 0 or more")
    params: dict[str, Any] = {
        "name": name, "timeout_min": options.time, "nodes": 1, "tasks_per_node": processes,
        "cpus_per_task": options.cpus_per_task, "gpus_per_node": processes * options.gpus_per_task,
        "slurm_array_parallelism": options.array_parallelism, "slurm_signal_delay_s": SIGNAL_LEAD_SECONDS,
    }
    if options.mem_gb is not None:
        params["mem_gb"] = options.mem_gb
    for key in ("partition", "account", "qos", "constraint"):
        if getattr(options, key) is not None:
            params[f"slurm_{key}"] = getattr(options, key)
    return params


def submit(jobs: list[RunJob], folder: Path, parameters: dict[str, Any], cluster: str) -> list[Any]:
    """Submits ``jobs`` as one array job through submitit (its own files in ``folder``) and returns submitit's jobs."""
    try:
        import submitit
    except ImportError:
        raise UsageError('launcher=slurm needs submitit: pip install -e ".[slurm]"') from None
    if cluster not in ("slurm", "local"):
        raise UsageError(f"slurm.cluster={cluster} is invalid: choose slurm or local")
    try:
        executor = submitit.AutoExecutor(folder=folder / "%j", cluster=cluster)
    except RuntimeError as err:  # submitit found no srun/sbatch
        raise UsageError(f"launcher=slurm needs a SLURM cluster, and this machine has none ({err}): run it on the "
                         "cluster's login node, or use --launcher local") from None
    if cluster == "local":
        parameters = {key: value for key, value in parameters.items() if not key.startswith("slurm_")}
        parameters.update(tasks_per_node=1, gpus_per_node=0)  # one process per run: Lightning starts any others
    executor.update_parameters(**parameters)
    with executor.batch():
        submitted = [executor.submit(job) for job in jobs]
    return submitted


SLURM_ENDED = ("BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
               "REVOKED", "TIMEOUT")  # sacct states of a job that will not run (again) by itself


SLURM_WAITING = ("PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "CONFIGURING", "RUNNING", "RESIZING",
                 "SUSPENDED")  # squeue states of a job that will (again) start its run


def slurm_state(job_id: str, folder: Path) -> str | None:
    """SLURM's state of a job (``CANCELLED``, ``PENDING``, ...): squeue's while the job is in the queue (it knows them
    whether or not the cluster keeps accounting, and sacct knows nothing on one that does not), else submitit's sacct
    watcher's; None where SLURM cannot be asked (no squeue or sacct here, or no submitit)."""
    queued = _squeue_state(job_id)
    if queued is not None:
        return queued
    if shutil.which("sacct") is None:
        return None
    try:
        import submitit
    except ImportError:
        return None
    state = submitit.SlurmJob(folder=folder, job_id=str(job_id)).state  # "CANCELLED by 1234", "UNKNOWN" on errors
    return state.split()[0] if state else None


def _squeue_state(job_id: str) -> str | None:
    if shutil.which("squeue") is None:
        return None
    try:
        done = subprocess.run(["squeue", "-h", "-j", str(job_id), "-o", "%T"], capture_output=True, text=True,
                              timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    states = done.stdout.split() if done.returncode == 0 else []
    return states[0] if states else None


def requeued(state: dict[str, Any], folder: Path) -> str | None:
    """For a run whose process a signal stopped inside a SLURM job (``outcome`` "preempted"): SLURM's state of that
    job while it is queued again to resume the run (a preemption, a requeue, a timeout), else None."""
    stopped = state.get("outcome") == "preempted" or state.get("requeued")  # requeued: submitit's hook wrote it
    if state.get("state") != "exited" or not stopped or not state.get("job"):
        return None
    slurm = slurm_state(str(state["job"]), folder)
    return slurm if slurm in SLURM_WAITING else None


_SLURM_REFUSALS = (("partition", ("partition",)), ("account", ("account", "association")), ("qos", ("qos",)),
                   ("constraint", ("feature", "constraint")), ("gpus_per_task", ("gres", "gpu")),
                   ("time", ("time limit",)), ("mem_gb", ("memory",)))  # option, words of sbatch's message naming it


def check_with_slurm(options: SlurmOptions, processes: int) -> None:
    """Asks SLURM whether it would take a task of the array with these options (``sbatch --test-only``, which submits
    nothing), so a partition, account or size the cluster refuses is one line before any run is planned or queued,
    naming the option. Nothing where there is no ``sbatch`` (``submit`` says so) or for submitit's local executor."""
    if options.cluster != "slurm" or shutil.which("sbatch") is None:
        return
    args = ["sbatch", "--test-only", "--nodes=1", f"--ntasks-per-node={processes}",
            f"--cpus-per-task={options.cpus_per_task}", f"--time={options.time}"]
    if options.gpus_per_task:
        args.append(f"--gpus-per-node={processes * options.gpus_per_task}")
    if options.mem_gb is not None:
        args.append(f"--mem={options.mem_gb}G")
    args += [f"--{key}={getattr(options, key)}" for key in ("partition", "account", "qos", "constraint")
             if getattr(options, key) is not None]
    try:
        done = subprocess.run([*args, "--wrap", "true"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return  # SLURM did not answer: sbatch itself will say what is wrong when the array job is submitted
    if done.returncode == 0:
        return
    said = " ".join(line.removeprefix("sbatch: error: ").strip() for line in done.stderr.strip().splitlines())
    named = [key for key, words in _SLURM_REFUSALS if any(word in said.lower() for word in words)][:1]  # the first
    if not named and "node configuration is not available" in said:  # no node has that many of something
        named = [key for key in ("cpus_per_task", "gpus_per_task", "mem_gb") if getattr(options, key)]
    if not named:
        return  # not an option it refuses (no SLURM to ask, say): submitting says what is wrong
    shown = ", ".join(f"slurm.{key}={getattr(options, key)}" for key in named)
    raise UsageError(f"SLURM refuses {shown} ({said}): choose what `sinfo` lists for the partition, or leave the "
                     "option out")
