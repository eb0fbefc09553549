"""The command line: ``main`` (the ``primacy`` console script), one module per command of primacy's own, the
LightningCLI subclass for fit, validate, test and predict, help, parse errors and console output."""

from primacy.cli.main import main

__all__ = ["main"]
