"""Work over several runs that the commands share (below cli/, above everything else): the shared modules here, and
one package per study, which imports the shared modules and no other study's package (``paper`` draws every study's
results, so it may import them).

Modules:
    aggregate  runs that differ by seed combined through their kind of result
    atlas      the memory atlas: rows searched, seeds, tables and figure
    claims     the docs' findings as data, checked against results
    humans     models beside people: data, analyses and CMR fitted by likelihood
    induction  induction heads and ICL: analyses of checkpoints, pretrained models, published files
    launchers  the runs of a sweep started here (or as SLURM tasks) and their state
    paper      the figures of primacy reproduce: the paper's pages and figure files
    runs       a sweep's runs: a config at a seed, where it stands, scales and configs
    slurm      the array job's options, checks, submission and state on SLURM
    tables     the tables reproduce writes: mean +- SE, rounded once
"""
