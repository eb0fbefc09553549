"""Work over several runs that the commands share (below cli/, above everything else).

Modules:
    aggregate        runs that differ by seed combined through their kind of result
    analyses         analyze icl, ablation and probes as functions writing their folders
    atlas            the memory atlas: rows searched, seeds, tables and figure
    atlas_cost       what an atlas still needs and its time (--status)
    atlas_files      atlas files: rows, knobs and their task configs, checked
    atlas_search     a row's bisection over its knob, replayed from its runs
    claims           the docs' findings as data, checked against results
    cmr_fits         CMR fitted by likelihood to participants, chunked and resumable
    cmr_grid         build and compare CMR grids
    figure_files     a figure of your own for primacy reproduce
    hf_models        Hugging Face causal language models loaded
    humans           models beside people: runs and a dataset through the same analyses
    launchers        the runs of a sweep started here (or as SLURM tasks) and their state
    pages            which config draws each panel, and how runs become a figure
    people           human free-recall data from psifr or a file
    probes           probe attention of verification runs, measured and written
    published        the authors' published per-head files read without their pickles
    published_heads  those files as primacy's own analyses
    reproduce        a figure's runs planned, and the figure drawn from them
    runs             a sweep's runs: a config at a seed, where it stands, scales and configs
    selection        Delta by token for the figure pages
    slurm            the array job's options, checks, submission and state on SLURM
    sources          where analyze reads a model from: a checkpoint or a pretrained model
    tables           the tables reproduce writes: mean +- SE, rounded once
    texts            natural text and token lists for analyze icl|ablation
"""
