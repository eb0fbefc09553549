"""The CMR model of free recall: its simulated lag-CRP (``simulate``, and ``reference`` written plainly), a grid of
simulated curves over the parameters (``grid``) and the fits of a curve to that grid or to a Gaussian (``fits``).
Modules import in that order only. Apart from them, the likelihood of whole recall sequences under cymr's CMR
(``likelihood``), which imports none of them."""

from primacy.analysis.behaviour.cmr.fits import fit_cmr, fit_gaussian
from primacy.analysis.behaviour.cmr.grid import CMRGrid
from primacy.analysis.behaviour.cmr.likelihood import (
    PARAMETER_NAMES,
    CMRParameters,
    cmr_choice_probabilities,
    cmr_list_log_likelihoods,
    cmr_log_likelihood,
    cmr_log_likelihoods,
    cmr_person_log_likelihood,
)
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

__all__ = ["DEFAULT_TEMPERATURE", "PARAMETER_NAMES", "VARIANTS", "CMRGrid", "CMRParameters", "Variant", "association",
           "check_simulation", "cmr_choice_probabilities", "cmr_crp", "cmr_crps", "cmr_list_log_likelihoods",
           "cmr_log_likelihood", "cmr_log_likelihoods", "cmr_person_log_likelihood", "draw", "drift", "fit_cmr",
           "fit_gaussian", "reference_crp", "study_contexts"]
