"""Running the runs of a sweep: each run is one ``primacy`` subprocess, started here (the local launcher) or as one task
of a SLURM array job submitted through submitit. Both go through ``RunJob``, so a cluster runs the same code as a
laptop apart from the scheduler."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from primacy import moved
from primacy.checks import positive
from primacy.errors import UsageError
from primacy.rundir.layout import RunDir

HEARTBEAT_SECONDS = 30  # a running job rewrites its state file this often
STALE_SECONDS = 4 * HEARTBEAT_SECONDS  # a state older than this on another host means the job died
STOP_SECONDS = 120  # how long a stopped run may take to save its checkpoint before its job is requeued
SIGNAL_LEAD_SECONDS = 90  # submitit's notice before a task's time limit (its slurm_signal_delay_s, passed explicitly)
SIGNAL_EARLY_SECONDS = 60  # how much earlier than asked SLURM may send it (sbatch --signal; 15-26 s measured)
ROOM_SECONDS = 30  # what a run needs after its start to load and take its first steps on a CPU
STOPPED = (130, 143)  # exit codes of `primacy fit` after Ctrl-C or SIGTERM, with a checkpoint saved
PARENT_ENV = "PRIMACY_LAUNCHER_PID"  # set in a run's environment: the launcher process it must not outlive
SIGNAL_ENV = "PRIMACY_LAUNCHER_SIGNAL"  # set in a run's environment in a submitit job: the signal its launcher owns


def state_file(run_dir: str | Path) -> Path:
    return RunDir(run_dir).launch_state


def read_state(run_dir: str | Path) -> dict[str, Any]:
    """The last state a launcher recorded for a run ({} when none, or when the file cannot be read)."""
    try:
        state = json.loads(state_file(run_dir).read_text())
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


def is_alive(state: dict[str, Any]) -> bool:
    """Whether the process a "running" state names still runs: its heartbeat is recent and, on this host, the OS
    knows its process. A state file copied or committed from a machine of the same name while its run trained names a
    process id that another process may have now: its old heartbeat tells."""
    if state.get("state") != "running" or time.time() - float(state.get("updated", 0)) >= STALE_SECONDS:
        return False
    if state.get("host") == socket.gethostname():
        try:
            os.kill(int(state["pid"]), 0)
        except (OSError, KeyError, ValueError):
            return False
    return True


LOG_TIME = "%Y%m%d-%H%M%S"  # a launch's log is named by the local time it began, in this format


def run_seconds(run_dir: str | Path) -> float:
    """Wall seconds the launchers have spent on a run so far, over every launch (a run resumed three times counts its
    four): what its state file has summed (``seconds``), or, for runs launched before the state kept that sum and
    while their logs are still there, over each launch's log (rank 0's), from the time in its name, when the launch
    began, to the log's last write; the larger of the two."""
    return max(float(read_state(run_dir).get("seconds") or 0.0), _log_seconds(run_dir))


def _log_seconds(run_dir: str | Path) -> float:
    total = 0.0
    for log in RunDir(run_dir).logs.glob("*.log"):
        if "-rank" in log.stem:
            continue
        try:
            started = time.mktime(time.strptime(log.stem[:15], LOG_TIME))
        except ValueError:
            continue  # not a launcher's log
        total += max(0.0, log.stat().st_mtime - started)
    return total


def write_state(run_dir: Path, **state: Any) -> None:
    from primacy import files  # here: main() imports this module in every process, and files imports Lightning

    files.write_json(state_file(run_dir), {**state, "updated": time.time()})


def outcome(code: int | None, job: str | None) -> str:
    """How a run's process ended, in a word for its state file: "done" (0), "preempted" (stopped by a signal with a
    checkpoint inside a SLURM job: a preemption, a requeue, the time limit's notice or ``scancel --signal``, which
    look alike from inside the job), "stopped" (the same outside SLURM: Ctrl-C, SIGTERM) or "failed"."""
    if code == 0:
        return "done"
    if code in STOPPED:
        return "preempted" if job is not None else "stopped"
    return "failed"


def _launcher_signal() -> str | None:
    """The signal submitit's job takes as its notice of a timeout or preemption ("USR2", or what SUBMITIT_PREEMPT_SIGNAL
    names); None outside a submitit job. SLURM sends it to every process of the job step, the run's too."""
    try:
        import submitit

        submitit.JobEnvironment()  # raises outside a job
        return str(submitit.JobEnvironment.USR_SIG)
    except Exception:  # not inside a submitit job (or submitit is not installed)
        return None


def _task() -> tuple[str | None, int]:
    """This task's scheduler id (SLURM array id, or submitit's local one) and global rank; (None, 0) outside a
    submitit job."""
    try:
        import submitit

        env = submitit.JobEnvironment()
        return env.job_id, env.global_rank
    except Exception:  # not inside a submitit job (or submitit is not installed)
        return None, 0


@dataclass
class RunJob:
    """One run: ``primacy ARGS`` in a subprocess whose output goes to ``<run>/logs/<time>[-<job>].log``, with its
    state in ``<run>/logs/state.json`` (rewritten every ``HEARTBEAT_SECONDS`` while it runs, then the exit code).

    Picklable, for submitit. When a SLURM job is about to time out or is preempted, submitit calls ``checkpoint``:
    it sends the run SIGTERM (``primacy fit`` saves a checkpoint after the step in progress and exits) and returns
    the same job, which submitit requeues and which then resumes from that checkpoint. A ``fit`` whose run has
    trained to its last step by the time its job starts (SLURM requeued it after a signal during its test) tests that
    checkpoint instead (``args_now``).
    """

    run_dir: str
    args: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    _process: subprocess.Popen | None = field(default=None, init=False, repr=False, compare=False)

    def __getstate__(self) -> dict[str, Any]:
        return {"run_dir": self.run_dir, "args": self.args, "env": self.env, "_process": None}

    def __call__(self) -> int:
        run_dir, (job, rank) = Path(self.run_dir), _task()
        logs = RunDir(run_dir).logs
        logs.mkdir(parents=True, exist_ok=True)
        name = time.strftime(LOG_TIME) + (f"-{job}" if job else "") + (f"-rank{rank}" if rank else "")
        log = logs / f"{name}.log"
        with open(log, "ab") as out:
            env = {**os.environ, **self.env, PARENT_ENV: str(os.getpid())}
            if job is not None and (owned := _launcher_signal()):
                env[SIGNAL_ENV] = owned
            self._process = subprocess.Popen([sys.executable, "-m", "primacy", *self.args_now()], stdout=out,
                                             stderr=subprocess.STDOUT, env=env)
            before = float(read_state(run_dir).get("seconds") or 0.0) if rank == 0 else 0.0  # earlier launches'
            started = time.time()
            record = {"pid": self._process.pid, "host": socket.gethostname(), "job": job, "log": str(log),
                      "started": started}
            while True:
                if rank == 0:  # in a multi-process run, one state file for the run
                    write_state(run_dir, state="running", seconds=before + time.time() - started, **record)
                try:
                    code = self._process.wait(timeout=HEARTBEAT_SECONDS)
                    break
                except subprocess.TimeoutExpired:
                    continue
        if rank == 0:
            write_state(run_dir, state="exited", exit_code=code, outcome=outcome(code, job),
                        seconds=before + time.time() - started, **record)
        return code

    def args_now(self) -> tuple[str, ...]:
        """The command to start now: ``args``, or for a ``fit`` whose run has trained to the max_steps of its
        config.yaml, the test of its last checkpoint (the same fit again would be refused as finished)."""
        run = RunDir(self.run_dir)
        planned = run.planned_steps()
        if self.args[:1] != ("fit",) or planned is None or not run.last_checkpoint.is_file():
            return self.args
        from primacy.rundir.checkpoints import checkpoint_step  # torch: only for a run with a checkpoint

        try:
            trained = checkpoint_step(run.last_checkpoint) >= planned
        except UsageError:
            return self.args  # the fit says what is wrong with the checkpoint
        return run.test_args() if trained else self.args

    def stop(self) -> None:
        """Asks the run to save a checkpoint and exit (SIGTERM: it does after the step in progress)."""
        if self._process is not None and self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)

    def checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        """submitit's hook on timeout or preemption: stop the run with a checkpoint, then requeue the same job; None
        (no requeue) where the run had finished (exit code 0) by then: the same ``fit`` again would be refused, and the
        requeue wasted."""
        from submitit.helpers import DelayedSubmission

        self.stop()
        deadline = time.time() + STOP_SECONDS
        while self._process is not None and self._process.poll() is None and time.time() < deadline:
            time.sleep(0.5)
        job, rank = _task()
        code = self._process.poll() if self._process is not None else None
        resumes = code != 0
        if self._process is not None and rank == 0:
            seconds = read_state(self.run_dir).get("seconds")  # the last heartbeat's sum: the requeued job adds on
            write_state(Path(self.run_dir), state="exited", exit_code=code, job=job, requeued=resumes,
                        outcome=outcome(code, job), seconds=seconds)
        return DelayedSubmission(RunJob(self.run_dir, self.args, self.env)) if resumes else None


def stop_with_parent() -> None:
    """In a run started by a launcher: when the launcher's process dies (killed, or its job cancelled), this process
    gets SIGTERM, so it saves a checkpoint and exits instead of training on unwatched (Linux; elsewhere nothing).

    In a submitit job it also ignores submitit's signal (USR2), which SLURM sends to every process of the job before
    its time limit: by default it would kill the run without a checkpoint. The launcher owns that signal (submitit's
    handler calls ``RunJob.checkpoint``, which sends this process SIGTERM, then requeues the job)."""
    owned = os.environ.pop(SIGNAL_ENV, None)
    if owned and hasattr(signal, f"SIG{owned}"):
        signal.signal(getattr(signal, f"SIG{owned}"), signal.SIG_IGN)
    parent = os.environ.pop(PARENT_ENV, None)
    if parent is None or not sys.platform.startswith("linux"):
        return
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, int(signal.SIGTERM))
    if os.getppid() != int(parent):  # the launcher died before the call above
        os.kill(os.getpid(), signal.SIGTERM)


def run_local(jobs: list[RunJob], parallel: int, report: Callable[[RunJob, str], None],
              still_needed: Callable[[RunJob], bool] = lambda job: True,
              more: Callable[[RunJob], list[RunJob]] | None = None) -> dict[str, int]:
    """Runs ``jobs`` on this machine, ``parallel`` at a time, and returns each run directory's exit code. A job
    that ``still_needed`` refuses when its turn comes (another process has started or finished it) is skipped.
    ``more`` gives the jobs a finished one makes possible (a search's next step): they join the queue at once, at its
    front, so no process waits for the slowest job of a wave, a search goes on before the jobs that waited from the
    start (a chain started first stays ahead), and a model's test runs while its checkpoints are there.

    With several at once, each gets ``cpu_count // parallel`` threads (OMP_NUM_THREADS, unless set). SIGTERM or
    Ctrl-C stops every run with a checkpoint (they resume next time) and is raised again once they have exited."""
    positive(jobs=parallel)
    threads = str(max(1, (os.cpu_count() or 1) // parallel))
    codes: dict[str, int] = {}
    interrupted = threading.Event()
    started: list[RunJob] = []  # every job given to the pool, the ones ``more`` added included
    waiting: deque[RunJob] = deque()  # the jobs not started yet, in the order they start
    futures: list[Future] = []  # one per job: each takes the first waiting job when a worker is free
    lock = threading.Lock()

    def work() -> None:
        with lock:
            job = waiting.popleft()
        if interrupted.is_set():
            return
        if not still_needed(job):
            report(job, "skip")
            return
        report(job, "start")
        codes[job.run_dir] = job()
        report(job, "end")
        if more is not None and not interrupted.is_set():
            queue(more(job), first=True)

    def queue(jobs: list[RunJob], first: bool = False) -> None:
        if parallel > 1 and "OMP_NUM_THREADS" not in os.environ:
            jobs = [RunJob(job.run_dir, job.args, {"OMP_NUM_THREADS": threads, **job.env}) for job in jobs]
        with lock:
            if first:
                waiting.extendleft(reversed(jobs))
            else:
                waiting.extend(jobs)
            started.extend(jobs)
            futures.extend(pool.submit(work) for _ in jobs)

    previous = signal.signal(signal.SIGTERM, _raise_sigterm)
    pool = ThreadPoolExecutor(max_workers=parallel)
    try:
        queue(jobs)
        done = 0
        while done < len(futures):  # the jobs ``more`` adds are queued before the job that made them ends
            futures[done].result()
            done += 1
    except (KeyboardInterrupt, _Terminated) as stop:
        interrupted.set()
        for job in started:
            job.stop()
        pool.shutdown(wait=True, cancel_futures=True)
        raise KeyboardInterrupt if isinstance(stop, KeyboardInterrupt) else SystemExit(143) from None
    finally:
        pool.shutdown(wait=True)
        signal.signal(signal.SIGTERM, previous)
    return codes


class _Terminated(Exception):
    pass


def _raise_sigterm(signum: int, frame: Any) -> None:
    raise _Terminated


def __getattr__(name: str) -> object:  # the SLURM half's names, in primacy.workflows.slurm since issue 73
    return moved.old_name(__name__, name)
