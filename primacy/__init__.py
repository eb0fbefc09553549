"""primacy: which items do sequence models remember? Serial-position effects in S4, LSTM and friends.

Modules:
    analysis   post-hoc analyses: pure functions of tensors and arrays (behaviour, heads, the rule for words)
    backbones  sequence backbones: the Backbone contract and one module per mixer
    callbacks  what makes a run's directory: checkpoints, config, results, trackers
    checks     checks of user settings, one wording for each failure
    cli        the command line: one module per command, LightningCLI, help and console output
    contract   a model and a task that fit: the task's sizes linked into the model, a misfit refused
    errors     UsageError, the one-line error of bad input
    figures    every figure builder and save, the one way a figure reaches files
    files      atomic writes, the one JSON writer, the CSV and npz writers
    metrics    torchmetrics whose states add up over batches and processes
    models     every LightningModule
    moved      module paths from before the package layout, resolved with a warning
    native     C++ loops built on first use and loaded through ctypes (the plugins' compiled kernels)
    registry   every class a config names by its short name, plugins' included
    rundir     the run directory: its layout, results, checkpoints, resume point, kinds of result
    ssm        state-space maths: HiPPO, discretisation, kernels
    tasks      one module per task, each a LightningDataModule over a pure generator
    testing    the conformance kit, for primacy's tests and plugins' alike
    workflows  work over several runs that commands share
"""

from primacy import moved

__version__ = "0.1.0"

moved.install()  # module paths of configs and checkpoints written before the package layout keep loading
