"""A run stopped by SIGTERM stops logging to wandb at the signal and closes its wandb run afterwards whether or not
wandb's service still runs: SLURM (a preemption, ``scontrol requeue``, ``scancel --signal=TERM``) signals every process
of a job, wandb's own service processes (wandb-core, wandb-symon) among them, and the next metric log would then raise
``ConnectionResetError`` after the checkpoint, failing a run that had stopped cleanly."""

from __future__ import annotations

import logging
import sys

import lightning as L
from lightning.pytorch.loggers import WandbLogger
from lightning.pytorch.utilities import rank_zero_info


def detach_wandb(trainer: L.Trainer) -> bool:
    """Takes the trainer's wandb loggers out of its loggers (so nothing more is sent to a service that may be gone);
    True when there were any. Only rebinds a list, so it is safe inside a signal handler."""
    kept = [logger for logger in trainer.loggers if not isinstance(logger, WandbLogger)]
    if len(kept) == len(trainer.loggers):
        return False
    trainer.loggers = kept
    return True


def close_wandb(exit_code: int) -> None:
    """Finishes this process's wandb run with ``exit_code`` and shuts wandb down; where its service has ended (lost
    connection), says so in one line instead of wandb's traceback at exit. The run's id stays in the run directory,
    so the resumed run logs into the same wandb run."""
    wandb = sys.modules.get("wandb")
    if wandb is None:
        return
    asyncio_log = logging.getLogger("asyncio")  # its "socket.send() raised exception." on the closed socket
    level = asyncio_log.level
    asyncio_log.setLevel(logging.ERROR)
    try:
        if wandb.run is not None:
            wandb.run.finish(exit_code=exit_code)
    except ConnectionError:
        rank_zero_info("wandb's service had ended with the job's signal: its run keeps the steps logged before it, "
                       "and the resumed run logs on into it")
        try:
            wandb.teardown(exit_code)  # unregisters wandb's own teardown at exit, which would raise the same error
        except ConnectionError:
            pass
    finally:
        asyncio_log.setLevel(level)
