"""How CMR's lag-CRP is simulated: the settings of ``cmr_crp``, ``cmr_crps``, ``reference_crp`` and ``CMRGrid.build``
in one checked, frozen ``Simulation``, and the checks of a parameter set (β_enc, β_rec, γ_FT)."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Literal, TypedDict, Unpack

import torch

from primacy.checks import one_of
from primacy.errors import UsageError

Variant = Literal["paper", "canonical"]
VARIANTS = ("paper", "canonical")
# Canonical activations are cosines in [0, 1] and n = 100 items compete, so the temperature must sit well below
# 1 / ln(n) ≈ 0.22 for the best-cued item to outweigh the many weakly cued ones. At 0.1 an item at cosine 1 is
# e^10 ≈ 2·10^4 times as likely as one at cosine 0: a clear +1 peak over graded tails, like the paper variant's
# curves (at (0.5, 0.5, 0.5) lag +1 holds 0.41 of the mass; paper variant 0.20). At 0.5 the curve is nearly flat
# (+1: 0.10; uniform over 17 lags: 0.06), at 0.05 lag +1 takes 0.70.
DEFAULT_TEMPERATURE = 0.1
# Draws per chain when a caller does not say. Paper: 50, what made the authors' published grid (corxyz/icl-cmr
# saved_crps/cmr_crp_avg_20_11.npy; its cells are reproduced within noise at 50 draws and are not at 100, although
# their published script says max_samps = 100). Canonical: 50 too; its chains never end early (no end state), so that
# every chain costs 50 steps.
DEFAULT_SAMPLES = {"paper": 50, "canonical": 50}


def check_set(beta_enc: float, beta_rec: float, gamma_ft: float, variant: str) -> None:
    """Raise a UsageError if the parameter set (or ``variant``) is not allowed: β_enc in (0, 1], β_rec and γ_FT in
    [0, 1]."""
    one_of("variant", variant, VARIANTS)
    if not 0 < beta_enc <= 1:
        raise UsageError(f"beta_enc={beta_enc} is invalid: it must lie in (0, 1]")
    for name, value in (("beta_rec", beta_rec), ("gamma_ft", gamma_ft)):
        if not 0 <= value <= 1:
            raise UsageError(f"{name}={value} is invalid: it must lie in [0, 1]")


def draws_per_chain(variant: str, max_samples: int | None) -> int:
    """``max_samples``, or the variant's ``DEFAULT_SAMPLES`` when it is None."""
    one_of("variant", variant, VARIANTS)
    return DEFAULT_SAMPLES[variant] if max_samples is None else max_samples


class SimulationSettings(TypedDict, total=False):
    """``Simulation``'s fields as keywords, for the functions that take them one by one too (``cmr_crp(..., seed=3)``):
    ``Simulation`` checks and keeps them."""

    variant: Variant
    temperature: float
    seed: int
    n_items: int
    n_starts: int
    n_chains: int
    max_samples: int | None
    max_lag: int
    dtype: torch.dtype


@dataclass(frozen=True)
class Simulation:
    """How CMR's lag-CRP is simulated (``cmr_crp``, ``cmr_crps``, ``reference_crp``, ``CMRGrid.build``), checked
    once, on construction: a one-line UsageError names the first setting that is not allowed.

    ``variant`` (``VARIANTS``); ``temperature``: the softmax temperature of ``canonical`` (unused by ``paper``), > 0;
    ``seed``: of the one uniform per chain and step, any whole number (kept as an int); ``n_starts`` start positions in
    [1, n_items] of ``n_items`` studied items, ``n_chains`` chains each (>= 1), at most ``max_samples`` draws per chain
    (>= 1; None: the variant's ``DEFAULT_SAMPLES``, ``draws``); lags -max_lag..max_lag counted (>= 0); ``dtype``
    float32 or float64 (the fast path's arithmetic; ``reference_crp`` is float64 whatever it says)."""

    variant: Variant = "paper"
    temperature: float = DEFAULT_TEMPERATURE
    seed: int = 0
    n_items: int = 100
    n_starts: int = 20
    n_chains: int = 1000
    max_samples: int | None = None
    max_lag: int = 8
    dtype: torch.dtype = torch.float64

    def __post_init__(self) -> None:
        draws = draws_per_chain(self.variant, self.max_samples)
        if not self.temperature > 0:
            raise UsageError(f"temperature={self.temperature} is invalid: it must be > 0")
        if not 1 <= self.n_starts <= self.n_items:
            raise UsageError(f"n_starts={self.n_starts} is invalid: it must lie in [1, n_items={self.n_items}]")
        for name, value, least in (("n_chains", self.n_chains, 1), ("max_samples", draws, 1),
                                   ("max_lag", self.max_lag, 0)):
            if value < least:
                raise UsageError(f"{name}={value} is invalid: it must be >= {least}")
        if self.dtype not in (torch.float32, torch.float64):
            raise UsageError(f"dtype={self.dtype} is invalid: choose torch.float32 or torch.float64")
        try:
            seed = int(self.seed)
        except (TypeError, ValueError):
            seed = None
        if seed is None or seed != self.seed:
            raise UsageError(f"seed={self.seed!r} is invalid: it must be a whole number")
        object.__setattr__(self, "seed", seed)  # an int, what torch.Generator takes (not numpy's)

    @classmethod
    def of(cls, simulation: Simulation | None, settings: SimulationSettings) -> Simulation:
        """``simulation`` (None: every default) with the keyword ``settings`` put over it: how a function that takes
        either (or both) gets its one checked ``Simulation``."""
        base = cls() if simulation is None else simulation
        return replace(base, **settings) if settings else base

    @property
    def draws(self) -> int:
        """The most draws per chain: ``max_samples``, or the variant's ``DEFAULT_SAMPLES`` when that is None."""
        return draws_per_chain(self.variant, self.max_samples)

    @property
    def n_lags(self) -> int:
        """How many lags a curve holds, -max_lag..max_lag."""
        return 2 * self.max_lag + 1

    def lags(self) -> torch.Tensor:
        """The lags of a curve (n_lags,): -max_lag..max_lag."""
        return torch.arange(-self.max_lag, self.max_lag + 1)

    def recorded(self) -> dict:
        """The settings as a grid file records them: every field, ``max_samples`` as ``draws``, the temperature a
        float and the dtype its name ("float32")."""
        return {**{f.name: getattr(self, f.name) for f in fields(self)}, "temperature": float(self.temperature),
                "max_samples": self.draws, "dtype": str(self.dtype).removeprefix("torch.")}

    def check_params(self, params: torch.Tensor) -> None:
        """Raise a UsageError for the first parameter row (β_enc, β_rec, γ_FT) of ``params`` (G, 3) that is not
        allowed."""
        for row in torch.as_tensor(params, dtype=torch.float64).reshape(-1, 3).tolist():
            check_set(*row, self.variant)


def check_simulation(params: torch.Tensor, simulation: Simulation | None = None,
                     **settings: Unpack[SimulationSettings]) -> Simulation:
    """The ``Simulation`` of ``cmr_crps`` (``simulation`` with the keyword ``settings`` over it), after a UsageError
    for its first setting, then its first parameter row (G, 3), that is not allowed."""
    simulation = Simulation.of(simulation, settings)
    simulation.check_params(params)
    return simulation
