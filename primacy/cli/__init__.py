"""The command line: ``main`` (the ``primacy`` console script), one module per command of primacy's own, the
LightningCLI subclass for fit, validate, test and predict, help, parse errors and console output."""

from primacy import moved
from primacy.cli.main import main

__all__ = ["main"]


def __getattr__(name: str) -> object:  # names of the module primacy.cli was before it became this package
    return moved.old_name(__name__, name)
