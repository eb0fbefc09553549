"""``primacy aggregate``: runs that differ only by seed, combined into means, standard errors and figures."""

from __future__ import annotations

from primacy.errors import ArgumentParser
from primacy.workflows import aggregate


def command(args: list[str]) -> None:
    parser = ArgumentParser(prog="primacy aggregate", description=aggregate.__doc__)
    parser.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run directories that differ only by seed")
    parser.add_argument("--out", required=True, help="directory for the aggregated results")
    options = parser.parse_args(args)
    summary = aggregate.aggregate(options.runs, options.out)
    means = aggregate.headline(summary)
    print(f"{summary['n_runs']} runs -> {options.out}: "
          + ", ".join(f"{key} {'n/a' if mean is None else f'{mean:+.3f}'}" for key, mean in means.items()))
