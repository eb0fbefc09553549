"""``primacy cmr_fit``: CMR fitted by maximum likelihood to every participant of free-recall data (people of psifr's
datasets or of your own file, or trained models, one participant per seed), one after another, each written to
OUT/<participant>.json as its fit ends. Run it again to go on where it stopped: participants already in OUT are read,
not fitted again. ``primacy humans --fit`` runs it over chunks of participants, in parallel or on SLURM."""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Any

from primacy.errors import ArgumentParser, UsageError
from primacy.workflows.humans import cmr_fits, people


def _parser() -> ArgumentParser:
    parser = ArgumentParser(prog="primacy cmr_fit", description=__doc__, allow_abbrev=False)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--dataset", choices=sorted(people.DATASETS), help="psifr's people (pip install -e "
                        "'.[humans]')")
    source.add_argument("--data", type=Path, metavar="FILE", help=f"people of a file in {people.FORMAT}")
    source.add_argument("--runs", nargs="+", type=Path, metavar="RUN",
                        help="free-recall runs that `primacy fit` tested, one participant each (named after its "
                        "directory)")
    source.add_argument("--recover", type=Path, metavar="FITS",
                        help="parameter recovery: for each participant fitted in the directory FITS, simulate one "
                        "with its fitted parameters, lists and list length, and fit that; then OUT/recovery.csv (true "
                        "and fitted values) and OUT/recovery.json (Pearson's r per parameter)")
    parser.add_argument("--out", type=Path, required=True, help="directory of the participants' fits")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="only these participants (subject ids, or run "
                        "directory names)")
    add_fit_options(parser)
    return parser


LISTS_HELP = ("fit each participant's first N lists only (default: all); with --recover, simulate N lists per "
              "participant")


def add_fit_options(parser: ArgumentParser, prefix: str = "", lists_help: str = LISTS_HELP) -> None:
    """The fit's options, --PREFIXspec, --PREFIXlists, --PREFIXseed, --PREFIXmax_generations and --PREFIXno_polish
    (``fit_settings``)."""
    generations = cmr_fits.FitSettings().max_generations
    parser.add_argument(f"--{prefix}spec", type=Path, metavar="FILE",
                        help='which parameters are free, fixed and dependent: a JSON file {"free": {NAME: [LOW, '
                        'HIGH]}, "fixed": {NAME: VALUE}, "dependent": {NAME: "A - B * SOURCE"}} naming each of CMR\'s '
                        "14 parameters once (default: Morton & Polyn's ten free, Afc = Acf = 0, Dfc = 1 - Lfc, Dcf = "
                        "1 - Lcf)")
    parser.add_argument(f"--{prefix}lists", type=int, metavar="N", help=lists_help)
    parser.add_argument(f"--{prefix}seed", type=int, default=0, help="the optimiser's seed (default 0)")
    parser.add_argument(f"--{prefix}max_generations", type=int, default=generations,
                        help=f"differential evolution's generations at most (default {generations}; it stops earlier "
                        "when the population has converged)")
    parser.add_argument(f"--{prefix}no_polish", action="store_true", help="skip the L-BFGS-B polish of the best "
                        "parameter set that ends each fit (scipy's default; it gains about 0.001-0.004 log-likelihood "
                        "units)")


def fit_settings(options: Any, prefix: str = "") -> cmr_fits.FitSettings:
    """The FitSettings of the options ``add_fit_options`` added."""
    from primacy.checks import positive

    generations, lists = getattr(options, f"{prefix}max_generations"), getattr(options, f"{prefix}lists")
    positive(**{f"{prefix}max_generations": generations})
    if lists is not None:
        positive(**{f"{prefix}lists": lists})
    spec = getattr(options, f"{prefix}spec")
    return cmr_fits.FitSettings(spec=cmr_fits.FitSpec() if spec is None else cmr_fits.read_spec(spec),
                                seed=getattr(options, f"{prefix}seed"), max_generations=generations,
                                polish=not getattr(options, f"{prefix}no_polish"), lists=lists)


def command(args: list[str]) -> None:
    """``primacy cmr_fit``: see the module's docstring and ``--help``."""
    from primacy import files
    from primacy.checks import writable_directory

    options = _parser().parse_args(args)
    fitting = fit_settings(options)
    truth = None
    if options.runs:
        participants = cmr_fits.run_participants(options.runs)
    elif options.recover:
        participants, truth = cmr_fits.simulated_participants(options.recover, options.seed, options.lists)
    else:
        persons = people.read_people(options.data) if options.data else people.load(options.dataset)
        participants = cmr_fits.people_participants(persons)
    if options.only:
        known = {p.name for p in participants}
        unknown = [name for name in options.only if name not in known]
        if unknown:
            raise UsageError(f"only={unknown[0]} is not a participant of these data (e.g. "
                             f"{', '.join(sorted(known)[:5])})")
        participants = [p for p in participants if p.name in set(options.only)]
    writable_directory("out", options.out)
    previous = signal.signal(signal.SIGTERM, _stop)  # SLURM's notice before a preemption or the time limit
    try:
        fits = cmr_fits.fit_participants(participants, options.out, fitting, lambda line: print(line, flush=True))
    except (KeyboardInterrupt, _Stopped) as stop:
        print(f"primacy cmr_fit: stopped; the participants fitted so far are in {options.out}: run the same command "
              "again to fit the others", file=sys.stderr)
        raise SystemExit(143 if isinstance(stop, _Stopped) else 130) from None
    finally:
        signal.signal(signal.SIGTERM, previous)
    print(f"{len(fits)} participants fitted -> {options.out}")
    if truth is not None:
        if options.only:
            truth = {name: truth[name] for name in fits}
        rows, found = cmr_fits.recovery(truth, fits, fitting.spec.names)
        files.write_csv(options.out / "recovery.csv", rows)
        files.write_json(options.out / "recovery.json", found)
        print(f"recovery over {found['n']} simulated participants, Pearson's r: "
              + ", ".join(f"{name} {r:.3f}" for name, r in found["r"].items()))


class _Stopped(Exception):
    """SIGTERM arrived: the fit in progress is abandoned (each participant's file is written whole or not at all)."""


def _stop(signum: int, frame: Any) -> None:
    raise _Stopped
