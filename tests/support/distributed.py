"""Primacy commands on several gloo processes (DDP on CPU), started as a cluster starts them or forked from this
process."""

import json
import os
import subprocess
import sys

import torch
from conftest import ROOT

from primacy.cli import main
from primacy.testing import tiny_args


def ddp(*args: str, processes: int, strategy: str = "ddp") -> None:
    """Run the primacy command on ``processes`` gloo processes, as a user would. ``ddp`` (the default, what a cluster
    runs) starts each process as a new Python that imports everything again; ``ddp_fork`` forks them from the first,
    which saves those imports (half the time of a launch) and shares every other line: the data split, the metric
    states and their reduction are the same code whichever launcher started the processes. Forked processes run
    torch on one thread each (primacy refuses to fork from more: the children hang in OpenMP)."""
    ddp_commands([(list(args), processes)], strategy)


def ddp_commands(commands: list[tuple[list[str], int]], strategy: str = "ddp_fork") -> None:
    """Several primacy commands (arguments, processes) one after another, each on its own gloo processes. ``ddp_fork``
    forks them from this process when it runs torch on one thread (as pytest-xdist's workers do), else from one new
    Python, so the imports (7 s) are paid once at most; ``ddp`` runs each as `python -m primacy`, whose command line
    Lightning starts again for the other ranks (it cannot start again a ``python -c``)."""
    runs = [[*args, "--trainer.accelerator", "cpu", "--trainer.devices", str(processes), "--trainer.strategy",
             strategy] for args, processes in commands]
    if strategy == "ddp_fork" and torch.get_num_threads() == 1:
        environ = dict(os.environ)
        try:
            for args in runs:
                main(args)
        finally:  # the launcher's MASTER_PORT and the like stay with these runs
            os.environ.clear()
            os.environ.update(environ)
        return
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tests")}
    if strategy == "ddp_fork":
        script = "import json, sys; from primacy.cli import main; [main(args) for args in json.loads(sys.argv[1])]"
        commands = [["-c", script, json.dumps(runs)]]
        env["OMP_NUM_THREADS"] = "1"
    else:
        commands = [["-m", "primacy", *args] for args in runs]
    for command in commands:
        done = subprocess.run([sys.executable, *command], check=False, capture_output=True, text=True, timeout=600,
                              env=env)
        assert done.returncode == 0, done.stderr[-3000:]


def half_batch_gaps(tmp_path, run: dict) -> tuple[float, float]:
    """Fits a tiny run (``run``: tiny_args's model, data, model_settings and args) for 4 steps three ways: one process
    at batch 4, one at batch 2, two processes (``ddp_fork``) at batch 2 each. Returns the largest difference of any
    weight between the two processes and the one at 4 (0 up to the order of float sums when the processes split the
    batch exactly) and between the one at 2 and the one at 4 (how far apart a different batch trains, so that the first
    can tell)."""
    def args(batch: int, folder: str) -> list[str]:
        return tiny_args(run["model"], run["data"], model_settings=run["model_settings"], steps=4,
                         data_settings={"batch_size": batch},
                         args=[*run["args"], "--trainer.default_root_dir", str(tmp_path / folder)])

    main(["fit", *args(4, "one")])
    main(["fit", *args(2, "half")])
    ddp("fit", *args(2, "two"), processes=2, strategy="ddp_fork")
    weights = {name: torch.load(tmp_path / name / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
               for name in ("one", "half", "two")}

    def gap(folder: str) -> float:
        return max((weights[folder][k] - weights["one"][k]).abs().max().item() for k in weights["one"])

    return gap("two"), gap("half")
