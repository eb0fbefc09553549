"""Attention heads: a model seen as heads (``model``: primacy's Transformers, and the units of its backbones with an
exact influence; ``pretrained``: Hugging Face models with attention, and Mamba's),
their scores on the repeated-token prompt (``scores``), every head's scores, lag-CRP and CMR fits (``analysis``),
probe attention in verification (``probes``), head ablation and the ICL score (``ablation``), heads over training
(``emergence``) and natural text's windows and frequent tokens (``natural_text``).

``primacy.analysis.heads`` was the module of the scores before it became this package: its old names resolve to
``scores`` with a FutureWarning (``primacy.moved.PACKAGES``).

Modules:
    ablation      head ablation and the ICL score (Fig. 8)
    analysis      every head's scores, attention lag-CRP and CMR fits
    emergence     heads and their CMR fits over training, a row per checkpoint (Fig. 7)
    model         what the head analyses need of a model, for models trained here
    natural_text  natural text's windows and most frequent tokens
    pretrained    Hugging Face causal language models (and Mamba) seen as heads
    probes        where a Transformer's queries look on verification (Morita 2025)
    scores        induction, duplicate-token, previous-token and copying scores on [BOS] r r
    selection     the selection step's Delta token by token
"""

from primacy import moved


def __getattr__(name: str) -> object:  # names of the module primacy.analysis.heads was before it became this package
    return moved.old_name(__name__, name)
