"""``primacy humans``: free-recall runs beside the people of a human dataset, through the same analyses."""

from __future__ import annotations

from pathlib import Path

from primacy.errors import ArgumentParser
from primacy.workflows import humans, people


def command(args: list[str]) -> None:
    parser = ArgumentParser(prog="primacy humans", description=humans.__doc__)
    parser.add_argument("runs", nargs="*", metavar="RUN", type=Path,
                        help="a free-recall run directory (one seed), or a directory of them (one model, a seed each); "
                        "none: the people alone")
    people_from = parser.add_mutually_exclusive_group(required=True)
    people_from.add_argument("--dataset", choices=sorted(people.DATASETS),
                             help="; ".join(f"{d.name}: {d.reference}" for d in people.DATASETS.values()))
    people_from.add_argument("--data", type=Path, metavar="FILE",
                             help=f"your own people: a free-recall file in {people.FORMAT} (as psifr reads and "
                             "results/free_recall.csv is written)")
    parser.add_argument("--labels", nargs="+", help="one label per RUN for the figure and tables (default: its name)")
    parser.add_argument("--out", type=Path, help="directory for the figure and tables (default runs/humans-DATASET)")
    options = parser.parse_args(args)
    name = options.dataset or options.data.stem
    out = options.out or Path("runs") / f"humans-{name}"
    humans.humans(options.runs, options.dataset or options.data, out, options.labels)
    print(f"models beside people ({name}) -> {out}: humans.png, curves.csv, summary.json")
