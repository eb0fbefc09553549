"""PrimacyCLI: LightningCLI with model and data in subclass mode, run-directory defaults, resuming, one-line errors."""

from __future__ import annotations

import gc
import json
import logging
import re
import signal
import sys
from pathlib import Path
from typing import Any, NoReturn

import lightning as L
import torch
import yaml
from lightning.pytorch.callbacks import ProgressBar, TQDMProgressBar
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.plugins.environments import ClusterEnvironment, SLURMEnvironment
from lightning.pytorch.utilities import rank_zero_info

from primacy import registry
from primacy.callbacks import ResultsWriter, RunCheckpoint, RunConfig
from primacy.checks import writable_directory
from primacy.cli import console, progress
from primacy.cli.help import HELP_ALL, backbone_help, subcommand_help, wants_help
from primacy.cli.parse_errors import ParseError, check_config_files, check_nulls, explain
from primacy.contract import check_parsed_pairing, link_task_to_model
from primacy.errors import UsageError, find_usage_error
from primacy.rundir.checkpoints import check_checkpoint, checkpoint_step
from primacy.rundir.layout import RunDir
from primacy.rundir.resume import resume_point, wandb_run_id
from primacy.rundir.runs import build_run

TRAINER_DEFAULTS = {
    "logger": {
        "class_path": "lightning.pytorch.loggers.WandbLogger",
        "init_args": {"project": "primacy", "offline": True},
    },
    "plugins": {"class_path": "primacy.files.AtomicCheckpointIO"},
}


TERMINAL_REFRESH_BATCHES = 10  # the progress bar's redraw interval in a terminal: several times a second on a CPU

_UNKNOWN_CLASS = re.compile(r'Parser key "backbone":.*?Expected a path but (\S+) either not accessible', re.DOTALL)


class PrimacyParser(LightningArgumentParser):
    """Turns "no such backbone class" parse errors into one line with the registered names and close matches; any
    other error of the whole command line becomes a ParseError, which PrimacyCLI says in one line."""

    def error(self, message: str, ex: Exception | None = None) -> NoReturn:
        match = _UNKNOWN_CLASS.search(message)
        if match:
            registry.get(match.group(1))  # raises UsageError: not registered, did you mean ...
        usage = find_usage_error(ex)
        if usage is not None:
            raise usage
        if self.exit_on_error:  # not a nested parser trying one of several types: the parse has failed
            raise ParseError(message) from ex
        super().error(message, ex)


class PrimacyCLI(LightningCLI):
    """LightningCLI whose runs keep everything under ``trainer.default_root_dir``; ``fit`` tests the final model."""

    def __init__(self, args: list[str] | None = None, run: bool = True) -> None:
        if args is None:  # the `primacy` command, whose process ends with the run
            # What the imports made lives until the end: out of the garbage collector's sight, full collections during
            # the run scan only newer objects, and the interpreter exits in 0.3 s rather than 1.5 s.
            gc.freeze()
        registry.load_all()  # so short backbone, model and task names (plugins too) resolve
        argv = sys.argv[1:] if args is None else args
        named = argv[0] if isinstance(argv, list) and argv and argv[0] in LightningCLI.subcommands() else None
        self._subcommands = {named: LightningCLI.subcommands()[named]} if named else LightningCLI.subcommands()
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
        if run:
            console.finish_wandb()

    def subcommands(self) -> dict[str, set[str]]:
        """Lightning's subcommands, or only the one a command line names: the parser of each took 0.1 s to build, a
        third of the time of parsing a run's config (which `primacy reproduce` does for every panel)."""
        return self._subcommands

    def _dump_config(self) -> None:
        """Lightning's plain copy of the parsed config (``config_dump``: the model's hyperparameters in its checkpoints
        come from it), without checking again the config the parse has just checked, and through JSON rather than
        YAML: the same values for every config in configs/, in a sixth of the time (0.08 s of a command's 0.5 s)."""
        if hasattr(self, "config_dump"):
            return
        dump = self.parser.dump(self.config, skip_link_targets=False, skip_none=False, format="json", skip_check=True)
        self.config_dump = json.loads(dump)
        if "subcommand" in self.config:
            self.config_dump = self.config_dump[self.config.subcommand]

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

    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        """``--help`` shows the config's task, model and backbone options (``--help-all``: Lightning's full help);
        a bad config file, option or value is one line (a UsageError), not a usage block; so is a model and task
        that do not fit (``check_parsed_pairing``), before any checkpoint is read or anything built or written."""
        self._parse_arguments(parser, args)
        subcommand = self.config.get("subcommand")
        config = self.config[subcommand] if subcommand else self.config
        argv = sys.argv[1:] if args is None else args
        check_nulls(config, self._parser(subcommand), argv if isinstance(argv, list) else [])
        check_parsed_pairing(config.get("model"), config.get("data"))

    def _parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        argv = sys.argv[1:] if args is None else args
        if not isinstance(argv, list):  # a dict or Namespace from Python: nothing typed to explain
            return super().parse_arguments(parser, args)
        subcommand = next((arg for arg in argv[:1] if arg in self.subcommands()), None)
        try:
            check_config_files(argv)
            if wants_help(argv):
                console.show(subcommand_help(subcommand, self._parser(subcommand), argv[1:]))
                raise SystemExit(0)
            if HELP_ALL in argv:
                args = ["--help" if arg == HELP_ALL else arg for arg in argv]
            super().parse_arguments(parser, nested_nulls(args) if isinstance(args, list) else args)
        except ParseError as err:
            backbone_help(argv)
            raise explain(err, argv, self._parser(subcommand)) from None

    def instantiate_trainer(self, **kwargs: Any) -> L.Trainer:
        trainer = {**self._get(self.config_init, "trainer", default={})}
        callbacks = trainer.get("callbacks") or []
        callbacks = list(callbacks) if isinstance(callbacks, (list, tuple)) else [callbacks]
        if progress.wants_line_progress(trainer.get("enable_progress_bar"), callbacks):
            kwargs["callbacks"] = [*callbacks, progress.LineProgress()]
        elif trainer.get("enable_progress_bar") is not False and not any(isinstance(c, ProgressBar) for c in callbacks):
            # Lightning's default bar redraws at every batch, which took 1.4 ms, 7 % of a quickstart step on a CPU.
            kwargs["callbacks"] = [*callbacks, TQDMProgressBar(refresh_rate=TERMINAL_REFRESH_BATCHES)]
        console.quiet_wandb(trainer.get("logger"))
        plugins = _without_slurm_requeue(trainer.get("plugins"))
        if plugins is not None:
            kwargs["plugins"] = plugins
        built = super().instantiate_trainer(**kwargs)
        _refuse_forking_threads(built.strategy, trainer.get("strategy"))
        return built

    def _parse_ckpt_path(self) -> None:
        """Checks a ``--ckpt_path`` file against the config's model. Lightning's own version instead replaces the
        model settings of the config and command line with the checkpoint's, so a mismatch would go unnoticed."""
        subcommand = self.config.get("subcommand")
        if not subcommand:
            return
        config = self.config[subcommand]
        ckpt = config.get("ckpt_path")
        if ckpt is None or ckpt in ("last", "best") or not Path(ckpt).exists():
            return  # before_instantiate_classes names a missing file
        check_checkpoint(ckpt, config.model, subcommand)

    def before_instantiate_classes(self) -> None:
        config = self.config[self.subcommand]
        root = writable_directory("trainer.default_root_dir", config.trainer.default_root_dir or ".")
        ckpt = config.get("ckpt_path")
        if ckpt is not None and ckpt not in ("last", "best") and not Path(ckpt).is_file():
            raise UsageError(f"ckpt_path={ckpt} does not exist: give the path of a checkpoint file")
        logger = config.trainer.logger
        if self.subcommand == "predict":
            _require_predict_data(config.data)
        if self.subcommand == "fit":
            max_steps = config.trainer.max_steps
            if max_steps is None or max_steps < 1:
                raise UsageError(f"trainer.max_steps={max_steps} is invalid: the training stream is endless, so a run "
                                 "needs a budget of at least 1 step")
            if ckpt is None:
                config.ckpt_path = resume_point(root, max_steps, config.model)
                run_id = wandb_run_id(root) if config.ckpt_path is not None else None
                if run_id is not None and _is_wandb(logger):
                    logger.init_args.id = run_id  # the resumed run goes on logging into the same wandb run
                    logger.dict_kwargs = {**(logger.get("dict_kwargs") or {}), "resume": "allow"}
        if _is_wandb(logger) and _follows_the_run(logger.init_args.get("save_dir"), config.get("config")):
            logger.init_args.save_dir = str(root)  # wandb's files live in the run directory too

    def after_fit(self) -> None:
        trainer = self.trainer
        step = _step_reached(trainer)
        if step < trainer.max_steps:  # stopped early by Ctrl-C or SIGTERM, with a checkpoint
            rank_zero_info(f"Stopped at step {step} of {trainer.max_steps}: run the same command again to resume")
            signum = next((cb.stop_signal for cb in trainer.callbacks if isinstance(cb, RunCheckpoint)), None)
            raise SystemExit(128 + (signum or signal.SIGINT))  # 130 after Ctrl-C, 143 after SIGTERM
        if not self.config.fit.test_after_fit:
            rank_zero_info(f"Trained to step {step}: {RunDir.of(trainer).last_checkpoint}")
            return
        trainer.test(self.model, datamodule=self.datamodule)
        metrics = trainer.callback_metrics
        headline = ", ".join(f"{key} {float(metrics[f'test/{key}']):.3f}"
                             for key in getattr(self.model, "HEADLINE", ()) if f"test/{key}" in metrics)
        rank_zero_info(f"Results in {RunDir.of(trainer).results}" + (f": {headline}" if headline else ""))


def nested_nulls(argv: list[str]) -> list[str]:
    """``argv`` with every null given to a setting of a class inside the model's or task's
    (``--model.init_args.backbone.init_args.max_timescale null``) written as a mapping at that class's key
    (``--model.init_args.backbone '{"init_args": {"max_timescale": null}}'``): jsonargparse passes a null that deep
    on as the text 'None', which no setting takes, while it reads the mapping's null as null."""
    out, i = [], 0
    while i < len(argv):
        arg = argv[i]
        key, has_value, value = arg.partition("=")
        if not has_value and i + 1 < len(argv):
            value = argv[i + 1]
        parts = key.removeprefix("--").split(".") if arg.startswith("--") and not arg.startswith("--config") else []
        inner = parts[2:] if parts[1:2] == ["init_args"] else parts[1:]
        if parts[:1] in (["model"], ["data"]) and len(inner) > 1 and value.strip() and _is_null(value):
            nested: Any = None
            for part in reversed(inner[1:]):
                nested = {part: nested}
            out += [f"--{parts[0]}.init_args.{inner[0]}", json.dumps(nested)]
            i += 1 if has_value else 2
            continue
        out.append(arg)
        i += 1
    return out


def _is_null(text: str) -> bool:
    try:
        return yaml.safe_load(text) is None
    except yaml.YAMLError:
        return False


def _step_reached(trainer: L.Trainer) -> int:
    """The optimiser steps this fit reached. A strategy that forks or spawns its processes (ddp_fork, ddp_spawn,
    ddp_notebook) trains in the children and hands back only the weights and metrics, so this process's trainer still
    reads the step it started from; the run's last.ckpt, which every fit writes when it ends or stops, has the step."""
    last = RunDir.of(trainer).last_checkpoint
    if trainer.global_step >= trainer.max_steps or not last.is_file():
        return trainer.global_step
    return max(trainer.global_step, checkpoint_step(last))


def _without_slurm_requeue(plugins: Any) -> list[Any] | None:
    """Inside a SLURM job, the trainer's plugins with ``SLURMEnvironment(auto_requeue=False)`` (None elsewhere, or when
    the config names a cluster environment itself). One owner per signal: submitit's USR2 handler in the launcher
    requeues the job and primacy's RunCheckpoint owns SIGTERM; Lightning's auto-requeue would add a second requeue on
    SIGUSR1 and its own SIGTERM handler, and print that it set them."""
    if not SLURMEnvironment.detect():
        return None
    given = list(plugins) if isinstance(plugins, (list, tuple)) else [] if plugins is None else [plugins]
    if any(isinstance(plugin, ClusterEnvironment) for plugin in given):
        return None
    return [*given, SLURMEnvironment(auto_requeue=False)]


def _refuse_forking_threads(strategy: Any, name: Any) -> None:
    """A CPU run whose processes are forked (ddp_fork, ddp_notebook) from one that runs torch on several threads
    hangs: the children inherit the parent's OpenMP thread pool without its threads, and the first parallel region
    (MKL's FFT, in S4's convolution) waits for them forever."""
    forks = getattr(strategy, "_start_method", None) == "fork"  # DDPStrategy's launcher setting (no public getter)
    threads = torch.get_num_threads()
    if forks and strategy.root_device.type == "cpu" and threads > 1:
        shown = name if isinstance(name, str) else f"{type(strategy).__name__}(start_method='fork')"
        raise UsageError(f"trainer.strategy={shown} forks processes from one that runs torch on {threads} threads, and "
                         "a forked process hangs in the OpenMP threads it inherits: use trainer.strategy=ddp, or set "
                         "OMP_NUM_THREADS=1")


def _require_predict_data(data: Any) -> None:
    """Refuses ``primacy predict`` for a task without predict data (Lightning would fail with a traceback)."""
    task = registry.import_class(data.class_path) if data is not None and data.get("class_path") else None
    if task is not None and task.predict_dataloader is L.LightningDataModule.predict_dataloader:
        raise UsageError(f"predict: the task {task.__name__} has no predict data (no predict_dataloader): use "
                         "primacy test, which scores its held-out sets and writes <run>/results")


def _follows_the_run(save_dir: str | None, config_files: list[Any] | None) -> bool:
    """Whether wandb's save_dir is the run directory's, wherever that is now: unset, or what a run's config.yaml
    wrote for it, its own trainer.default_root_dir (that run's directory then), so that a run moved or copied and
    given its new directory logs there, not into the directory it was trained in."""
    if save_dir in (None, "."):
        return True
    for file in config_files or ():
        path = Path(str(file)) if file is not None else None
        if path is None or not path.is_file():  # a config given inline, not as a file
            continue
        saved = yaml.safe_load(path.read_text())
        trainer = saved.get("trainer") if isinstance(saved, dict) else None
        root = trainer.get("default_root_dir") if isinstance(trainer, dict) else None
        if root is not None and Path(root).resolve() == Path(save_dir).resolve():
            return True
    return False


def _is_wandb(logger: Any) -> bool:
    return getattr(logger, "class_path", "").endswith("WandbLogger") and hasattr(logger, "init_args")


class _Parsed(Exception):  # noqa: N818 - not an error: carries the parsed config out of LightningCLI.__init__
    def __init__(self, config: Any) -> None:
        super().__init__()
        self.config = config


class _ParseOnly(PrimacyCLI):
    def before_instantiate_classes(self) -> None:
        raise _Parsed(self.config[self.subcommand])


def parse_run(args: list[str]) -> Any:
    """The config ``primacy ARGS`` would run with (a jsonargparse Namespace), checked as ``primacy`` checks it but
    with nothing built or written; a bad file, option or value raises a UsageError."""
    seed_log = logging.getLogger("lightning.fabric.utilities.seed")  # "Seed set to 0": nothing is run here
    level = seed_log.level
    seed_log.setLevel(logging.WARNING)
    try:
        _ParseOnly(args=args)
    except _Parsed as parsed:
        return parsed.config
    finally:
        seed_log.setLevel(level)
    raise AssertionError("PrimacyCLI returned without parsing")  # pragma: no cover


def check_run(args: list[str]) -> Any:
    """``parse_run``, then the run's model and task built once and dropped: what their constructors refuse (n_items=0,
    a vocabulary too small, sequences too long for memory) is refused as ``primacy fit`` would refuse it at its
    start, but before a launcher starts or queues any run. Nothing is trained or written."""
    config = parse_run(args)
    build_run(config.model, config.data)
    return config
