"""The CMR model of free recall: its simulated lag-CRP (``simulate``, and ``reference`` written plainly), a grid of
simulated curves over the parameters (``grid``) and the fits of a curve to that grid or to a Gaussian (``fits``).
Modules import in that order only."""

from primacy.analysis.behaviour.cmr.fits import fit_cmr, fit_gaussian
from primacy.analysis.behaviour.cmr.grid import CMRGrid
from primacy.analysis.behaviour.cmr.reference import reference_crp
from primacy.analysis.behaviour.cmr.simulate import (
                                           DEFAULT_TEMPERATURE,
                                           VARIANTS,
                                           Variant,
                                           association,
                                           check_simulation,
                                           cmr_crp,
                                           cmr_crps,
                                           draw,
                                           drift,
                                           study_contexts,
)

__all__ = ["DEFAULT_TEMPERATURE", "VARIANTS", "CMRGrid", "Variant", "association", "check_simulation", "cmr_crp",
           "cmr_crps", "draw", "drift", "fit_cmr", "fit_gaussian", "reference_crp", "study_contexts"]
