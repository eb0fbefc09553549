"""A callback that signals its own process at a given step, to interrupt runs in tests as a user or SLURM would."""

import os

from lightning.pytorch.callbacks import Callback


class SignalAt(Callback):
    """Sends ``signum`` to this process when training reaches optimiser step ``step``."""

    def __init__(self, step: int, signum: int) -> None:
        self.step, self.signum = step, signum

    def on_train_batch_end(self, trainer, *args) -> None:
        if trainer.global_step == self.step:
            os.kill(os.getpid(), self.signum)
