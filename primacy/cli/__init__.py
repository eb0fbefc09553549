"""The command line: ``main`` (the ``primacy`` console script), one module per command of primacy's own, the
LightningCLI subclass for fit, validate, test and predict, help, parse errors and console output.

Modules:
    aggregate     primacy aggregate
    analyze       primacy analyze icl|ablation|probes|published
    atlas         primacy atlas
    claims        primacy claims
    cmr_fit       primacy cmr_fit
    cmr_grid      primacy cmr_grid
    console       what a run prints: warnings silenced, wandb quiet
    help          primacy --help and the options of a config's classes
    humans        primacy humans
    kernels       primacy kernels
    launching     the launcher options that reproduce, atlas and humans share
    lightning     PrimacyCLI: LightningCLI for fit, validate, test and predict
    main          main(), the primacy console script
    models        primacy models
    parse_errors  one line for a command line or config jsonargparse could not parse
    progress      plain progress lines when the output goes to a file
    reproduce     primacy reproduce
"""

from primacy import moved
from primacy.cli.main import main

__all__ = ["main"]


def __getattr__(name: str) -> object:  # names of the module primacy.cli was before it became this package
    return moved.old_name(__name__, name)
