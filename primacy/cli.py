"""The ``primacy`` command: LightningCLI with model and data in subclass mode, plus run-directory defaults."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import NoReturn

import lightning as L
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI

from primacy import aggregate, plots, registry
from primacy.analyze import analyze_command
from primacy.callbacks import ResultsWriter, RunCheckpoint, RunConfig
from primacy.errors import UsageError, find_usage_error
from primacy.runs import link_task_to_model
from primacy.ssm.dense import impulse_responses
from primacy.ssm.hippo import MEASURES, hippo

TRAINER_DEFAULTS = {
    "logger": {
        "class_path": "lightning.pytorch.loggers.WandbLogger",
        "init_args": {"project": "primacy", "offline": True},
    },
}


_UNKNOWN_CLASS = re.compile(r'Parser key "backbone":.*?Expected a path but (\S+) either not accessible', re.DOTALL)


class PrimacyParser(LightningArgumentParser):
    """Turns "no such backbone class" parse errors into one line with the registered names and close matches."""

    def error(self, message: str, ex: Exception | None = None) -> NoReturn:
        match = _UNKNOWN_CLASS.search(message)
        if match:
            registry.get(match.group(1))  # raises UsageError: not registered, did you mean ...
        usage = find_usage_error(ex)
        if usage is not None:
            raise usage
        super().error(message, ex)


class PrimacyCLI(LightningCLI):
    """LightningCLI whose runs keep everything under ``trainer.default_root_dir``; ``fit`` tests the final model."""

    def __init__(self, args: list[str] | None = None, run: bool = True) -> None:
        registry.load_all()  # so short backbone names (plugins too) resolve
        super().__init__(
            L.LightningModule,
            L.LightningDataModule,
            subclass_mode_model=True,
            subclass_mode_data=True,
            save_config_callback=RunConfig,
            trainer_defaults=TRAINER_DEFAULTS,
            auto_configure_optimizers=False,
            parser_class=PrimacyParser,
            args=args,
            run=run,
        )

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        link_task_to_model(parser)
        parser.add_lightning_class_args(RunCheckpoint, "checkpoint")
        parser.add_lightning_class_args(ResultsWriter, "results")

    def _prepare_subcommand_parser(self, klass: type, subcommand: str, **kwargs) -> LightningArgumentParser:
        parser = super()._prepare_subcommand_parser(klass, subcommand, **kwargs)
        if subcommand == "fit":
            parser.add_argument("--test_after_fit", type=bool, default=True,
                                help="Test the final model when training ends (writes <run>/results).")
        return parser

    def before_instantiate_classes(self) -> None:
        config = self.config[self.subcommand]
        root = Path(config.trainer.default_root_dir or ".")
        ckpt = config.get("ckpt_path")
        if ckpt is not None and ckpt not in ("last", "best") and not Path(ckpt).is_file():
            raise UsageError(f"ckpt_path={ckpt} does not exist: give the path of a checkpoint file")
        if self.subcommand == "fit" and ckpt is None and (root / "checkpoints" / "last.ckpt").exists():
            raise UsageError(
                f"trainer.default_root_dir={root} already holds a trained run: choose another directory, "
                f"or resume it with --ckpt_path {root / 'checkpoints' / 'last.ckpt'}"
            )
        logger = config.trainer.logger
        if hasattr(logger, "init_args") and "save_dir" in logger.init_args and logger.init_args.save_dir in (None, "."):
            logger.init_args.save_dir = str(root)  # wandb's files live in the run directory too

    def after_fit(self) -> None:
        if self.config.fit.test_after_fit and not self.trainer.interrupted:
            self.trainer.test(self.model, datamodule=self.datamodule)


def aggregate_command(args: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="primacy aggregate", description=aggregate.__doc__)
    parser.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run directories that differ only by seed")
    parser.add_argument("--out", required=True, help="directory for the aggregated results")
    options = parser.parse_args(args)
    summary = aggregate.aggregate(options.runs, options.out)
    print(f"{summary['n_runs']} runs -> {options.out}: overall accuracy {summary['overall_accuracy']['mean']:.3f}, "
          f"early_minus_late {summary['early_minus_late']['mean']:+.3f}")


def kernels_command(args: list[str]) -> None:
    """Fig. 1: continuous vs discretised HiPPO impulse responses, to see where bilinear discretisation breaks."""
    parser = argparse.ArgumentParser(prog="primacy kernels", description=kernels_command.__doc__)
    parser.add_argument("--measure", default="legs", choices=MEASURES)
    parser.add_argument("--dt", type=float, nargs="+", default=[0.001, 0.01, 0.1, 1.0])
    parser.add_argument("--length", type=int, default=256, help="number of steps j (τ = jΔt)")
    parser.add_argument("--degrees", type=int, nargs="+", default=[2, 3, 8, 15, 32, 63])
    parser.add_argument("--state-size", type=int, default=64, help="N, the HiPPO matrix size")
    parser.add_argument("--out", required=True, help="figure file (.png, .pdf, ...)")
    options = parser.parse_args(args)
    bad = [d for d in options.degrees if not 0 <= d < options.state_size]
    if bad:
        raise UsageError(f"degrees={bad} are out of range: each must lie in [0, state-size={options.state_size})")
    if any(dt <= 0 for dt in options.dt) or options.length < 1:
        raise UsageError(f"dt={options.dt}, length={options.length} are invalid: Δt must be positive, length >= 1")
    a, b = hippo(options.measure, options.state_size)
    curves = {dt: tuple(x.numpy() for x in impulse_responses(a, b, dt, options.length)) for dt in options.dt}
    fig = plots.kernel_discrepancy(curves, options.degrees, f"HiPPO-{options.measure}, N = {options.state_size}")
    Path(options.out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(options.out, dpi=150)
    print(f"wrote {options.out}")


def models_command(args: list[str]) -> None:
    """List every registered backbone: its name (for configs), distribution and one-line description."""
    argparse.ArgumentParser(prog="primacy models", description=models_command.__doc__).parse_args(args)
    rows = registry.describe()
    width = max(len(row["name"]) for row in rows)
    dist_width = max(len(row["distribution"]) for row in rows)
    for row in rows:
        print(f"{row['name']:<{width}}  {row['distribution']:<{dist_width}}  {row['description']}")


COMMANDS = {"aggregate": aggregate_command, "analyze": analyze_command, "kernels": kernels_command,
            "models": models_command}


def main(args: list[str] | None = None) -> None:
    argv = sys.argv[1:] if args is None else list(args)
    try:
        if argv and argv[0] in COMMANDS:
            COMMANDS[argv[0]](argv[1:])
        else:
            PrimacyCLI(args=args)
    except Exception as err:
        usage = find_usage_error(err)
        if usage is None:
            raise
        print(f"primacy: error: {usage}", file=sys.stderr)
        raise SystemExit(2) from None
