"""Where the time of a whole `primacy fit --config configs/quickstart.yaml` goes, beside a bare training loop.

Runs the fit in a child process as the `primacy fit` command does (same CLI, config, callbacks, logger, validation
and test), with timers wrapped around the pieces that do the work: data generation and loading, forward
(training_step), backward, gradient clipping, optimiser and schedule steps, self.log and the logger, each callback,
checkpoints, metric updates and computes, figures and result files, wandb start and finish, garbage collection.
Lightning's own profiler is not used: its ~50 timed hooks per step would cost more than some of what it measures.
A timer costs about a microsecond; time inside no timer is "other (Lightning loop, untimed)". The process's start
(interpreter, imports) and exit are timed from outside.

The reference is a bare loop over a second copy of the model and the same training batches: training_step (without
self.log), backward, clipping, AdamW, schedule, zero_grad, written by hand. One of its steps runs after every
``--bare-every`` steps of the Trainer, so both see the same load on a shared machine; they are not counted in the fit's
phases and do not change its results (separate model, optimiser and data generators; global generators restored).

Prints the phases of the fit (seconds, share of the wall time), each phase's breakdown, and the per-step costs of
the Trainer and of the bare loop side by side. No thresholds.

    python benchmarks/quickstart_profile.py [--steps 6000] [--val-every 1000] [--bare-every 10]
        [--run-dir DIR] [--terminal] [--json FILE] [-- more primacy fit arguments]

The default is the whole quickstart (a few minutes on 2 idle cores); `--steps 600 --val-every 200` is a quick
look. Absolute times depend on how busy the machine is; the shares and the Trainer / bare ratio much less.
"""

from __future__ import annotations

import time

_T0 = time.perf_counter()  # before the heavy imports

import argparse
import functools
import gc
import json
import os
import pty
import shutil
import subprocess
import sys
import tempfile
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning.pytorch.trainer.call as lightning_call
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loops.fetchers import _PrefetchDataFetcher

from primacy import figures, files
from primacy.callbacks.checkpointing import rng_states, set_rng_states
from primacy.cli import console
from primacy.cli.lightning import PrimacyCLI
from primacy.models.optim import param_groups, warmup_cosine
from primacy.rundir import results
from primacy.tasks.verification import CyclicDesign

_T_IMPORTED = time.perf_counter()
ROOT = Path(__file__).resolve().parents[1]
TRAIN, BARE = "training steps", "bare loop (reference, not in the fit)"
CALLBACK_HOOKS = ("setup", "on_fit_start", "on_train_start", "on_train_batch_start", "on_train_batch_end",
                  "on_before_backward", "on_after_backward", "on_before_optimizer_step", "on_before_zero_grad",
                  "on_validation_start", "on_validation_batch_end", "on_validation_epoch_end", "on_validation_end",
                  "on_train_end", "on_fit_end", "on_test_start", "on_test_batch_end", "on_test_epoch_end",
                  "on_test_end", "on_save_checkpoint", "teardown")


class Stopwatch:
    """Wall time by phase, and within each phase by label, exclusive of nested timed calls (so labels add up)."""

    def __init__(self, phase: str) -> None:
        self.phase, self._since = phase, time.perf_counter()
        self.phases: dict[str, float] = defaultdict(float)
        self.entries: dict[str, int] = defaultdict(int)
        self.labels: dict[tuple[str, str], float] = defaultdict(float)
        self.calls: dict[tuple[str, str], int] = defaultdict(int)
        self._inner: list[float] = []  # time of timed calls nested in each open timed call

    def switch(self, phase: str) -> str:
        """Start ``phase`` now; returns the phase that ended."""
        now, previous = time.perf_counter(), self.phase
        self.phases[previous] += now - self._since
        self.entries[phase] += 1
        self.phase, self._since = phase, now
        return previous

    def wrap(self, fn: Callable, label: str) -> Callable:
        @functools.wraps(fn)  # keeps __wrapped__, so Lightning still sees a hook as the model's own
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            self._inner.append(0.0)
            try:
                return fn(*args, **kwargs)
            finally:
                elapsed = time.perf_counter() - start
                key = (self.phase, label)
                self.labels[key] += elapsed - self._inner.pop()
                self.calls[key] += 1
                if self._inner:
                    self._inner[-1] += elapsed

        return timed

    def gc_callback(self, stage: str, info: dict[str, int]) -> None:
        """For ``gc.callbacks``: time in the garbage collector, by generation, out of the call it interrupted."""
        if stage == "start":
            self._inner.append(0.0)
            self._gc_start = time.perf_counter()
            return
        elapsed = time.perf_counter() - self._gc_start
        key = (self.phase, f"garbage collection (generation {info['generation']})")
        self.labels[key] += elapsed - self._inner.pop()
        self.calls[key] += 1
        if self._inner:
            self._inner[-1] += elapsed

    def aside(self, phase: str, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` in ``phase``, invisible to the timed calls it runs inside of."""
        saved, self._inner = self._inner, []
        start, previous = time.perf_counter(), self.switch(phase)
        try:
            return fn()
        finally:
            self.switch(previous)
            self._inner = saved
            if saved:
                saved[-1] += time.perf_counter() - start

    def in_phase(self, fn: Callable, phase: Callable[[], str]) -> Callable:
        @functools.wraps(fn)
        def switched(*args: Any, **kwargs: Any) -> Any:
            previous = self.switch(phase())
            try:
                return fn(*args, **kwargs)
            finally:
                self.switch(previous)

        return switched


def patch(obj: Any, name: str, watch: Stopwatch, label: str) -> None:
    """Time ``obj.name`` under ``label``; a name this version of primacy lacks is left out, so older checkouts can
    be profiled (``PYTHONPATH=OLD_CHECKOUT python benchmarks/quickstart_profile.py``)."""
    if hasattr(obj, name):
        setattr(obj, name, watch.wrap(getattr(obj, name), label))


class BareLoop:
    """The reference loop, on its own copy of the run's model and task (built by the CLI from the same arguments)."""

    def __init__(self, fit: list[str], watch: Stopwatch) -> None:
        class Built(Exception):  # carries the built objects out of the CLI
            pass

        class BuildOnly(PrimacyCLI):
            def before_fit(self) -> None:
                raise Built(self.model, self.datamodule, self.trainer)

        run_dir = Path(tempfile.mkdtemp(prefix="quickstart_bare_")) / "run"
        try:
            BuildOnly(args=[*fit, "--trainer.default_root_dir", str(run_dir), "--trainer.logger", "false"])
        except Built as built:
            model, task, trainer = built.args
        shutil.rmtree(run_dir.parent, ignore_errors=True)
        hp = model.hparams
        model.log_dict = model.log = lambda *a, **k: None  # no trainer to log to
        model.train()
        optimizer = torch.optim.AdamW(param_groups(model, hp.lr, hp.weight_decay), lr=hp.lr, betas=hp.betas,
                                      eps=hp.eps)
        schedule = torch.optim.lr_scheduler.LambdaLR(
            optimizer, functools.partial(warmup_cosine, warmup_steps=hp.warmup_steps, total_steps=trainer.max_steps))
        self.parameters = [p for p in model.parameters() if p.requires_grad]
        self.clip, self.batch_size, self.steps = trainer.gradient_clip_val, task.batch_size, 0
        self.data = watch.wrap(task.stream_batch, "data generation")
        self.forward = watch.wrap(model.training_step, "forward (training_step)")
        self.backward = watch.wrap(torch.Tensor.backward, "backward")
        self.clip_norm = watch.wrap(torch.nn.utils.clip_grad_norm_, "gradient clipping")
        self.step = watch.wrap(optimizer.step, "optimizer step (AdamW)")
        self.zero_grad = watch.wrap(optimizer.zero_grad, "zero_grad")
        self.schedule = watch.wrap(schedule.step, "lr schedule")

    def run(self, steps: int) -> None:
        for _ in range(steps):
            loss = self.forward(self.data(self.steps, self.batch_size), self.steps)
            self.zero_grad()
            self.backward(loss)
            if self.clip:
                self.clip_norm(self.parameters, self.clip)
            self.step()
            self.schedule()
            self.steps += 1


class PhaseTimer(Callback):
    """First callback of the run: marks the start and end of the training steps, times what exists only then, and
    runs the bare loop's steps."""

    def __init__(self, watch: Stopwatch, make_bare: Callable[[], BareLoop], bare_every: int) -> None:
        self.watch, self.make_bare, self.bare_every = watch, make_bare, bare_every
        self.bare: BareLoop | None = None

    def on_train_start(self, trainer, pl_module) -> None:
        # Built now, so that the fit's own start-up is measured as in a plain run; building seeds the global
        # generators, which the fit gets back as they were.
        states = rng_states()
        self.bare = self.watch.aside("bare loop setup", self.make_bare)
        set_rng_states(states)
        for optimizer in trainer.optimizers:
            patch(optimizer, "zero_grad", self.watch, "zero_grad")
            optimizer.step = self._timed_step(optimizer.step)
        experiment = getattr(trainer.logger, "experiment", None)
        if experiment is not None and hasattr(experiment, "log"):
            patch(experiment, "log", self.watch, "logging: logger (wandb)")
        self.watch.switch(TRAIN)

    def _timed_step(self, step: Callable) -> Callable:
        """The optimiser's step, timed apart from the closure Lightning gives it: the closure runs training_step,
        backward and clipping (timed by their own labels) and Lightning's machinery around them."""
        step = self.watch.wrap(step, "optimizer step (AdamW)")

        @functools.wraps(step)
        def timed(closure: Callable | None = None, **kwargs: Any) -> Any:
            if closure is not None:
                closure = self.watch.wrap(closure, "Lightning: optimisation closure")
            return step(closure=closure, **kwargs)

        return timed

    def on_train_batch_end(self, trainer, *args: Any) -> None:
        if trainer.global_step % self.bare_every == 0:
            self.watch.aside(BARE, lambda: self.bare.run(1))

    def on_train_end(self, trainer, pl_module) -> None:
        self.watch.switch("end of fit (final checkpoint, Δt figures)")


def timed_cli(watch: Stopwatch, timer: PhaseTimer) -> type[PrimacyCLI]:
    class TimedCLI(PrimacyCLI):
        def instantiate_trainer(self, **kwargs: Any):
            trainer = super().instantiate_trainer(**kwargs)
            trainer.callbacks.insert(0, timer)
            return trainer

        def before_fit(self) -> None:
            model, trainer, task = self.model, self.trainer, self.datamodule
            for name in ("training_step", "validation_step", "test_step"):
                patch(model, name, watch, f"forward ({name})")
            patch(model, "lr_scheduler_step", watch, "lr schedule")  # not the scheduler: checkpoints pickle it
            for name in ("log", "log_dict"):
                patch(model, name, watch, "logging: self.log")
            for metric in ("val_accuracy", "test_accuracy", "val_loss", "test_loss"):
                if hasattr(model, metric):
                    patch(getattr(model, metric), "update", watch, "metric update")
                    patch(getattr(model, metric), "compute", watch, "metric compute")
            patch(task, "stream_batch", watch, "data generation")
            patch(trainer.strategy, "backward", watch, "backward")
            patch(trainer.strategy, "batch_to_device", watch, "data loading")
            patch(trainer.precision_plugin, "clip_gradients", watch, "gradient clipping")
            patch(trainer, "save_checkpoint", watch, "checkpointing")
            connector = trainer._logger_connector
            for name in ("update_train_step_metrics", "update_eval_step_metrics", "update_eval_epoch_metrics"):
                patch(connector, name, watch, "logging: Lightning")
            if trainer.logger is not None:
                for name in ("log_metrics", "log_image", "log_hyperparams"):
                    if hasattr(trainer.logger, name):
                        patch(trainer.logger, name, watch, "logging: logger (wandb)")
            for callback in trainer.callbacks:
                if callback is timer:
                    continue
                for hook in CALLBACK_HOOKS:
                    if getattr(type(callback), hook) is not getattr(Callback, hook):
                        patch(callback, hook, watch, f"callback: {type(callback).__name__}")
            val_loop = trainer.fit_loop.epoch_loop.val_loop
            val_loop.run = watch.in_phase(val_loop.run, lambda: "sanity check" if trainer.sanity_checking
                                          else "validation")
            watch.switch("start of fit (logger, optimiser, summary, sanity check)")

        def after_fit(self) -> None:
            watch.switch("test (after fit)")
            super().after_fit()
            watch.switch("wrap-up (wandb finish)")

    return TimedCLI


def instrument_modules(watch: Stopwatch) -> None:
    """Module-level functions the callbacks call through their module, and classes every loader uses."""
    for module, name in ((figures.accuracy, "heatmap"), (figures.accuracy, "contiguity"),
                         (figures.dt, "dt_trajectory"), (figures.dt, "dt_histogram")):
        patch(module, name, watch, "figures: draw")
    patch(files, "save_figure", watch, "figures: save")
    for name in ("write", "write_dt_history", "summary"):
        patch(results, name, watch, "result files")
    patch(console, "finish_wandb", watch, "wandb finish")
    _PrefetchDataFetcher.__next__ = watch.wrap(_PrefetchDataFetcher.__next__, "data loading")
    CyclicDesign.batch = watch.wrap(CyclicDesign.batch, "data generation")
    lightning_call._call_callback_hooks = watch.wrap(lightning_call._call_callback_hooks, "callbacks: Lightning")
    try:
        import wandb
    except ImportError:
        return
    patch(wandb, "init", watch, "wandb start")


def child_cpu_seconds() -> float:
    """CPU time (user + system) of the processes this one started that are still running (wandb's service)."""
    tick = os.sysconf("SC_CLK_TCK")

    def children(pid: int) -> list[int]:
        found = []
        for task in Path(f"/proc/{pid}/task").glob("*"):
            try:
                found += [int(p) for p in (task / "children").read_text().split()]
            except OSError:
                pass
        return found

    total, todo = 0.0, children(os.getpid())
    while todo:
        pid = todo.pop()
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
        todo += children(pid)
    return total


def table(rows: list[tuple[Any, ...]], header: tuple[str, ...]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
             for r in [header, *rows]]
    return "\n".join([lines[0], "-" * len(lines[0]), *lines[1:]])


def report(numbers: dict) -> None:
    phases, steps, bare_steps = numbers["phases"], numbers["steps"], numbers["bare_steps"]
    labels = defaultdict(dict)  # phase -> label -> (seconds, calls)
    for key, value in numbers["labels"].items():
        phase, label = key.split("\t")
        labels[phase][label] = value
    wall = sum(phases.values())
    print(f"\nWhole `primacy fit`: {wall:.1f} s wall, {steps} steps ({steps / phases[TRAIN]:.1f} steps/s), "
          f"{numbers['validations']} validations; CPU {numbers['cpu']:.1f} s in the process, "
          f"{numbers['helper_cpu']:.1f} s in its helper processes (wandb); torch threads {numbers['threads']}")
    print(table([(p, f"{s:.2f}", f"{s / wall:.1%}") for p, s in phases.items()], ("phase", "seconds", "share")))
    for phase, seconds in phases.items():
        rows = sorted(((label, t, n) for label, (t, n) in labels[phase].items()), key=lambda r: -r[1])
        if not rows:
            continue
        rows.append(("other (Lightning loop, untimed)", seconds - sum(t for _, t, _ in rows), ""))
        print(f"\n{phase}: {seconds:.2f} s")
        print(table([(label, f"{t:.3f}", f"{t / wall:.1%}", n) for label, t, n in rows],
                    ("", "seconds", "of fit", "calls")))

    def per_step(phase: str, seconds: float, n: int) -> dict[str, float]:
        parts = {label: t / n for label, (t, _) in labels[phase].items()}
        return {**parts, "other (Lightning loop, untimed)": seconds / n - sum(parts.values())}

    trainer = per_step(TRAIN, phases[TRAIN], steps)
    bare = per_step(BARE, numbers["bare_seconds"], bare_steps)
    order = sorted(set(trainer) | set(bare), key=lambda label: -trainer.get(label, 0.0))
    rows = [(label, f"{1e3 * trainer.get(label, 0):.3f}", f"{1e3 * bare[label]:.3f}" if label in bare else "-")
            for label in order]
    t_step, b_step = sum(trainer.values()), sum(bare.values())
    rows.append(("total per step", f"{1e3 * t_step:.3f}", f"{1e3 * b_step:.3f}"))
    print(f"\nPer training step (validation excluded): Trainer {1 / t_step:.1f} steps/s, bare loop {1 / b_step:.1f} "
          f"steps/s ({bare_steps} steps between the Trainer's); Trainer / bare = {t_step / b_step:.2f}")
    print(table(rows, ("ms per step", "Trainer", "bare loop")))


def profile(fit: list[str], run_dir: Path, bare_every: int) -> dict:
    """The fit, instrumented, in this process: the numbers ``report`` prints (but the process's start and exit)."""
    console.setup()
    watch = Stopwatch("CLI: parse config, build model, task and trainer")
    instrument_modules(watch)
    gc.callbacks.append(watch.gc_callback)
    timer = PhaseTimer(watch, functools.partial(BareLoop, fit, watch), bare_every)
    cpu_before = sum(os.times()[:2])
    sys.argv = ["primacy", *fit, "--trainer.default_root_dir", str(run_dir)]  # as the command runs it: args=None
    cli = timed_cli(watch, timer)()
    watch.switch("done")
    phases = {"imports": _T_IMPORTED - _T0,
              **{p: s for p, s in watch.phases.items() if p not in ("done", "bare loop setup", BARE)}}
    return {"phases": phases, "steps": cli.trainer.global_step, "bare_steps": timer.bare.steps,
            "bare_seconds": watch.phases[BARE], "threads": torch.get_num_threads(),
            "validations": watch.entries["validation"],
            "cpu": sum(os.times()[:2]) - cpu_before, "helper_cpu": child_cpu_seconds(),
            "labels": {f"{p}\t{label}": (t, watch.calls[(p, label)]) for (p, label), t in watch.labels.items()}}


def run_in_terminal(command: list[str]) -> float:
    """Run ``command`` with its stderr a pseudo-terminal, whose output is read and dropped; returns when it ended."""
    reader, writer = pty.openpty()
    process = subprocess.Popen(command, stderr=writer)
    os.close(writer)
    while True:
        try:
            if not os.read(reader, 65536):
                break
        except OSError:  # EIO: the process has closed the terminal
            break
    code = process.wait()
    ended = time.time()
    os.close(reader)
    if code:
        raise subprocess.CalledProcessError(code, command)
    return ended


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(ROOT / "configs" / "quickstart.yaml"))
    parser.add_argument("--steps", type=int, help="trainer.max_steps (default: the config's)")
    parser.add_argument("--val-every", type=int, help="trainer.val_check_interval (default: the config's)")
    parser.add_argument("--bare-every", type=int, default=10, help="a step of the bare loop after every this many "
                        "steps of the Trainer")
    parser.add_argument("--run-dir", type=Path, help="run directory (default: a temporary one, removed afterwards)")
    parser.add_argument("--terminal", action="store_true", help="stderr a pseudo-terminal, as when run in a terminal "
                        "(a progress bar rather than lines; what it draws is discarded)")
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)  # run the fit and write the numbers here
    parser.add_argument("extra", nargs="*", help="more `primacy fit` arguments (after --)")
    args = parser.parse_args()
    if args.child:  # extra is the whole fit command
        numbers = profile(args.extra, args.run_dir, args.bare_every)
        args.child.write_text(json.dumps({**numbers, "t0": time.time() - (time.perf_counter() - _T0),
                                          "end": time.time()}))
        return  # the parent times this process's exit

    fit = ["fit", "--config", args.config]
    if args.steps is not None:
        fit += ["--trainer.max_steps", str(args.steps)]
    if args.val_every is not None:
        fit += ["--trainer.val_check_interval", str(args.val_every)]
    run_dir = args.run_dir or Path(tempfile.mkdtemp(prefix="quickstart_profile_")) / "run"
    if run_dir.exists():
        sys.exit(f"{run_dir} exists: give a new --run-dir (a finished run would be refused, an unfinished resumed)")
    out = Path(tempfile.mkdtemp(prefix="quickstart_numbers_")) / "numbers.json"
    command = [sys.executable, __file__, "--child", str(out), "--run-dir", str(run_dir), "--bare-every",
               str(args.bare_every), "--", *fit, *args.extra]
    started = time.time()
    if args.terminal:
        ended = run_in_terminal(command)
    else:
        subprocess.run(command, check=True)
        ended = time.time()
    numbers = json.loads(out.read_text())
    shutil.rmtree(out.parent, ignore_errors=True)
    numbers["phases"] = {"interpreter start": numbers["t0"] - started, **numbers["phases"],
                         "interpreter exit": ended - numbers["end"]}
    report(numbers)
    if args.json:
        args.json.write_text(json.dumps(numbers, indent=1))
    if args.run_dir is None:
        shutil.rmtree(run_dir.parent, ignore_errors=True)


if __name__ == "__main__":
    main()
