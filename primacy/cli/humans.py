"""``primacy humans``: free-recall runs beside the people of a human dataset, through the same analyses."""

from __future__ import annotations

from pathlib import Path

from primacy.errors import ArgumentParser
from primacy.workflows import humans, people


def command(args: list[str]) -> None:
    parser = ArgumentParser(prog="primacy humans", description=humans.__doc__)
    parser.add_argument("runs", nargs="+", metavar="RUN", type=Path,
                        help="a free-recall run directory (one seed), or a directory of them (one model, a seed each)")
    parser.add_argument("--dataset", required=True, choices=sorted(people.DATASETS),
                        help="; ".join(f"{d.name}: {d.reference}" for d in people.DATASETS.values()))
    parser.add_argument("--labels", nargs="+", help="one label per RUN for the figure and tables (default: its name)")
    parser.add_argument("--out", type=Path, help="directory for the figure and tables (default runs/humans-DATASET)")
    options = parser.parse_args(args)
    out = options.out or Path("runs") / f"humans-{options.dataset}"
    humans.humans(options.runs, options.dataset, out, options.labels)
    print(f"models beside people ({options.dataset}) -> {out}: humans.png, curves.csv, summary.json")
