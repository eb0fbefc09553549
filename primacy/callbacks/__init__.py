"""Callbacks that make a run's directory: checkpoints, the resolved config, result files and figures, and the
trackers of values over training. Configs name them by their module (``primacy.callbacks.trackers.DtTracker``); the
package names (``primacy.callbacks.DtTracker``) of configs written before the modules existed still resolve.

Modules:
    checkpointing  RunCheckpoint: last.ckpt on a schedule, on a signal and at the end
    compiling      CompileBackbone: the backbone through torch.compile, opt-in
    config         RunConfig: config.yaml, and the config logged to every logger
    results        ResultsWriter: results/ at the end of a test
    trackers       DtTracker, TokenDtTracker, HeadScoreTracker: values over training
    wandb_service  a run stopped by SIGTERM closes its wandb run, with or without wandb's service
"""

from primacy import moved
from primacy.callbacks.checkpointing import RunCheckpoint
from primacy.callbacks.config import RunConfig
from primacy.callbacks.results import ResultsWriter
from primacy.callbacks.trackers import DtTracker, HeadScoreTracker, TokenDtTracker, TrainingRecorder

__all__ = ["DtTracker", "HeadScoreTracker", "ResultsWriter", "RunCheckpoint", "RunConfig", "TokenDtTracker",
           "TrainingRecorder"]


def __getattr__(name: str) -> object:  # names of the module primacy.callbacks was before it became this package
    return moved.old_name(__name__, name)
