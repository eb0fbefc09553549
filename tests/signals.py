"""The tests' name for primacy.testing.SignalAt (class_path "signals.SignalAt" in their command lines)."""

from primacy.testing import SignalAt

__all__ = ["SignalAt"]
