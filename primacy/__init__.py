"""primacy: which items do sequence models remember? Serial-position effects in S4, LSTM and friends."""

__version__ = "0.1.0"
