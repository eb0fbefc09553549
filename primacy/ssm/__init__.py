"""State-space building blocks shared by the SSM backbones: HiPPO matrices, discretisation, kernels."""
