"""Sequence backbones: the Backbone contract and the built-in implementations."""

from primacy.backbones.base import Backbone

__all__ = ["Backbone"]
