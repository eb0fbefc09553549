"""The ``primacy`` command: Lightning's subcommands (fit, validate, test, predict) through PrimacyCLI, and primacy's own."""

from __future__ import annotations

import math
import sys

from lightning.pytorch.utilities.exceptions import SIGTERMException

from primacy import aggregate, console, files, launchers, plots, registry
from primacy.analyze import analyze_command
from primacy.checks import figure_path, fits_in_memory, positive
from primacy.errors import ArgumentParser, UsageError, find_usage_error
from primacy.lightning_cli import PrimacyCLI
from primacy.reproduce import reproduce_command
from primacy.ssm.dense import impulse_responses
from primacy.ssm.hippo import MEASURES, hippo
from primacy.usage import overview


def aggregate_command(args: list[str]) -> None:
    parser = ArgumentParser(prog="primacy aggregate", description=aggregate.__doc__)
    parser.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run directories that differ only by seed")
    parser.add_argument("--out", required=True, help="directory for the aggregated results")
    options = parser.parse_args(args)
    summary = aggregate.aggregate(options.runs, options.out)
    headline = ("overall_accuracy", "mean_recalled", "early_minus_late")  # mean_recalled: free recall's
    means = {key: summary[key]["mean"] for key in headline if key in summary}
    print(f"{summary['n_runs']} runs -> {options.out}: "
          + ", ".join(f"{key} {'n/a' if mean is None else f'{mean:+.3f}'}" for key, mean in means.items()))


def kernels_command(args: list[str]) -> None:
    """Fig. 1: continuous vs discretised HiPPO impulse responses, to see where bilinear discretisation breaks."""
    parser = ArgumentParser(prog="primacy kernels", description=kernels_command.__doc__)
    parser.add_argument("--measure", default="legs", choices=MEASURES)
    parser.add_argument("--dt", type=float, nargs="+", default=[0.001, 0.01, 0.1, 1.0])
    parser.add_argument("--length", type=int, default=256, help="number of steps j (τ = jΔt)")
    parser.add_argument("--degrees", type=int, nargs="+", default=[2, 3, 8, 15, 32, 63])
    parser.add_argument("--state-size", type=int, default=64, help="N, the HiPPO matrix size")
    parser.add_argument("--out", required=True, help="figure file (.png, .pdf, ...)")
    options = parser.parse_args(args)
    positive(length=options.length, state_size=options.state_size)
    bad = [d for d in options.degrees if not 0 <= d < options.state_size]
    if bad:
        raise UsageError(f"degrees={bad} are out of range: each must lie in [0, state-size={options.state_size})")
    if not all(0 < dt < math.inf for dt in options.dt):
        raise UsageError(f"dt={options.dt} is invalid: every Δt must be a positive finite number")
    n, length = options.state_size, options.length
    fits_in_memory("the HiPPO matrices and responses", 8 * (4 * n * n + 2 * length * n), state_size=n, length=length)
    figure_path("out", options.out)
    a, b = hippo(options.measure, options.state_size)
    curves = {dt: tuple(x.numpy() for x in impulse_responses(a, b, dt, options.length)) for dt in options.dt}
    fig = plots.kernel_discrepancy(curves, options.degrees, f"HiPPO-{options.measure}, N = {options.state_size}")
    files.save_figure(fig, options.out, dpi=150)
    print(f"wrote {options.out}")


def models_command(args: list[str]) -> None:
    """List every registered backbone: its name (for configs), distribution and one-line description."""
    ArgumentParser(prog="primacy models", description=models_command.__doc__).parse_args(args)
    rows = registry.describe()
    width = max(len(row["name"]) for row in rows)
    dist_width = max(len(row["distribution"]) for row in rows)
    for row in rows:
        print(f"{row['name']:<{width}}  {row['distribution']:<{dist_width}}  {row['description']}")


COMMANDS = {"aggregate": aggregate_command, "analyze": analyze_command, "kernels": kernels_command,
            "models": models_command, "reproduce": reproduce_command}


def main(args: list[str] | None = None) -> None:
    console.setup()
    launchers.stop_with_parent()
    argv = sys.argv[1:] if args is None else list(args)
    if not argv or argv[0] in ("-h", "--help"):  # bare `primacy` is a usage error: the same list, on stderr
        console.show(overview(COMMANDS), sys.stdout if argv else sys.stderr)
        raise SystemExit(0 if argv else 2)
    try:
        if argv and argv[0] in COMMANDS:
            COMMANDS[argv[0]](argv[1:])
        else:
            PrimacyCLI(args=args)
    except SIGTERMException:  # Lightning stops at the end of the step; RunCheckpoint saved it
        print("primacy: stopped by SIGTERM with a checkpoint: run the same command again to resume", file=sys.stderr)
        raise SystemExit(143) from None
    except Exception as err:
        usage = find_usage_error(err)
        if usage is None:
            raise
        print(f"primacy: error: {usage}", file=sys.stderr)
        raise SystemExit(2) from None
