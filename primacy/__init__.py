"""primacy: which items do sequence models remember? Serial-position effects in S4, LSTM and friends."""

from primacy import moved

__version__ = "0.1.0"

moved.install()  # module paths of configs and checkpoints written before the package layout keep loading
