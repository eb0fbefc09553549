"""Time of one training step of every paper-scale config on a GPU (float32 and bf16-mixed, torch.compile off and
on), its peak memory, and what that implies for the config's ``trainer.max_steps``.

The model and task are built from the config exactly as ``primacy fit --config X`` builds them (``parse_run`` checks
and links the config, then its ``model`` and ``data`` sections are instantiated), and the step is what Lightning's
automatic optimisation does each step: ``training_step`` under autocast for bf16-mixed, backward, gradient clipping
as ``trainer.gradient_clip_val`` says, the optimiser and learning-rate scheduler from ``configure_optimizers``
(``accumulate_grad_batches`` micro-batches per optimiser step). The loop runs by hand rather than through a Trainer so
that only the step is timed: a Trainer would add a DataLoader, callbacks, checkpoints and a logger, whose cost per
step is small and not what a GPU changes. ``self.log`` is a no-op here. One training batch (``stream_batch``) is made
per config and reused; the ``data ms`` column is the time to make one on one CPU thread (what one DataLoader worker
does), and ``workers`` how many workers keep up with the step: raise ``--data.init_args.num_workers`` to at least that.
``torch.compile`` wraps the model's forward, as Lightning does with a compiled LightningModule.

Peak memory is ``torch.cuda.max_memory_allocated`` on a GPU. On the CPU it is the peak of live tensor bytes during
one extra eager step, counted as each operation makes and frees them (parameters, gradients, optimiser state,
activations; not the allocator's cache or Python objects), and "n/a" for compiled steps, whose buffers it cannot see.

    python benchmarks/gpu.py                         # every paper config, float32 + bf16-mixed, compile off/on
    python benchmarks/gpu.py --configs fig3b-hippo-legs-L128 mamba-L128 --precision bf16-mixed --out gpu.csv
    python benchmarks/gpu.py --device cpu --scale cpu          # configs/cpu/ twins: tests the script on a laptop

Any other ``--key value`` goes to every config, as for ``primacy fit`` (``--trainer.accumulate_grad_batches 4``).
"""

from __future__ import annotations

import argparse
import difflib
import gc
import math
import statistics
import sys
import time
import warnings
import weakref
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from primacy.checks import positive, writable_file
from primacy.errors import ArgumentParser, UsageError, find_usage_error

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
PROG = "benchmarks/gpu.py"
NO_CUDA = "no CUDA device: nothing to benchmark (use --device cpu --scale cpu to test the script)"
PRECISIONS = ("32", "bf16-mixed")
# Every paper config (configs/paper/NAME.yaml) and its CPU-scale twin, relative to configs/ (the same panel at a
# quarter of the list length; primacy.workflows.pages.FIGURES pairs the figure panels the same way).
TWINS = {
    "fig3a-s4-legs-L128": "cpu/fig3a-s4-legs-L32",
    "fig3b-hippo-legs-L128": "cpu/fig3b-hippo-legs-L32",
    "fig3c-hippo-lagt-L128": "cpu/fig3c-hippo-lagt-L32",
    "fig3d-hippo-fout-L128": "cpu/fig3d-hippo-fout-L32",
    "fig3e-hippo-legs-dt1-L128": "cpu/fig3e-hippo-legs-dt1-L32",
    "fig3f-hippo-legs-L64": "cpu/fig3f-hippo-legs-L16",
    "fig3g-hippo-legs-L256": "cpu/fig3g-hippo-legs-L64",
    "fig3h-lstm-L128": "cpu/fig3h-lstm-L32",
    "fig4-hippo-legs-dtsmall-L128": "cpu/fig4-hippo-legs-dtsmall-L32",
    "fig4-hippo-legs-frozen-dt-L128": "cpu/fig4-hippo-legs-frozen-dt-L32",
    "transformer-L128": "cpu/transformer-L32",
    "mamba-L128": "quickstart-mamba",  # no configs/cpu/ twin: the Mamba quickstart (L = 32, H = 64, batch 64)
    "xlstm-L128": "quickstart-xlstm",  # the xLSTM quickstart (L = 32, d_model 64, batch 64)
    "verification-s4d-legs-L128": "quickstart",  # S4D with frozen LegS at L = 32: the quickstart
    "induction-4L": "cpu/induction-attn-2L",
    **{f"induction-v64-{paper}": f"cpu/induction-v64-{cpu}"  # the influence figure's small-vocabulary task
       for paper, cpu in (("attn-4L", "attn-2L"), ("mamba-4L", "mamba-2L"), ("xlstm-4L", "xlstm-2L"), ("s4d", "s4d"))},
    "reconstruction-s4d-legs-L128": "quickstart-reconstruction",  # S4D, L = 12, K = 32, delays 0-16
    "recall-s4d-legs-L128": "quickstart-recall",  # S4D, L = 8 pairs, 16 keys, 8 values
    "free-recall-s4d-legs-L128": "quickstart-free-recall",  # S4D, L = 32, K = 512
    "free-recall-lstm-L128": "quickstart-free-recall-lstm",  # LSTM H 128, L = 32, K = 512
    "free-recall-transformer-L128": "quickstart-free-recall-transformer",  # 2 x 128, L = 32, K = 512
    # the human list lengths (primacy humans): the same L at both scales, the quickstarts' models at CPU scale
    **{f"free-recall-{model}-L{n}": f"cpu/free-recall-{model}-L{n}"
       for model in ("s4d-legs", "lstm", "transformer", "hybrid-ssm", "hybrid-w2", "hybrid-w8") for n in (24, 16)},
}


@dataclass
class Row:
    config: str
    precision: str
    compile: str
    step_ms: float | None = None
    steps_per_s: float | None = None
    peak_mib: float | None = None
    max_steps: int | None = None
    hours: float | None = None
    first_step_s: float | None = None
    data_ms: float | None = None
    workers: int | None = None
    batch_size: int | None = None
    note: str = ""


def parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0], allow_abbrev=False,
                       epilog="Any other --key value is passed to every config, as for primacy fit.")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--scale", choices=("paper", "cpu"), default="paper",
                   help="configs/paper/ or their CPU-scale twins (configs/cpu/, quickstart-mamba, quickstart)")
    p.add_argument("--configs", nargs="+", metavar="NAME",
                   help="config names at either scale (fig3b-hippo-legs-L128 or fig3b-hippo-legs-L32) or YAML paths; "
                        "default: all of " + ", ".join(TWINS))
    p.add_argument("--precision", choices=(*PRECISIONS, "both"), default="both")
    p.add_argument("--compile", choices=("off", "on", "both"), help="torch.compile the forward (default: both on "
                   "CUDA, off on the CPU, where compiling takes minutes)")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first (the first one compiles)")
    p.add_argument("--repeats", type=int, default=20, help="timed steps; the table shows their median")
    p.add_argument("--batch_size", type=int, help="instead of the config's data.init_args.batch_size")
    p.add_argument("--out", help="also write the table to this CSV file")
    return p


def main(argv: list[str] | None = None) -> int:
    """Prints the table; returns 1 when a step failed for a reason other than compiling or memory, else 0."""
    try:
        options, overrides = parser().parse_known_args(sys.argv[1:] if argv is None else argv)
        if options.device == "cuda" and not torch.cuda.is_available():
            print(NO_CUDA)
            return 0
        from primacy.cli import console  # imports Lightning: only once there is something to run

        console.setup()
        return run(options, overrides)
    except Exception as err:
        usage = err if isinstance(err, UsageError) else find_usage_error(err)
        if usage is None:
            raise
        prefix = "" if str(usage).startswith(PROG) else f"{PROG}: error: "  # parser errors name the program already
        print(f"{prefix}{usage}", file=sys.stderr)
        return 2


def run(options: argparse.Namespace, overrides: list[str]) -> int:
    positive(repeats=options.repeats)
    if options.warmup < 0:
        raise UsageError(f"warmup={options.warmup} is invalid: it must be at least 0")
    if options.batch_size is not None:
        positive(batch_size=options.batch_size)
        overrides = [*overrides, "--data.init_args.batch_size", str(options.batch_size)]
    if overrides and not overrides[0].startswith("--"):
        raise UsageError(f"unexpected argument {overrides[0]!r}: overrides are --key value pairs passed to every "
                         "config")
    if options.out:
        writable_file("out", options.out)
    configs = [config_path(name, options.scale) for name in options.configs or TWINS]
    precisions = PRECISIONS if options.precision == "both" else (options.precision,)
    compile_choice = options.compile or ("both" if options.device == "cuda" else "off")
    compiles = ("off", "on") if compile_choice == "both" else (compile_choice,)
    device = torch.device(options.device)
    warnings.filterwarnings("ignore", message=r"You are trying to `self\.log\(\)`")  # no Trainer: logging is off

    settings = [Setting(path, overrides) for path in configs]  # a bad config or override stops before any work

    print(describe(device, options))
    width = max(len(setting.name) for setting in settings)
    print(header(width), flush=True)
    rows = []
    for setting in settings:
        for precision in precisions:
            for compiled in compiles:
                row = measure(setting, device, precision, compiled == "on", options.warmup, options.repeats)
                print(format_row(row, width), flush=True)
                rows.append(row)
    if options.out:
        from primacy.files import write_csv

        write_csv(options.out, [{"device": options.device, "scale": options.scale, **asdict(row)} for row in rows])
        print(f"wrote {options.out}")
    return int(any(row.note.startswith("failed") for row in rows))


def config_path(name: str, scale: str) -> Path:
    """The config file for ``name`` (a paper config, its CPU twin, or a YAML path) at ``scale``."""
    if name.endswith((".yaml", ".yml")):
        if not Path(name).is_file():
            raise UsageError(f"configs={name} does not exist")
        return Path(name)
    paper = {**{twin.split("/")[-1]: key for key, twin in TWINS.items()}, **{key: key for key in TWINS}}.get(name)
    if paper is None:
        close = difflib.get_close_matches(name, [*TWINS, *(t.split("/")[-1] for t in TWINS.values())], n=3)
        hint = f"did you mean {', '.join(close)}? " if close else ""
        raise UsageError(f"configs={name} is not a paper config or a CPU twin of one: {hint}choose from "
                         f"{', '.join(TWINS)}, or give a YAML path")
    return CONFIGS / f"{f'paper/{paper}' if scale == 'paper' else TWINS[paper]}.yaml"


def label(path: Path) -> str:
    """A config's name in the table: its path under configs/ without .yaml."""
    path = path.resolve()
    return str(path.relative_to(CONFIGS).with_suffix("")) if path.is_relative_to(CONFIGS) else str(path)


class Setting:
    """One config as ``primacy fit`` would run it: the parsed config, and a fresh model and task on demand."""

    def __init__(self, path: Path, overrides: list[str]) -> None:
        from primacy.cli.lightning import parse_run

        self.path, self.name = path, label(path)
        self.config = parse_run(["fit", "--config", str(path), *overrides])
        trainer = self.config.trainer
        self.max_steps = trainer.max_steps
        self.accumulate = trainer.accumulate_grad_batches or 1
        self.clip = trainer.gradient_clip_val
        self.clip_algorithm = trainer.gradient_clip_algorithm or "norm"

    def build(self) -> tuple[Any, Any]:
        """(model, task) from the config's model and data sections, seeded as ``primacy fit`` seeds them."""
        import lightning as L
        from jsonargparse import Namespace
        from lightning.pytorch.cli import LightningArgumentParser

        p = LightningArgumentParser()
        p.add_lightning_class_args(L.LightningModule, "model", subclass_mode=True)
        p.add_lightning_class_args(L.LightningDataModule, "data", subclass_mode=True)
        seed = self.config.seed_everything
        torch.manual_seed(0 if seed is None or seed is True else seed)
        built = p.instantiate(Namespace(model=self.config.model, data=self.config.data))
        return built.model, built.data


def measure(setting: Setting, device: torch.device, precision: str, compiled: bool, warmup: int,
            repeats: int) -> Row:
    """One row: a fresh model, ``warmup`` untimed steps, ``repeats`` timed ones, and the peak memory."""
    row = Row(setting.name, precision, "on" if compiled else "off", max_steps=setting.max_steps)
    stepping = False  # an error of a compiled row from torch.compile on is a compile failure; before that, it is not
    if precision == "bf16-mixed" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        row.note = "bf16 not supported by this GPU"
        return row
    if compiled:
        torch.compiler.reset()  # each row's model is new: no recompile limit carried over from the last one
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    try:
        model, task = setting.build()
        row.batch_size = task.batch_size
        batch = task.stream_batch(0, task.batch_size)  # the first call also sets up the task (held-out sets)
        row.data_ms = 1e3 * batch_seconds(task)
        batch = {key: value.to(device) for key, value in batch.items()}
        model.to(device)
        step, optimizer = training_step(model, batch, setting, device, precision)
        stepping = True
        if compiled:
            model.forward = torch.compile(model.forward)  # as Lightning compiles a compiled LightningModule
        times = [timed(step, device) for _ in range(warmup + repeats)]
        stepping = False
        row.first_step_s = times[0]
        row.step_ms = 1e3 * statistics.median(times[warmup:])
        row.steps_per_s = 1e3 / row.step_ms
        row.hours = setting.max_steps * row.step_ms / 3.6e6
        row.workers = math.ceil(row.data_ms / row.step_ms)
        if device.type == "cuda":
            row.peak_mib = torch.cuda.max_memory_allocated(device) / 2**20
        elif not compiled:
            row.peak_mib = tracked_peak(step, model, optimizer, batch)
    except torch.OutOfMemoryError:
        row.note = f"out of memory at batch {row.batch_size} (try --batch_size)"
    except Exception as err:  # noqa: BLE001 - one row's failure is reported in the table, the others still run
        reason = f"{type(err).__name__}: {first_line(err)}"
        row.note = f"compile failed: {reason}" if compiled and stepping else f"failed: {reason}"
    finally:
        model = task = batch = step = optimizer = None
        gc.collect()
    return row


def training_step(model: Any, batch: dict[str, torch.Tensor], setting: Setting, device: torch.device,
                  precision: str) -> tuple[Callable[[], None], torch.optim.Optimizer]:
    """One optimiser step as Lightning's automatic optimisation runs it, and its optimiser."""
    model.trainer = SimpleNamespace(estimated_stepping_batches=setting.max_steps)  # all the schedule asks of it
    try:
        optimizer, scheduler = optimizers(model.configure_optimizers())
    finally:
        model.trainer = None
    params = [p for group in optimizer.param_groups for p in group["params"]]
    bf16 = precision == "bf16-mixed"

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        for _ in range(setting.accumulate):
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
                loss = model.training_step(batch, 0)
            (loss / setting.accumulate).backward()
        if setting.clip:
            if setting.clip_algorithm == "value":
                torch.nn.utils.clip_grad_value_(params, setting.clip)
            else:
                torch.nn.utils.clip_grad_norm_(params, setting.clip)
        optimizer.step()
        if scheduler is not None:
            scheduler.step()

    return step, optimizer


def optimizers(configured: Any) -> tuple[torch.optim.Optimizer, Any]:
    """(optimizer, scheduler or None) from what ``configure_optimizers`` returned: an optimiser, or a dict."""
    if isinstance(configured, torch.optim.Optimizer):
        return configured, None
    if isinstance(configured, dict) and isinstance(configured.get("optimizer"), torch.optim.Optimizer):
        scheduler = configured.get("lr_scheduler")
        return configured["optimizer"], scheduler.get("scheduler") if isinstance(scheduler, dict) else scheduler
    raise TypeError(f"configure_optimizers returned {type(configured).__name__}: this benchmark handles an optimiser "
                    "or a dict with 'optimizer' and 'lr_scheduler'")


def timed(step: Callable[[], None], device: torch.device) -> float:
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    sync()
    start = time.perf_counter()
    step()
    sync()
    return time.perf_counter() - start


def batch_seconds(task: Any, repeats: int = 3) -> float:
    """Median time to make one training batch on one thread, as one DataLoader worker makes it."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        times = []
        for index in range(1, repeats + 1):
            start = time.perf_counter()
            task.stream_batch(index, task.batch_size)
            times.append(time.perf_counter() - start)
    finally:
        torch.set_num_threads(threads)
    return statistics.median(times)


def tracked_peak(step: Callable[[], None], model: Any, optimizer: torch.optim.Optimizer,
                 batch: dict[str, torch.Tensor]) -> float:
    """MiB of live tensor storage at the peak of one eager step: parameters, buffers, gradients, optimiser state
    and the batch at the start, then every tensor an operation makes, until it is freed."""
    state = [v for s in optimizer.state.values() for v in s.values() if isinstance(v, torch.Tensor)]
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    counter = LiveBytes([*model.parameters(), *model.buffers(), *grads, *state, *batch.values()])
    del state, grads  # else the gradients that zero_grad drops would stay alive
    with counter:
        step()
    return counter.peak / 2**20


class LiveBytes(TorchDispatchMode):
    """Bytes of live tensor storage: the given tensors, then each output of an operation run in this mode, each
    storage once (views share it) until it is freed. ``peak`` is the most at any time. torch's own MemTracker counts
    the same but refuses models with frozen parameters (it hooks every parameter's gradient)."""

    def __init__(self, tensors: list[torch.Tensor]) -> None:
        super().__init__()
        self.sizes: dict[int, int] = {}  # storage address -> bytes
        self.now = self.peak = 0
        for tensor in tensors:
            self.track(tensor)

    def track(self, tensor: torch.Tensor) -> None:
        storage = tensor.untyped_storage()
        address, size = storage.data_ptr(), storage.nbytes()
        if size == 0 or address in self.sizes:
            return
        self.sizes[address] = size
        self.now += size
        self.peak = max(self.peak, self.now)
        weakref.finalize(storage, self.free, address)  # the Python storage lives exactly as long as its memory

    def free(self, address: int) -> None:
        self.now -= self.sizes.pop(address, 0)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for leaf in tree_leaves(out):
            if isinstance(leaf, torch.Tensor):
                self.track(leaf)
        return out


def first_line(err: BaseException, limit: int = 100) -> str:
    line = next((line.strip() for line in str(err).splitlines() if line.strip()), "")
    return line if len(line) <= limit else line[: limit - 1] + "…"


def describe(device: torch.device, options: argparse.Namespace) -> str:
    if device.type == "cuda":
        where = f"{torch.cuda.get_device_name(device)}, peak memory = torch.cuda.max_memory_allocated"
    else:
        where = f"CPU, {torch.get_num_threads()} threads, peak memory = live tensors in one eager step"
    return (f"# {where}; torch {torch.__version__}; {options.scale} scale; median of {options.repeats} step(s) after "
            f"{options.warmup} warm-up step(s)")


COLUMNS = (("precision", 10), ("compile", 7), ("step ms", 9), ("steps/s", 8), ("peak mem", 10), ("max_steps", 9),
           ("hours", 8), ("1st step s", 10), ("data ms", 8), ("workers", 7))


def header(width: int) -> str:
    return "  ".join([f"{'config':<{width}}", *(f"{name:>{w}}" for name, w in COLUMNS), "note"]).rstrip()


def format_row(row: Row, width: int) -> str:
    cells = [row.precision, row.compile, number(row.step_ms, ".1f"), number(row.steps_per_s, ".2f"),
             memory(row.peak_mib), number(row.max_steps, ",d"), number(row.hours, ".2f"),
             number(row.first_step_s, ".2f"), number(row.data_ms, ".1f"), number(row.workers, "d")]
    if row.step_ms is None:  # not measured: the note says why
        cells[2:] = ["-"] * (len(cells) - 2)
    return "  ".join([f"{row.config:<{width}}", *(f"{c:>{w}}" for c, (_, w) in zip(cells, COLUMNS)),
                      row.note]).rstrip()


def number(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def memory(mib: float | None) -> str:
    if mib is None:
        return "n/a"
    return f"{mib / 1024:.2f} GiB" if mib >= 1024 else f"{mib:.0f} MiB"


if __name__ == "__main__":
    raise SystemExit(main())
