"""A callback that signals its own process at a given step, to interrupt runs in tests as a user or SLURM would."""

import os

from lightning.pytorch.callbacks import Callback


class SignalAt(Callback):
    """Sends ``signum`` to this process when training reaches optimiser step ``step``, or (``during_validation``)
    in the middle of the validation that follows that step."""

    def __init__(self, step: int, signum: int, during_validation: bool = False) -> None:
        self.step, self.signum, self.during_validation = step, signum, during_validation

    def on_train_batch_end(self, trainer, *args) -> None:
        if trainer.global_step == self.step and not self.during_validation:
            os.kill(os.getpid(), self.signum)

    def on_validation_batch_end(self, trainer, *args) -> None:
        if trainer.global_step == self.step and self.during_validation and not trainer.sanity_checking:
            self.during_validation = None  # once
            os.kill(os.getpid(), self.signum)
