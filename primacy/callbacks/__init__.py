"""Callbacks that make a run's directory: checkpoints, the resolved config, result files and figures, and the
trackers of values over training. Configs name them by their module (``primacy.callbacks.trackers.DtTracker``); the
package names (``primacy.callbacks.DtTracker``) of configs written before the modules existed still resolve."""

from primacy import moved
from primacy.callbacks.checkpointing import RunCheckpoint
from primacy.callbacks.config import RunConfig
from primacy.callbacks.results import ResultsWriter
from primacy.callbacks.trackers import DtTracker, HeadScoreTracker, TokenDtTracker, TrainingRecorder

__all__ = ["DtTracker", "HeadScoreTracker", "ResultsWriter", "RunCheckpoint", "RunConfig", "TokenDtTracker",
           "TrainingRecorder"]


def __getattr__(name: str) -> object:  # names of the module primacy.callbacks was before it became this package
    return moved.old_name(__name__, name)
