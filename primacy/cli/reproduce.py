"""`primacy reproduce FIGURE`: every run of a paper figure (panels x seeds), on this machine or as a SLURM array job,
then each panel's aggregate and the figure in the paper's layout. Repeat the command until the figure is complete:
finished runs are skipped, interrupted ones resume from their checkpoint."""

from __future__ import annotations

from pathlib import Path

from primacy.checks import positive, writable_directory
from primacy.cli.launching import (
    add_launcher_options,
    check_launcher,
    check_overrides,
    launch,
    print_status,
    stop_unless_done,
)
from primacy.cli.lightning import parse_run
from primacy.errors import ArgumentParser
from primacy.workflows.pages import FIGURES, SCALES
from primacy.workflows.reproduce import count_states, draw, figure, plan, process_count, status


def _parser() -> ArgumentParser:
    parser = ArgumentParser(prog="primacy reproduce", description=__doc__, allow_abbrev=False,
                            epilog="Any other --key value is passed to every run, e.g. --trainer.max_steps 20.")
    parser.add_argument("figure", help=f"the figure to reproduce: {', '.join(sorted(FIGURES))}, or a figure file "
                        "(YAML: panels and their configs; docs/reproduce.md)")
    parser.add_argument("--scale", choices=SCALES, default="cpu", help="configs/cpu/ (a laptop) or configs/paper/")
    parser.add_argument("--seeds", type=int, default=10, help="seeds 0 .. N-1 of every panel (the paper used 10)")
    parser.add_argument("--out", help="directory of the runs and figures (default runs/FIGURE-SCALE)")
    parser.add_argument("--panels", nargs="+", metavar="PANEL",
                        help="only these panels (their labels, e.g. A C, or config names)")
    add_launcher_options(parser)
    return parser


def command(args: list[str]) -> None:
    """``primacy reproduce``: see the module's docstring and ``--help``."""
    options, overrides = _parser().parse_known_args(args)
    check_overrides(overrides, "primacy reproduce")
    positive(seeds=options.seeds, jobs=options.jobs)
    check_launcher(options)
    spec = figure(options.figure).select(options.panels)
    out = Path(options.out or f"runs/{spec.name}-{options.scale}")
    runs, configs = plan(spec, options.scale, options.seeds, out, overrides, parse_run)
    statuses = {run: status(run, configs[run.panel]) for run in runs}
    if options.status:
        print_status(statuses)
        return
    writable_directory("out", out)
    todo = [run for run in runs if statuses[run].args]
    if todo:
        print(f"{spec.name}: {len(runs) - len(todo)} of {len(runs)} runs need nothing; running {len(todo)} "
              f"({', '.join(f'{n} {s}' for s, n in count_states([statuses[r] for r in todo]).items())})", flush=True)
        processes = max(process_count(configs[run.panel].trainer.devices) for run in todo)
        if not launch(todo, statuses, lambda run: status(run, configs[run.panel]), options, out, processes,
                      Path(options.figure).stem, ["primacy reproduce", *args]):
            return
        statuses = {run: status(run, configs[run.panel]) for run in runs}
    stop_unless_done(statuses, f"primacy reproduce: {spec.name} is", "runs")
    for path in draw(spec, options.scale, out, runs):
        print(f"wrote {path}")
