"""primacy-mamba: Mamba (selective state-space model) as a primacy backbone, found as ``MambaBackbone``."""

from primacy_mamba.backbone import MambaBackbone

__all__ = ["MambaBackbone"]
