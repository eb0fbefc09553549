"""Attention heads: a model seen as heads (``model``: primacy's Transformers, and the units of its backbones with an
exact influence; ``pretrained``: Hugging Face models with attention, and Mamba's),
their scores on the repeated-token prompt (``scores``), every head's scores, lag-CRP and CMR fits (``analysis``),
probe attention in verification (``probes``), head ablation and the ICL score (``ablation``), heads over training
(``emergence``) and natural text's windows and frequent tokens (``natural_text``).

``primacy.analysis.heads`` was the module of the scores before it became this package: its old names resolve to
``scores`` with a FutureWarning (``primacy.moved.PACKAGES``).
"""

from primacy import moved


def __getattr__(name: str) -> object:  # names of the module primacy.analysis.heads was before it became this package
    return moved.old_name(__name__, name)
