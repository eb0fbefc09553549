"""``primacy humans``: free-recall runs beside the people of a human dataset, through the same analyses; with --fit,
CMR fitted by likelihood to every person and every seed, in parallel or on SLURM."""

from __future__ import annotations

from pathlib import Path

from primacy.cli.cmr_fit import add_fit_options, fit_settings
from primacy.errors import ArgumentParser, UsageError
from primacy.workflows import launchers, slurm
from primacy.workflows.humans import cmr_fits, page, people
from primacy.workflows.runs import Status

FIT_SLURM = slurm.SlurmOptions(gpus_per_task=0, cpus_per_task=1)  # a fit is numpy on one CPU
FIT_HELP = ("also fit CMR by likelihood to every person and every model seed (one participant each; `primacy cmr_fit` "
            "over chunks of participants, --jobs at a time or on SLURM): OUT/fits/GROUP/PARTICIPANT.json each, "
            "fits.csv (parameters, log-likelihood, n, k, BIC per participant), parameters.png/.pdf (people's and "
            "models' parameters side by side, group means with bootstrap 95%% intervals) and summary.json's "
            "likelihood_fit. Each participant is also fitted at its group's cell of the lag-CRP grid (B_enc, B_rec, "
            "Lfc from the grid's canonical CMR; only B_start, X1, X2 free; OUT/grid-fits/GROUP) so that "
            "likelihood_fit.grid sets each group's BIC beside that of its grid cell. A stopped fit resumes: run the "
            "same command again")


def _parser() -> ArgumentParser:
    from primacy.cli.launching import add_launcher_options

    parser = ArgumentParser(prog="primacy humans", description=page.__doc__, allow_abbrev=False)
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
    parser.add_argument("--fit", action="store_true", help=FIT_HELP)
    add_fit_options(parser.add_argument_group("--fit's settings"), prefix="fit_",
                    lists_help="fit each model seed on its first N test lists (default: all; a seed is tested on many "
                    "more lists than a person studies: N = the people's number gives both as much data); the people "
                    "are fitted on all of theirs")
    add_launcher_options(parser, FIT_SLURM)
    return parser


def command(args: list[str]) -> None:
    """``primacy humans``: see the module's docstring and ``--help``."""
    from primacy.checks import positive, writable_directory
    from primacy.cli.launching import check_launcher

    parser = _parser()
    options = parser.parse_args(args)
    defaults = parser.parse_args(["--dataset", "peers"])
    if not options.fit:
        given = next((name for name in ("status", "launcher", "jobs", "wait", "fit_spec", "fit_lists", "fit_seed",
                                             "fit_max_generations", "fit_no_polish")
                      if getattr(options, name) != getattr(defaults, name)), None)
        if given:
            raise UsageError(f"--{given} is for --fit: add --fit, or leave it out")
    positive(jobs=options.jobs)
    check_launcher(options, FIT_SLURM)
    name = options.dataset or options.data.stem
    out = options.out or Path("runs") / f"humans-{name}"
    if not options.status:
        writable_directory("out", out)
    groups = page.run_groups(options.runs, options.labels)
    comparison = (page.compare(groups, *people.from_file(options.data)) if options.data
                  else page.compare(groups, options.dataset))
    fitted = None
    if options.fit:
        fitted = _fit(comparison, options, out, args)
        if fitted is None:
            return
    page.write([comparison], out, f"Free recall: models beside people ({comparison.dataset.reference})", fitted)
    written = "humans.png, curves.csv, summary.json" + (", fits.csv, fits.md, parameters.png" if fitted else "")
    print(f"models beside people ({name}) -> {out}: {written}")


def _fit(comparison: page.Comparison, options, out: Path, args: list[str]) -> dict | None:
    """Every participant's fit, launching the chunks not yet fitted; None when they are not all done (queued on
    SLURM, or --status)."""
    from primacy.cli.launching import launch, print_status, stop_unless_done

    fitting = fit_settings(options, prefix="fit_")
    cells = page.grid_cells(comparison)
    groups, grid_groups = page.fit_groups(comparison, out, fitting), page.grid_groups(comparison, out, fitting,
                                                                                          cells)
    chunks = cmr_fits.chunks(groups + grid_groups)
    submitit = out / "fits" / "submitit"

    def status(chunk: cmr_fits.FitChunk):
        return chunk_status(chunk, submitit)
    statuses = {chunk: status(chunk) for chunk in chunks}
    if options.status:
        print_status(statuses)
        return None
    todo = [chunk for chunk in chunks if statuses[chunk].args]
    if todo:
        print(f"fitting CMR: {len(chunks) - len(todo)} of {len(chunks)} jobs need nothing; running {len(todo)} "
              f"({sum(len(c.participants) for c in todo)} participants at most)", flush=True)
        for group in {chunk.group for chunk in todo}:
            group.write_spec()
        if not launch(todo, statuses, status, options, out / "fits", 1, "humans-fit", ["primacy humans", *args]):
            return None
        statuses = {chunk: status(chunk) for chunk in chunks}
    stop_unless_done(statuses, "primacy humans: the fits are", "jobs")
    return page.fit_results(groups, grid_groups, cells)


def chunk_status(chunk: cmr_fits.FitChunk, submitit: Path) -> Status:
    """Where a chunk stands (``runs.Status``), from its participants' files and its launcher state."""
    state = launchers.read_state(chunk.dir)
    if launchers.is_alive(state):
        return Status("running", f"{state.get('job') or 'pid ' + str(state.get('pid'))}, log {state.get('log')}")
    if chunk.done():
        return Status("done", f"{len(chunk.participants)} fitted")
    again = slurm.requeued(state, submitit)
    if again is not None:
        return Status("queued", f"job {state.get('job')} {again}: preempted, resumes with the participants not fitted")
    if state.get("state") == "queued":
        slurm_now = slurm.slurm_state(state.get("job"), submitit)
        if slurm_now not in slurm.SLURM_ENDED:
            return Status("queued", f"job {state.get('job')} {slurm_now or ''}".rstrip())
    written = sum((chunk.group.out / cmr_fits.file_name(name)).is_file() for name in chunk.participants)
    detail = f"{written} of {len(chunk.participants)} fitted"
    if state.get("state") == "exited" and state.get("exit_code") not in (0, *launchers.STOPPED):
        return Status("failed", f"{detail}, exit code {state.get('exit_code')}, log {state.get('log')}",
                      chunk.args())
    return Status("stopped" if written else "missing", detail, chunk.args())
