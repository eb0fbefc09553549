"""Post-hoc analyses of a model's memory, pure functions of tensors and arrays in two packages: ``behaviour`` (what a
model or a person recalls: serial position, free recall, a group's curves, the CMR model) and ``heads`` (what a
model's attention heads do: scores, their lag-CRPs and CMR fits, probes, ablation, over training).

Modules:
    behaviour  what a model or a person recalls: serial position, free recall, groups, CMR
    evidence   the one rule for words about results (an effect at >= 2 SE of its n)
    heads      what a model's attention heads (or its units with an exact influence) do
"""
