"""What a maximum-likelihood CMR fit of one person costs with the default spec (ten free parameters, Morton & Polyn
2016) on the human datasets, Morton2013 (48 lists of 24 words) and PEERS (28 lists of 16 words): seconds,
generations and parameter sets scored per person, and the time to fit all 40 + 126 people on 2 cores (one fit per
core, one thread each). With --reference, each person is also fitted by a much longer search (a larger population,
a 100 times tighter tolerance, another seed) and the gap in log-likelihood is printed: how much the default search
leaves on the table. Prints; no thresholds.

    python benchmarks/cmr_fit.py [--people 3] [--datasets Morton2013 peers] [--reference] [--popsize 15]
        [--atol 0.01] [--maxiter 1000] [--no-polish] [--bounds T=0.001,1 P2=0.01,10] [--parameters]

The machine may be shared: the load average is printed before and after; per-person seconds assume a free core.
"""

from __future__ import annotations

import os

for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")  # one fit per core: numpy's BLAS single-threaded (set before its import)

import argparse  # noqa: E402
import statistics  # noqa: E402

import numpy as np  # noqa: E402

from primacy.analysis.behaviour.cmr.fitting import DE_OPTIONS, FitSpec, fit_cmr_likelihood  # noqa: E402
from primacy.analysis.behaviour.free_recall import recall_positions  # noqa: E402
from primacy.workflows import people  # noqa: E402

PEOPLE = {"Morton2013": 40, "peers": 126}  # the datasets' sizes, for the projection
CORES = 2
REFERENCE = {"popsize": 40, "tol": 0.0, "atol": 1e-4, "maxiter": 5000, "polish": True}  # the long search


def spec_with(bounds: list[str]) -> FitSpec:
    """The default spec with some free parameters' bounds replaced ("T=0.001,1")."""
    default = FitSpec()
    free = dict(default.free)
    for item in bounds:
        name, values = item.split("=")
        free[name] = tuple(float(v) for v in values.split(","))
    return FitSpec(free=free, fixed=default.fixed, dependent=default.dependent)


def at_bounds(fit, spec: FitSpec) -> str:
    """The free parameters within 0.1% of their range of a bound, as "T<" (low) or "Lcf>" (high)."""
    marks = []
    for name, (low, high) in spec.free.items():
        value, margin = fit.parameters[name], 1e-3 * (high - low)
        marks += [f"{name}<"] if value <= low + margin else [f"{name}>"] if value >= high - margin else []
    return " ".join(marks) or "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--people", type=int, default=3, help="the first N people of each dataset")
    parser.add_argument("--datasets", nargs="+", choices=sorted(PEOPLE), default=sorted(PEOPLE))
    parser.add_argument("--reference", action="store_true", help="also fit each person by a much longer search")
    parser.add_argument("--popsize", type=int, default=DE_OPTIONS["popsize"])
    parser.add_argument("--atol", type=float, default=DE_OPTIONS["atol"])
    parser.add_argument("--tol", type=float, default=DE_OPTIONS["tol"])
    parser.add_argument("--maxiter", type=int, default=DE_OPTIONS["maxiter"])
    parser.add_argument("--polish", action=argparse.BooleanOptionalAction, default=DE_OPTIONS["polish"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--bounds", nargs="*", default=[], help="NAME=LOW,HIGH replacing a default bound")
    parser.add_argument("--parameters", action="store_true", help="print each fit's free parameters")
    args = parser.parse_args()
    spec = spec_with(args.bounds)
    options = dict(popsize=args.popsize, tol=args.tol, atol=args.atol, maxiter=args.maxiter, polish=args.polish)
    print(f"free {spec.free}")
    print(f"search {options}{f'; reference {REFERENCE}, seed {args.seed + 1}' if args.reference else ''}; "
          f"{os.environ['OMP_NUM_THREADS']} thread(s); load average before: {os.getloadavg()[0]:.2f}")

    per_person = {}
    for name in args.datasets:
        persons = people.load(name)[: args.people]
        n_items = persons[0].study.shape[1]
        print(f"\n{name}: {len(persons[0].study)} lists of {n_items} items")
        print(f"{'subject':>8} {'s':>6} {'gens':>5} {'sets':>7} {'ms/set':>6} {'logL':>10} {'conv':>4}"
              f"{' ref logL   gap  ref s' if args.reference else ''}  at bounds")
        seconds, gaps = [], []
        for person in persons:
            positions = recall_positions(person.study, person.recalls).numpy()
            fit = fit_cmr_likelihood(positions, n_items, spec, seed=args.seed, **options)
            seconds.append(fit.seconds)
            row = (f"{str(person.subject):>8} {fit.seconds:6.1f} {fit.generations:5d} {fit.evaluations:7d} "
                   f"{1e3 * fit.seconds / fit.evaluations:6.3f} {fit.log_likelihood:10.3f} {fit.converged!s:>4}")
            if args.reference:
                long = fit_cmr_likelihood(positions, n_items, spec, seed=args.seed + 1, **REFERENCE)
                best = max(long.log_likelihood, fit.log_likelihood)
                gaps.append(best - fit.log_likelihood)
                row += f" {long.log_likelihood:9.3f} {gaps[-1]:5.3f} {long.seconds:6.1f}"
            print(f"{row}  {at_bounds(fit, spec)}", flush=True)
            if args.parameters:
                print(" " * 9 + " ".join(f"{n} {fit.parameters[n]:.4g}" for n in spec.names))
        per_person[name] = statistics.mean(seconds)
        print(f"{name}: {per_person[name]:.1f} s per person (median {statistics.median(seconds):.1f}, max "
              f"{max(seconds):.1f})" + (f"; gap to the reference: mean {np.mean(gaps):.3f}, max {max(gaps):.3f} "
                                        "log-likelihood units" if gaps else ""))

    total = sum(PEOPLE[name] * per_person[name] for name in per_person)
    print(f"\nall {' + '.join(f'{PEOPLE[n]} {n}' for n in per_person)} people: {total / 60:.1f} min on 1 core, "
          f"{total / 60 / CORES:.1f} min on {CORES} cores (from the first {args.people} of each); "
          f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
