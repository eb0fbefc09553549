"""primacy's conformance kit, for primacy's tests and plugins' alike: the guarantees every backbone, task and model
must keep, and tiny runs of ``primacy fit``.

check_backbone(), check_task(), check_model(): each asserts one contract on a class (AssertionError on a breach);
check_influence() the exact influence of a backbone instance (check_backbone calls it when there is one).
tiny_fit(), tiny_args(), tiny_settings(), TINY_RUNS: a run of a few steps on the CPU, quietly, without figures.
WithoutStep, fixed_batch_losses(): references for a backbone's stepped decoding and learning.
SignalAt: a callback that interrupts a run at a step, as a user (Ctrl-C) or SLURM (SIGTERM) would, to test resuming;
Pace: one that slows a run's steps, so a test can signal it from outside while it trains.

Modules:
    backbones  check_backbone, check_influence, stepped-decoding references
    models     check_model
    runs       tiny runs of primacy fit, their settings, SignalAt
    signature  what LightningCLI needs of a class's constructor
    tasks      check_task
"""

from primacy.testing.backbones import WithoutStep, check_backbone, check_influence, fixed_batch_losses
from primacy.testing.models import check_model, model_for
from primacy.testing.runs import (
    NO_FIGURES,
    QUIET,
    TINY_RUNS,
    TINY_SETTINGS,
    Pace,
    SignalAt,
    tiny_args,
    tiny_fit,
    tiny_settings,
)
from primacy.testing.tasks import SimulatedProcess, check_task

__all__ = ["NO_FIGURES", "QUIET", "TINY_RUNS", "TINY_SETTINGS", "Pace", "SignalAt", "SimulatedProcess", "WithoutStep",
           "check_backbone", "check_influence", "check_model", "check_task", "fixed_batch_losses", "model_for",
           "tiny_args", "tiny_fit", "tiny_settings"]
