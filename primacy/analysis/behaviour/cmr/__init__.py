"""The CMR model of free recall: the settings of its simulation (``simulation``), its simulated lag-CRP
(``simulate``, and ``reference`` written plainly), a grid of simulated curves over the parameters (``grid``) and the
fits of a curve to that grid or to a Gaussian (``fits``).
Modules import in that order only. Apart from them, cymr's CMR of whole recall sequences: their likelihood
(``likelihood``), simulated sequences from its choice probabilities (``generate``) and maximum-likelihood fits and
parameter recovery (``fitting``, which needs scipy); these import in that order and none of the modules above.

Modules:
    closed_form  the grid cells the authors compute in closed form
    fits         a lag curve fitted to the grid's CRPs or to a Gaussian
    fitting      maximum-likelihood fits of whole recall sequences and parameter recovery (scipy)
    generate     recall sequences simulated from cymr's choice probabilities
    grid         the grid of simulated lag-CRPs over (beta_enc, beta_rec, gamma_FT): built, loaded
    likelihood   the likelihood of recall sequences under CMR, as cymr computes it
    reference    the simulation written plainly, in float64, for the tests
    simulate     CMR's simulated lag-CRP, one parameter set or many at once
    simulation   the simulation's settings, one checked Simulation (variant, seed, chains, draws, ...)
"""

from primacy.analysis.behaviour.cmr.fits import fit_cmr, fit_gaussian
from primacy.analysis.behaviour.cmr.fitting import (
    DE_OPTIONS,
    DEFAULT_DEPENDENT,
    DEFAULT_FIXED,
    DEFAULT_FREE,
    FitSpec,
    LikelihoodFit,
    count_events,
    fit_cmr_likelihood,
    parameter_recovery,
    recovery_correlations,
    sample_parameters,
)
from primacy.analysis.behaviour.cmr.generate import cmr_generate, cmr_generate_many
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
                                           association,
                                           cmr_crp,
                                           cmr_crps,
                                           draw,
                                           drift,
                                           study_contexts,
)
from primacy.analysis.behaviour.cmr.simulation import (
    DEFAULT_TEMPERATURE,
    VARIANTS,
    Simulation,
    SimulationSettings,
    Variant,
    check_simulation,
)

__all__ = ["DEFAULT_DEPENDENT", "DEFAULT_FIXED", "DEFAULT_FREE", "DEFAULT_TEMPERATURE", "DE_OPTIONS",
           "PARAMETER_NAMES", "VARIANTS", "CMRGrid", "CMRParameters", "FitSpec", "LikelihoodFit", "Simulation",
           "SimulationSettings", "Variant", "association", "check_simulation", "cmr_choice_probabilities", "cmr_crp",
           "cmr_crps", "cmr_generate", "cmr_generate_many", "cmr_list_log_likelihoods", "cmr_log_likelihood",
           "cmr_log_likelihoods", "cmr_person_log_likelihood", "count_events", "draw", "drift", "fit_cmr",
           "fit_cmr_likelihood", "fit_gaussian", "parameter_recovery", "recovery_correlations", "reference_crp",
           "sample_parameters", "study_contexts"]
