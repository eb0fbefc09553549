"""`primacy atlas [ATLAS]`: every backbone at matched difficulty. For each row of the atlas, a search over one knob
finds where the test accuracy falls inside a band; seeds are trained there, on this machine or as SLURM array jobs,
then every row's serial-position and query-position curves and indices are drawn and tabulated side by side.
Repeat the command until the atlas is complete: finished runs are skipped, the searches go on where they stopped.
--draw draws the rows that are done and lists the others, training nothing. A table is never drawn over one with
columns it would lose (one drawn with --extrapolate, say): the command refuses before it starts."""

from __future__ import annotations

import sys
from pathlib import Path

from primacy.checks import positive, writable_directory
from primacy.cli.launching import (
    add_launcher_options,
    check_draw,
    check_launcher,
    check_overrides,
    print_status,
    run_local,
    submit,
)
from primacy.cli.lightning import check_run
from primacy.errors import ArgumentParser, UsageError
from primacy.workflows.atlas.cost import Estimate, ToGo, estimate, parts, to_go
from primacy.workflows.atlas.planner import AtlasRun, Planner, RowState, draw, slowest_first, table_columns
from primacy.workflows.atlas.spec import ATLASES, AtlasSpec, read_atlas, valid_band
from primacy.workflows.launchers import RunJob, run_seconds
from primacy.workflows.runs import SCALES, describe_states, process_count
from primacy.workflows.tables import keep_columns, lost_columns


def _parser() -> ArgumentParser:
    known = ", ".join(sorted(p.stem for p in ATLASES.glob("*.yaml")))
    parser = ArgumentParser(prog="primacy atlas", description=__doc__, allow_abbrev=False,
                            epilog="Any other --key value is passed to every run, e.g. --trainer.max_steps 20.")
    parser.add_argument("atlas", nargs="?", default="verification",
                        help=f"one of primacy's atlases ({known}; default verification) or an atlas file (YAML: "
                        "rows of backbone, knob and values; docs/atlas.md)")
    parser.add_argument("--scale", choices=SCALES, default="cpu", help="each row's config at the cpu or paper scale")
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0 .. N-1 at each row's chosen value")
    parser.add_argument("--band", type=float, nargs=2, metavar=("LOW", "HIGH"),
                        help="the accuracy band (default: the atlas file's, else 0.70 0.80)")
    parser.add_argument("--extrapolate", action="store_true",
                        help="also test every chosen model at twice its list length (2L)")
    parser.add_argument("--rows", nargs="+", metavar="ROW", help="only these rows (their labels); the atlas is drawn "
                        "only if --out holds no run of the other rows (then --draw without --rows draws them all)")
    parser.add_argument("--out", help="directory of the runs, table and figure (default runs/atlas-ATLAS-SCALE)")
    parser.add_argument("--draw", action="store_true", help="only draw: the table and figure of the rows that are "
                        "done (with --extrapolate as the table was drawn), a line for each row that is not; nothing "
                        "is trained or tested")
    add_launcher_options(parser)
    return parser


def command(args: list[str]) -> None:
    """``primacy atlas``: see the module's docstring and ``--help``."""
    options, overrides = _parser().parse_known_args(args)
    check_overrides(overrides, "primacy atlas")
    positive(seeds=options.seeds, jobs=options.jobs)
    check_draw(options)
    check_launcher(options)
    if options.band is not None and not valid_band(tuple(options.band)):
        raise UsageError(f"band={options.band} is invalid: give LOW HIGH with 0 <= LOW < HIGH <= 1")
    whole = read_atlas(options.atlas)
    spec = whole.select(options.rows)
    out = Path(options.out or f"runs/atlas-{spec.name}-{options.scale}")
    others = whole.rows_left_out(spec, out)
    if options.draw and others:
        raise UsageError(f"--rows {' '.join(options.rows)}: {out} also holds the runs of the row(s) "
                         f"{', '.join(others)}, and drawing without them would draw the atlas over theirs: leave out "
                         "--rows to draw every row that is done")
    if not options.status:
        _keep_tables(spec, out, options.extrapolate)
    planner = Planner(spec, options.scale, options.seeds, out, overrides, check_run,
                      tuple(options.band) if options.band else None, options.extrapolate)
    states = planner.rows()
    if options.status:
        _print(planner, states, options.jobs)
        return
    writable_directory("out", out)
    if options.draw:
        _draw_done(planner, states)
        return
    launched: dict[str, AtlasRun] = {}  # by directory, started by this command: one that fails is not started again
    todo = _todo(states, launched)
    if todo:
        print(f"atlas {spec.name}: running {len(todo)} runs now, more as the searches go on", flush=True)
        if options.launcher == "local":
            rows = {row.label: row for row in spec.rows}

            def follow(job: RunJob) -> list[tuple[RunJob, AtlasRun]]:  # the finished run's row, planned again
                return _todo([planner.row(rows[launched[job.run_dir].row])], launched)
            run_local([job for job, _ in todo], options.jobs, [run for _, run in todo], planner.status,
                      "primacy atlas", follow)
        else:
            while todo:
                jobs, runs = (list(part) for part in zip(*todo))
                processes = max(process_count(planner.configs[r.panel].trainer.devices) for r in runs)
                if not submit(jobs, runs, out, options, processes,
                              f"atlas-{spec.name}", ["primacy atlas", *args]):
                    return
                todo = _todo(planner.rows(), launched)
        states = planner.rows()
    unfinished = [state for state in states if not state.done]
    if unfinished:
        _print(planner, states, options.jobs)
        counts = describe_states([s for state in unfinished for s in state.runs.values()])
        print(f"primacy atlas: {spec.name} is not complete ({counts}): "
              "see the logs of failed runs, wait for running or queued ones, then run the same command again",
              file=sys.stderr)
        raise SystemExit(1)
    _failed_tests(states)
    if others:  # never draw over the atlas of more rows than these
        print(f"atlas {spec.name}: the runs of --rows are done; {out} also holds the runs of the row(s) "
              f"{', '.join(others)}, so the atlas is not drawn without them: the same command with --draw and without "
              "--rows draws every row that is done")
        return
    for path in draw(planner, states):
        print(f"wrote {path}")


def _keep_tables(spec: AtlasSpec, out: Path, extrapolate: bool) -> None:
    """Refuses, before anything is trained or written, to draw over a table that has columns this command's would
    not: the 2L ones of a table drawn with --extrapolate, or another metric's."""
    for name, columns in table_columns(spec, extrapolate).items():
        path = out / name
        advice = []
        if not extrapolate and all("2L" in column for column in lost_columns(path, columns)):
            advice = ["add --extrapolate, as the table was drawn with it, or give another --out"]
        keep_columns(path, columns, *advice)


def _draw_done(planner: Planner, states: list[RowState]) -> None:
    """--draw: the rows that are done drawn, a line for each of the others; refused when no row is done."""
    done = [state for state in states if state.done]
    if not done:
        counts = describe_states([s for state in states for s in state.runs.values()])
        raise UsageError(f"--draw: no row of atlas {planner.spec.name} is done in {planner.out} "
                         f"({counts or 'no runs'}): leave out --draw to "
                         "train them, or check --out, --scale and --seeds")
    _failed_tests(done)
    for path in draw(planner, done):
        print(f"wrote {path}")
    for state in states:
        if not state.done:
            counts = describe_states([s for s in state.runs.values() if s.state != "done"])
            print(f"  not drawn ({counts}): "
                  f"{state.line(state.row.scale_values(planner.scale), planner.band)}")
    if len(done) < len(states):
        print(f"drew {len(done)} of {len(states)} rows; leave out --draw to train the others")


def _failed_tests(states: list[RowState]) -> None:
    for state in states:
        for run, status in state.runs.items():
            if run.test and status.state == "failed":
                print(f"  {run.label}: failed ({status.detail}); the table leaves its row's 2L columns empty")


def _todo(states: list[RowState], launched: dict[str, AtlasRun]) -> list[tuple[RunJob, AtlasRun]]:
    """The runs to start now, as jobs with the arguments their status gives (and marked launched): every row's next
    pilot, missing seeds and tests, none started by this command before; the tests at 2L first (one evaluation each,
    of a model whose checkpoints a later session may not have), then the slowest rows' runs."""
    todo = [(RunJob(str(run.dir), status.args), run) for state in slowest_first(states)
            for run, status in state.runs.items() if status.args and str(run.dir) not in launched]
    todo.sort(key=lambda item: not item[1].test)  # stable: each kind keeps the rows' order
    launched.update((job.run_dir, run) for job, run in todo)
    return todo


def _print(planner: Planner, states: list[RowState], jobs: int) -> None:
    spent = {state.row.label: sum(run_seconds(run.dir) for run in state.runs) for state in states}
    left = {state.row.label: to_go(state, state.row.scale_values(planner.scale), planner.band, planner.seeds,
                                   planner.extrapolate) for state in states}
    for state in states:
        label, values = state.row.label, state.row.scale_values(planner.scale)
        print(f"{state.line(values, planner.band)} ({_hours(spent[label])} of runs; to go: {left[label].describe()})")
    print_status({run: status for state in states for run, status in state.runs.items()})
    print(f"{_hours(sum(spent.values()))} of runs so far (wall time of each launch, summed over runs)")
    print(_to_go(left, estimate(states, left), jobs))


def _to_go(left: dict[str, ToGo], cost: Estimate, jobs: int) -> str:
    """The atlas's runs to go and their time, in a line."""
    pilots, seeds, tests = (sum(getattr(go, part) for go in left.values()) for part in ("pilots", "seeds", "tests"))
    if not pilots + seeds + tests:
        return "to go: nothing"
    line = "to go: " + ", then ".join(parts(pilots, seeds, tests, "at most"))
    total, wall = cost.total(), cost.wall(jobs)
    if total is None or wall is None:
        return f"{line}; no run has finished yet, so no time to estimate them by"
    guessed = f", {len(cost.guessed)} with none at the median of the others'" if cost.guessed else ""
    return (f"{line}: about {_hours(total)} of runs, {_hours(wall)} of wall time with --jobs {jobs} (each row's "
            f"runs at the mean of its finished ones{guessed}; if the seeds land in the band; a row's pilots run one "
            "after another)")


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"
