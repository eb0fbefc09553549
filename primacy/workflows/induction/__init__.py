"""Induction heads and in-context learning: the analyses of a model's heads (ICL, ablation, probes) written to their
folders, the models they read (a run's checkpoints or a pretrained Hugging Face model), the texts they score, and the
ICL paper's published per-head files as the same analyses.

Modules:
    analyses         analyze icl, ablation and probes as functions writing their folders
    hf_models        Hugging Face causal language models loaded
    probes           probe attention of verification runs, measured and written
    published        the authors' published per-head files read without their pickles
    published_heads  those files as primacy's own analyses
    sources          where analyze reads a model from: a checkpoint or a pretrained model
    texts            natural text and token lists for analyze icl|ablation
"""
