"""A real one-node SLURM cluster for the tests: Debian's ``slurm-wlm`` and ``munge`` (installed when missing, where the
machine is Debian and we are root), a ``slurm.conf`` of this host, its CPUs and one partition in a folder of its own,
and ``munged``, ``slurmctld`` and ``slurmd`` started there and stopped by their PID files. Submitit and primacy then
use the real ``sbatch``, ``squeue``, ``scontrol`` and ``sacct`` (through ``SLURM_CONF``).

``python tests/slurm_cluster.py start DIR`` and ``... stop DIR`` do the same by hand (then
``export SLURM_CONF=DIR/slurm.conf``); the tests use ``Cluster`` through the ``slurm_cluster`` fixture."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

PACKAGES = ("slurm-wlm", "munge")
DAEMONS = ("slurmd", "slurmctld", "munged")  # stopped in this order: the node, the controller, then authentication
PARTITION = "debug"
MUNGE_SOCKET = "munge.socket"


class Unavailable(Exception):
    """This machine cannot run the cluster (not root, no apt, not Debian, a daemon that did not start): the reason."""


def install() -> None:
    """Installs SLURM and munge with apt where they are missing (about 40 s); raises Unavailable where it cannot."""
    if all(shutil.which(tool) for tool in ("slurmctld", "slurmd", "munged", "sbatch", "sacct")):
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise Unavailable("SLURM is not installed, and installing slurm-wlm and munge needs root and apt-get")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "update", "-qq"],
                    ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *PACKAGES]):
        done = subprocess.run(command, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise Unavailable(f"{' '.join(command)} failed: {done.stderr.strip().splitlines()[-1:]}")


@dataclass
class Cluster:
    """One node (this host) and one partition (``debug``), all files under ``folder``."""

    folder: Path

    @property
    def conf(self) -> Path:
        return self.folder / "slurm.conf"

    def pid_file(self, daemon: str) -> Path:
        return self.folder / f"{daemon}.pid"

    def env(self) -> dict[str, str]:
        """What a process needs to use the cluster: its config (the daemons' and the clients')."""
        return {"SLURM_CONF": str(self.conf)}

    def start(self) -> None:
        """Writes the config and starts the three daemons; waits until the node takes jobs (a few seconds)."""
        install()
        if os.geteuid() != 0:
            raise Unavailable("the daemons of a one-node cluster run as root here, and this is not root")
        self.folder.mkdir(parents=True, exist_ok=True)
        for sub in ("state", "spool", "munge"):
            (self.folder / sub).mkdir(exist_ok=True)
        self.conf.write_text(self._config())
        key = self.folder / "munge" / "munge.key"
        if not key.exists():
            key.write_bytes(os.urandom(128))
        key.chmod(0o600)
        munge = self.folder / "munge"
        self._run(["munged", "--force", f"--key-file={key}", f"--socket={munge / MUNGE_SOCKET}",
                   f"--pid-file={self.pid_file('munged')}", f"--log-file={munge / 'munged.log'}",
                   f"--seed-file={munge / 'munged.seed'}"])
        env = {**os.environ, **self.env()}
        self._run(["slurmctld", "-f", str(self.conf)], env)
        self._run(["slurmd", "-f", str(self.conf)], env)
        self._wait_for_node(env)

    def stop(self) -> None:
        """Stops each daemon this cluster started, by its PID file (SIGTERM, then SIGKILL after 10 s)."""
        for daemon in DAEMONS:
            pid_file = self.pid_file(daemon)
            try:
                pid = int(pid_file.read_text().split()[0])
            except (OSError, ValueError, IndexError):
                continue
            _end(pid)
            pid_file.unlink(missing_ok=True)

    def _config(self) -> str:
        host = socket.gethostname()
        cpus, memory = os.cpu_count() or 1, _memory_mb()
        f = self.folder
        return "\n".join([
            "ClusterName=primacy-test", f"SlurmctldHost={host}", "SlurmUser=root", "SlurmdUser=root",
            "AuthType=auth/munge", "CredType=cred/munge", f"AuthInfo=socket={f / 'munge' / MUNGE_SOCKET}",
            f"StateSaveLocation={f / 'state'}", f"SlurmdSpoolDir={f / 'spool'}",
            f"SlurmctldPidFile={self.pid_file('slurmctld')}", f"SlurmdPidFile={self.pid_file('slurmd')}",
            f"SlurmctldLogFile={f / 'slurmctld.log'}", f"SlurmdLogFile={f / 'slurmd.log'}",
            f"SlurmctldPort={_free_port()}", f"SlurmdPort={_free_port()}",  # beside any other cluster here
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "MpiDefault=none",
            "SchedulerType=sched/backfill", "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core",
            "ReturnToService=2", "JobRequeue=1", "SlurmctldTimeout=30", "SlurmdTimeout=30",
            "InactiveLimit=0", "KillWait=30", "MinJobAge=300", "Waittime=0",
            "AccountingStorageType=accounting_storage/none", "JobAcctGatherType=jobacct_gather/none",
            "JobCompType=jobcomp/filetxt", f"JobCompLoc={f / 'jobcomp.txt'}",
            f"NodeName={host} CPUs={cpus} RealMemory={memory} State=UNKNOWN",
            f"PartitionName={PARTITION} Nodes={host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO",
            ""])

    def _run(self, command: list[str], env: dict[str, str] | None = None) -> None:
        done = subprocess.run(command, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            self.stop()
            raise Unavailable(f"{command[0]} did not start: {(done.stderr or done.stdout).strip()[-300:]}")

    def _wait_for_node(self, env: dict[str, str], seconds: float = 60) -> None:
        deadline = time.time() + seconds
        state = ""
        while time.time() < deadline:
            done = subprocess.run(["sinfo", "-h", "-o", "%t"], env=env, capture_output=True, text=True)
            state = done.stdout.strip()
            if state in ("idle", "mix", "alloc"):
                return
            time.sleep(0.5)
        self.stop()
        raise Unavailable(f"the node did not come up in {seconds:.0f} s (sinfo says {state!r}); see {self.folder}")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _memory_mb() -> int:
    """This machine's memory in MiB, less a tenth (slurmd refuses a node that claims more than it has)."""
    pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    return int(pages * size / 2**20 * 0.9)


def _end(pid: int, seconds: float = 10) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


if __name__ == "__main__":
    action, where = sys.argv[1:3]
    cluster = Cluster(Path(where).resolve())
    cluster.start() if action == "start" else cluster.stop()
    print(f"{action}: export SLURM_CONF={cluster.conf}" if action == "start" else "stopped")
