"""State-space building blocks shared by the SSM backbones: HiPPO matrices, discretisation, kernels.

Modules:
    dense      dense references: bilinear discretisation, impulse responses
    diagonal   diagonal SSMs: discretisation and the S4D kernel
    dplr       DPLR SSMs: discretisation and the S4 kernel
    hippo      HiPPO matrices and their NPLR decomposition
    timescale  Delta t: range check, log-uniform initialisation, parameterisation
"""
