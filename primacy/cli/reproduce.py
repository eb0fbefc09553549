"""`primacy reproduce FIGURE`: every run of a paper figure (panels x seeds), on this machine or as a SLURM array job,
then each panel's aggregate and the figure in the paper's layout. Repeat the command until the figure is complete:
finished runs are skipped, interrupted ones resume from their checkpoint. --draw draws the panels' runs that are done
and lists the others, training nothing. A table whose columns are known before the runs (every figure's but the
weights, humans and hybrids pages' and a figure file's) is never drawn over one with columns it would lose: the
command refuses before it starts."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from primacy.checks import positive, writable_directory
from primacy.cli.launching import (
    add_launcher_options,
    check_draw,
    check_launcher,
    check_overrides,
    launch,
    print_status,
    stop_unless_done,
)
from primacy.cli.lightning import check_run
from primacy.errors import ArgumentParser, UsageError
from primacy.workflows.paper.pages import FIGURES, FigureSpec
from primacy.workflows.paper.reproduce import draw, figure, panels_left_out, plan, table_columns
from primacy.workflows.runs import SCALES, Run, Status, describe_states, process_count, status
from primacy.workflows.tables import keep_columns


def _parser() -> ArgumentParser:
    parser = ArgumentParser(prog="primacy reproduce", description=__doc__, allow_abbrev=False,
                            epilog="Any other --key value is passed to every run, e.g. --trainer.max_steps 20.")
    parser.add_argument("figure", help=f"the figure to reproduce: {', '.join(sorted(FIGURES))}, or a figure file "
                        "(YAML: panels and their configs; docs/reproduce.md)")
    parser.add_argument("--scale", choices=SCALES, default="cpu", help="configs/cpu/ (a laptop) or configs/paper/")
    parser.add_argument("--seeds", type=int, default=10, help="seeds 0 .. N-1 of every panel (the paper used 10)")
    parser.add_argument("--out", help="directory of the runs and figures (default runs/FIGURE-SCALE)")
    parser.add_argument("--panels", nargs="+", metavar="PANEL",
                        help="only these panels (their labels, e.g. A C, or config names); the figure is drawn "
                        "only if --out holds no run of the other panels (then --draw without --panels draws them all)")
    parser.add_argument("--draw", action="store_true", help="only draw: the figure and table of the runs that are done "
                        "(a panel with none left out), a line for each run that is not; nothing is trained or tested")
    add_launcher_options(parser)
    return parser


def command(args: list[str]) -> None:
    """``primacy reproduce``: see the module's docstring and ``--help``."""
    options, overrides = _parser().parse_known_args(args)
    check_overrides(overrides, "primacy reproduce")
    positive(seeds=options.seeds, jobs=options.jobs)
    check_draw(options)
    check_launcher(options)
    whole, missing = figure(options.figure).installed()  # panels whose plugin backbone is absent are left out
    for line in missing:
        print(line)
    spec = whole.select(options.panels)
    out = Path(options.out or f"runs/{spec.name}-{options.scale}")
    others = panels_left_out(whole, spec, options.scale, out)
    if options.draw and others:
        raise UsageError(f"--panels {' '.join(options.panels)}: {out} also holds the runs of panel(s) "
                         f"{', '.join(others)}, and drawing without them would draw {spec.name} over theirs: leave "
                         "out --panels to draw every panel that is done")
    if not options.status:  # before anything is trained or written
        for name, columns in table_columns(spec).items():
            keep_columns(out / name, columns)
    runs, configs = plan(spec, options.scale, options.seeds, out, overrides, check_run)
    statuses = {run: status(run, configs[run.panel]) for run in runs}
    if options.status:
        print_status(statuses)
        return
    writable_directory("out", out)
    if options.draw:
        _draw_done(spec, options.scale, out, statuses)
        return
    todo = [run for run in runs if statuses[run].args]
    if todo:
        print(f"{spec.name}: {len(runs) - len(todo)} of {len(runs)} runs need nothing; running {len(todo)} "
              f"({describe_states([statuses[r] for r in todo])})", flush=True)
        processes = max(process_count(configs[run.panel].trainer.devices) for run in todo)
        if not launch(todo, statuses, lambda run: status(run, configs[run.panel]), options, out, processes,
                      Path(options.figure).stem, ["primacy reproduce", *args]):
            return
        statuses = {run: status(run, configs[run.panel]) for run in runs}
    stop_unless_done(statuses, f"primacy reproduce: {spec.name} is", "runs")
    if others:  # never draw over the figure of more panels than these
        print(f"{spec.name}: the runs of --panels are done; {out} also holds the runs of panel(s) {', '.join(others)}, "
              f"so the figure is not drawn without them: primacy reproduce {options.figure} --scale {options.scale} "
              f"--out {out} --draw draws every panel that is done")
        return
    for path in draw(spec, options.scale, out, runs):
        print(f"wrote {path}")


def _draw_done(spec: FigureSpec, scale: str, out: Path, statuses: dict[Run, Status]) -> None:
    """--draw: the figure of the runs that are done, without the panels that have none, then a line for each run that
    is not; refused when none is done."""
    done = [run for run, s in statuses.items() if s.state == "done"]
    if not done:
        counts = describe_states(list(statuses.values()))
        raise UsageError(f"--draw: no run of {spec.name} is done in {out} ({counts}): leave out --draw to train them, "
                         "or check --out, --scale and --panels")
    drawn = replace(spec, panels=tuple(p for p in spec.panels if any(run.panel == p.config(scale) for run in done)))
    for path in draw(drawn, scale, out, done):
        print(f"wrote {path}")
    unfinished = {run: s for run, s in statuses.items() if s.state != "done"}
    if unfinished:
        print_status(unfinished)
        print(f"drew {len(done)} of {len(statuses)} runs; leave out --draw to train the others")
