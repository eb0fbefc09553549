"""Maximum-likelihood fits of CMR to one person's recall sequences, as cymr's ``fit_indiv`` makes them (differential
evolution on ``likelihood``'s log-likelihood), and parameter recovery on people simulated by ``generate``.

A fit maximises logL(θ) = Σ_lists log P(list | θ) over the free parameters θ within their bounds; fixed parameters
keep their values and dependent ones follow the free ones (Dfc = 1 - Lfc). Differential evolution (scipy) keeps a
population of S = popsize · k parameter sets and scores each generation with ONE ``cmr_log_likelihoods`` call over
the whole population. It reports logL, the number of modelled events n (each correct recall and each list's stop)
and k free parameters, so BIC = k ln n - 2 logL.

Needs scipy (the ``humans`` extra). Shapes: S parameter sets of a generation, k free parameters, P people.
"""

from __future__ import annotations

import inspect
import math
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from primacy.analysis.behaviour.cmr.generate import _count, _rng, cmr_generate_many
from primacy.analysis.behaviour.cmr.likelihood import (
    PARAMETER_NAMES,
    CMRParameters,
    _check_table,
    _correct_recalls,
    _parameter_table,
    cmr_log_likelihood,
    cmr_log_likelihoods,
)
from primacy.errors import UsageError

INSTALL = "pip install -e '.[humans]'"
NAN_PENALTY = 1e7  # cymr's: a parameter set whose log-likelihood is NaN scores -1e7 (ours never is; kept as a guard)

# Morton & Polyn (2016)'s free parameters with cymr's names, and bounds a cymr user gives them: the unit interval for
# drift and learning rates (Dfc = 1 - Lfc and Dcf = 1 - Lcf stay >= 0), P1 up to 10, P2 and X2 wide enough that no
# fitted person of Morton2013 or PEERS came near their upper bounds (P2 <= 6.3, X2 <= 1 of 30 measured). T, whose
# choice rule is e^(2a/T): above 0.01, since below it only a ridge is left to explore, on which T, Lfc, Lcf and P1
# shrink together (and B_start -> 1) while logL approaches a limit: 3 of 6 Morton2013 people and 4 of 24 PEERS people
# fit at T = 0.01 on it, and a bound of 0.001 (0.0001) gained them 1.1-1.4 (another 0.05) log-likelihood units with no
# identifiable parameter; cymr's own e^(2a/T) overflows (NaN) there for a > 3.5. At most 1, twice the largest T fitted
# (0.62). A fit at a bound is reported by benchmarks/cmr_fit.py.
DEFAULT_FREE = {"B_enc": (0.0, 1.0), "B_start": (0.0, 1.0), "B_rec": (0.0, 1.0), "Lfc": (0.0, 1.0),
                "Lcf": (0.0, 1.0), "P1": (0.0, 10.0), "P2": (0.01, 10.0), "T": (0.01, 1.0), "X1": (0.0, 1.0),
                "X2": (0.0, 5.0)}
DEFAULT_FIXED = {"Afc": 0.0, "Acf": 0.0}
DEFAULT_DEPENDENT = {"Dfc": "1 - Lfc", "Dcf": "1 - Lcf"}
# scipy's differential_evolution settings (benchmarks/cmr_fit.py measured them on the first 6 people of Morton2013 and
# PEERS). The search stops when the population's logL spread (standard deviation) is below atol = 0.01 units (tol = 0:
# scipy's relative tol = 0.01 of |logL| ≈ 500-1900 stopped after ~45 generations, 6-9 units short); its best was
# then 0.002-0.018 units below that of a search with popsize 40, atol 10⁻⁴ and another seed, at a quarter of the
# time. 120-550 generations were needed (maxiter 1000 leaves room; ``converged`` says whether it sufficed). Polish
# (scipy's L-BFGS-B from the best, as cymr's default) adds ~200 single-set evaluations, 1-3% of the time, and gains
# 0.001-0.004 units: about half of that remaining gap.
DE_OPTIONS: dict[str, Any] = {"popsize": 15, "tol": 0.0, "atol": 0.01, "maxiter": 1000, "polish": True}
_SET_BY_FIT = ("func", "bounds", "args", "vectorized", "updating", "workers", "rng", "seed", "constraints",
               "integrality")
_NUMBER = r"(\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?)"
_AFFINE = re.compile(rf"^\s*(?:{_NUMBER}\s*([-+])\s*)?(?:{_NUMBER}\s*\*\s*)?([A-Za-z_]\w*)\s*$")


def _scipy_optimize():
    try:
        from scipy import optimize
    except ImportError:
        raise UsageError(f"fitting CMR needs scipy: {INSTALL}") from None
    return optimize


def _affine(name: str, expression: str) -> tuple[float, float, str]:
    """``expression`` "[a ±] [b *] SOURCE" as (offset a, scale ±b, SOURCE): the dependent value is a ± b · SOURCE."""
    match = _AFFINE.match(expression) if isinstance(expression, str) else None
    if match is None:
        raise UsageError(f"FitSpec: dependent {name}={expression!r} is not understood: write it as "
                         "'SOURCE', 'a - SOURCE' or 'a + b * SOURCE' (numbers a, b; SOURCE a free or fixed parameter)")
    offset, sign, scale, source = match.groups()
    scale = float(scale) if scale is not None else 1.0
    if offset is None:
        return 0.0, scale, source
    return float(offset), (-scale if sign == "-" else scale), source


@dataclass(frozen=True)
class FitSpec:
    """Which of CMR's parameters a fit searches (``free``: name -> (low, high)), which it holds (``fixed``:
    name -> value) and which follow others (``dependent``: name -> "a - b * SOURCE", an affine function of one free or
    fixed parameter). Every one of the 14 parameters is in exactly one. The default is Morton & Polyn (2016)'s
    model as cymr users fit it: ten free parameters (``DEFAULT_FREE``), Afc = Acf = 0, Dfc = 1 - Lfc, Dcf = 1 - Lcf."""

    free: Mapping[str, tuple[float, float]] = field(default_factory=lambda: dict(DEFAULT_FREE))
    fixed: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_FIXED))
    dependent: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_DEPENDENT))

    def __post_init__(self) -> None:
        groups = {"free": self.free, "fixed": self.fixed, "dependent": self.dependent}
        for group, values in groups.items():
            if not isinstance(values, Mapping):
                raise UsageError(f"FitSpec: {group}={values!r} is invalid: it must be a dict of parameter names")
            unknown = sorted(set(values) - set(PARAMETER_NAMES))
            if unknown:
                raise UsageError(f"FitSpec: {group} has unknown parameter {unknown[0]!r}: the parameters are "
                                 f"{', '.join(PARAMETER_NAMES)}")
        for name in PARAMETER_NAMES:
            where = [group for group, values in groups.items() if name in values]
            if len(where) > 1:
                raise UsageError(f"FitSpec: {name} is both {where[0]} and {where[1]}: give it in one of free, fixed "
                                 "and dependent")
            if not where:
                raise UsageError(f"FitSpec: {name} is missing: give it in one of free (bounds), fixed (a value) and "
                                 "dependent (an expression)")
        if not self.free:
            raise UsageError("FitSpec: free is empty: a fit needs at least one free parameter")
        free = {}
        for name, bounds in self.free.items():
            try:
                low, high = (float(b) for b in bounds)
            except (TypeError, ValueError):
                raise UsageError(f"FitSpec: free {name}={bounds!r} is invalid: give bounds (low, high)") from None
            if not (math.isfinite(low) and math.isfinite(high) and low < high):
                raise UsageError(f"FitSpec: free {name}=({low:g}, {high:g}) is invalid: bounds must be finite with "
                                 "low < high")
            free[name] = (low, high)
        fixed = {}
        for name, value in self.fixed.items():
            if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
                raise UsageError(f"FitSpec: fixed {name}={value!r} is invalid: it must be a number")
            fixed[name] = float(value)
        for name, expression in self.dependent.items():
            source = _affine(name, expression)[2]
            if source not in free and source not in fixed:
                raise UsageError(f"FitSpec: dependent {name}={expression!r} depends on {source!r}, which is not a "
                                 "free or fixed parameter")
        object.__setattr__(self, "free", {n: free[n] for n in PARAMETER_NAMES if n in free})
        object.__setattr__(self, "fixed", {n: fixed[n] for n in PARAMETER_NAMES if n in fixed})
        object.__setattr__(self, "dependent", {n: self.dependent[n] for n in PARAMETER_NAMES if n in self.dependent})
        corners = self.table(self.bounds.T)  # 2 14: every free parameter at its low, then its high bound
        try:  # each dependent parameter is affine in one other, so its extremes are at these corners
            _check_table(corners, "")
        except UsageError as error:
            raise UsageError(f"FitSpec: its bounds, fixed values and dependent expressions allow an invalid "
                             f"parameter set: {error}") from None

    def __hash__(self) -> int:  # its dicts are never changed after __post_init__
        return hash((tuple(self.free.items()), tuple(self.fixed.items()), tuple(self.dependent.items())))

    @property
    def names(self) -> tuple[str, ...]:
        """The free parameters, in ``PARAMETER_NAMES`` order: the columns of a fit's search and of recovery."""
        return tuple(self.free)

    @property
    def bounds(self) -> np.ndarray:
        """(k, 2) float64: each free parameter's (low, high)."""
        return np.array([self.free[name] for name in self.names], dtype=np.float64)

    def table(self, values: npt.ArrayLike) -> np.ndarray:
        """Full parameter sets (S, 14), columns ``PARAMETER_NAMES``, from the free parameters' values (S, k)."""
        values = np.asarray(values, dtype=np.float64)
        table = np.empty((len(values), len(PARAMETER_NAMES)))  # S 14
        column = {name: k for k, name in enumerate(PARAMETER_NAMES)}
        for k, name in enumerate(self.names):
            table[:, column[name]] = values[:, k]
        for name, value in self.fixed.items():
            table[:, column[name]] = value
        for name, expression in self.dependent.items():
            offset, scale, source = _affine(name, expression)
            table[:, column[name]] = offset + scale * table[:, column[source]]
        return table

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: {"free": {name: [low, high]}, "fixed": {...}, "dependent": {...}}."""
        return {"free": {n: list(b) for n, b in self.free.items()}, "fixed": dict(self.fixed),
                "dependent": dict(self.dependent)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FitSpec:
        return cls(free={n: tuple(b) for n, b in data["free"].items()}, fixed=dict(data["fixed"]),
                   dependent=dict(data["dependent"]))


@dataclass(frozen=True)
class LikelihoodFit:
    """A maximum-likelihood fit: all 14 ``parameters`` (free, fixed and dependent), its ``log_likelihood`` (cymr's
    ``logl``: each event's probability floored at 10⁻⁵), ``n`` modelled events, the ``free`` parameters' names (k of
    them), the search's ``generations`` and ``evaluations`` (parameter sets scored), its ``seconds``, and whether
    differential evolution ``converged`` (its tolerance met before ``maxiter``)."""

    parameters: Mapping[str, float]
    log_likelihood: float
    n: int
    free: tuple[str, ...]
    generations: int
    evaluations: int
    seconds: float
    converged: bool

    @property
    def k(self) -> int:
        """The number of free parameters."""
        return len(self.free)

    @property
    def bic(self) -> float:
        """Bayesian information criterion k ln n - 2 logL (lower is better)."""
        return self.k * math.log(self.n) - 2 * self.log_likelihood

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, with k and bic added for readers (``from_dict`` recomputes them)."""
        return {"parameters": dict(self.parameters), "log_likelihood": self.log_likelihood, "n": self.n,
                "free": list(self.free), "k": self.k, "bic": self.bic, "generations": self.generations,
                "evaluations": self.evaluations, "seconds": self.seconds, "converged": self.converged}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LikelihoodFit:
        parameters = CMRParameters.of(data["parameters"])  # checked: every name, valid values
        return cls(parameters={n: getattr(parameters, n) for n in PARAMETER_NAMES},
                   log_likelihood=float(data["log_likelihood"]), n=int(data["n"]), free=tuple(data["free"]),
                   generations=int(data["generations"]), evaluations=int(data["evaluations"]),
                   seconds=float(data["seconds"]), converged=bool(data["converged"]))


def count_events(positions: npt.ArrayLike, n_items: int) -> int:
    """The number of events the likelihood models in ``positions`` (B, R): every correct recall and every list's
    stop, intrusions and repetitions dropped (cymr's ``n``; BIC's sample size)."""
    _, counts = _correct_recalls(positions, n_items)
    return int(counts.sum()) + len(counts)


def _seed(seed: int) -> int:
    """``seed`` if it is an int >= 0 (a fit's seed, the same for every evaluation order), else a UsageError."""
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or seed < 0:
        raise UsageError(f"seed={seed!r} is invalid: it must be an int >= 0")
    return int(seed)


def _de_options(de_options: Mapping[str, Any]) -> dict[str, Any]:
    """DE_OPTIONS updated by ``de_options``, each a keyword of scipy's differential_evolution that a fit leaves open."""
    accepted = set(inspect.signature(_scipy_optimize().differential_evolution).parameters) - set(_SET_BY_FIT)
    for name in de_options:
        if name in _SET_BY_FIT:
            raise UsageError(f"de_options: {name} is set by the fit itself (a vectorised, seeded search over the "
                             "spec's bounds): leave it out")
        if name not in accepted:
            raise UsageError(f"de_options: {name} is not an option of scipy's differential_evolution: choose from "
                             f"{', '.join(sorted(accepted))}")
    return DE_OPTIONS | dict(de_options)


def fit_cmr_likelihood(positions: npt.ArrayLike, n_items: int, spec: FitSpec | None = None, seed: int = 0,
                       **de_options: Any) -> LikelihoodFit:
    """The maximum-likelihood fit of CMR to one person's lists (``positions`` (B, R) and ``n_items`` as in
    ``cmr_log_likelihood``) over ``spec``'s free parameters (default ``FitSpec()``), by scipy's differential
    evolution seeded with ``seed``: each generation scores its whole population in one ``cmr_log_likelihoods``
    call. ``de_options`` override ``DE_OPTIONS`` (popsize, tol, maxiter, polish, ...)."""
    optimize = _scipy_optimize()
    spec = FitSpec() if spec is None else spec
    if not isinstance(spec, FitSpec):
        raise UsageError(f"spec={spec!r} is invalid: give a FitSpec")
    seed = _seed(seed)
    options = _de_options(de_options)
    positions = np.asarray(positions)
    n = count_events(positions, n_items)  # also checks positions and n_items, before the search

    evaluations = 0

    def energy(x: np.ndarray) -> np.ndarray:  # x (k, S) -> -logL (S,)
        nonlocal evaluations
        evaluations += x.shape[1]
        log_likelihood = cmr_log_likelihoods(spec.table(x.T), positions, n_items)  # S
        return -np.where(np.isnan(log_likelihood), -NAN_PENALTY, log_likelihood)

    start = time.perf_counter()
    result = optimize.differential_evolution(energy, spec.bounds, vectorized=True, updating="deferred",
                                             rng=seed, **options)
    seconds = time.perf_counter() - start
    best = spec.table(np.asarray(result.x)[None])[0]  # 14
    parameters = dict(zip(PARAMETER_NAMES, best.tolist()))
    return LikelihoodFit(parameters=parameters, log_likelihood=cmr_log_likelihood(parameters, positions, n_items),
                         n=n, free=spec.names, generations=int(result.nit), evaluations=evaluations,
                         seconds=seconds, converged=bool(result.success))


def sample_parameters(spec: FitSpec, n: int, seed: int | np.random.Generator,
                      quantiles: tuple[float, float] = (0.0, 1.0), pool: npt.ArrayLike | None = None) -> np.ndarray:
    """``n`` parameter sets (n, 14) to simulate people from, each free parameter drawn independently: uniformly
    between the ``quantiles`` of its bounds (low + q·(high - low); (0.1, 0.9) keeps away from the edges), or, with
    ``pool`` (M, 14) (such as fitted people's parameters), from that column of ``pool`` (a random row for each
    parameter, so the sets mix people). Fixed and dependent parameters follow ``spec``."""
    n, rng = _count("n", n), _rng(seed)
    bounds = spec.bounds  # k 2
    if pool is None:
        q_low, q_high = (float(q) for q in quantiles)
        if not 0.0 <= q_low < q_high <= 1.0:
            raise UsageError(f"quantiles={tuple(quantiles)} is invalid: it must be (low, high) with "
                             "0 <= low < high <= 1")
        low = bounds[:, 0] + q_low * (bounds[:, 1] - bounds[:, 0])
        high = bounds[:, 0] + q_high * (bounds[:, 1] - bounds[:, 0])
        values = low + (high - low) * rng.random((n, len(bounds)))  # n k
    else:
        pool = _parameter_table(pool, "pool")[:, [PARAMETER_NAMES.index(name) for name in spec.names]]  # M k
        outside = (pool < bounds[:, 0]) | (pool > bounds[:, 1])  # a value no fit under spec could recover
        if outside.any():
            row, k = np.argwhere(outside)[0]
            raise UsageError(f"pool[{row}]: {spec.names[k]}={pool[row, k]:g} lies outside the spec's bounds "
                             f"{tuple(bounds[k].tolist())}")
        values = pool[rng.integers(len(pool), size=bounds.shape[0] * n).reshape(n, -1), np.arange(len(bounds))]
    return spec.table(values)


def _true_table(true: Sequence[CMRParameters | Mapping[str, float]] | npt.ArrayLike, spec: FitSpec) -> np.ndarray:
    """``true`` as a checked table (P, 14) whose fixed and dependent parameters are ``spec``'s."""
    table = _parameter_table(true, "true")
    expected = spec.table(table[:, [PARAMETER_NAMES.index(name) for name in spec.names]])
    mismatch = ~np.isclose(table, expected, rtol=1e-12, atol=1e-12)
    if mismatch.any():
        row, column = np.argwhere(mismatch)[0]
        name = PARAMETER_NAMES[column]
        raise UsageError(f"true[{row}]: {name}={table[row, column]:g} is not the spec's {expected[row, column]:g}: "
                         "a recovery fits the spec's model, so the true parameters must follow its fixed and "
                         "dependent parameters (sample_parameters draws such sets)")
    return table


def parameter_recovery(true: Sequence[CMRParameters | Mapping[str, float]] | npt.ArrayLike, n_lists: int,
                       n_items: int, spec: FitSpec | None = None, seed: int = 0,
                       **de_options: Any) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    """Simulate a person of ``n_lists`` lists of ``n_items`` from each true parameter set (P sets, a table (P, 14) or
    a list of sets, following ``spec``), fit each with ``fit_cmr_likelihood`` and return the free parameters' true
    values (P, k), their fitted values (P, k) and their names (k,). ``seed`` seeds the simulation and the fits."""
    spec = FitSpec() if spec is None else spec
    seed = _seed(seed)
    table = _true_table(true, spec)
    lists = cmr_generate_many(table, n_lists, n_items, seed)  # P B L
    columns = [PARAMETER_NAMES.index(name) for name in spec.names]
    fitted = np.array([[fit.parameters[name] for name in spec.names] for fit in (
        fit_cmr_likelihood(person, n_items, spec, seed, **de_options) for person in lists)])
    return table[:, columns], fitted, spec.names


def recovery_correlations(true: npt.ArrayLike, fitted: npt.ArrayLike) -> np.ndarray:
    """Pearson's r between true and fitted values of each free parameter (k,): columns of (P, k) tables; NaN for a
    column without variance."""
    true, fitted = np.asarray(true, dtype=np.float64), np.asarray(fitted, dtype=np.float64)
    if true.shape != fitted.shape or true.ndim != 2 or len(true) < 2:
        raise UsageError(f"true {true.shape} and fitted {fitted.shape} must be tables of the same shape (people >= 2, "
                         "parameters)")
    dt, df = true - true.mean(0), fitted - fitted.mean(0)  # P k
    with np.errstate(divide="ignore", invalid="ignore"):
        return (dt * df).sum(0) / np.sqrt((dt**2).sum(0) * (df**2).sum(0))
