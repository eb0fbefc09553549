"""``primacy analyze icl|ablation|probes|published``: post-hoc analyses of a trained run's attention heads (Ji-An et al.
2024; Morita 2025 for the verification probes), and the per-head results Ji-An et al. published, read the same way."""

from __future__ import annotations

import argparse
from pathlib import Path

from primacy.analysis.behaviour.cmr.fits import ALIGNMENTS
from primacy.analysis.behaviour.cmr.grid import CMRGrid
from primacy.analysis.heads.analysis import check_prompt_items
from primacy.analysis.heads.emergence import HEAD_CHOICES, emergence_step
from primacy.analysis.heads.scores import QUERY_WINDOWS
from primacy.checks import figure_formats, positive, writable_directory
from primacy.errors import ArgumentParser, UsageError
from primacy.rundir.layout import AblationDir, HeadsDir, ProbesDir
from primacy.rundir.runs import require_influence, require_task
from primacy.tasks.verification import VerificationTask
from primacy.workflows.induction.analyses import (
    AblationSettings,
    ICLSettings,
    ablate_checkpoint,
    analyze_checkpoint,
    analyze_checkpoints,
    ranked_heads,
    read_analysis,
)
from primacy.workflows.induction.hf_models import DEVICES, DTYPES, transformers_module
from primacy.workflows.induction.probes import ProbeRun, analyze_probes
from primacy.workflows.induction.published_heads import (
    read_ablation,
    read_scores,
    read_series,
    write_ablation,
    write_beside,
    write_scores,
    write_series,
)
from primacy.workflows.induction.sources import Checkpoint, pretrained_checkpoints, trained_checkpoints
from primacy.workflows.induction.texts import ICL_SCORES, TextSettings, check_text_options

FORMATS_HELP = "figure formats; --formats with none writes the tables alone"


def _run_arguments(parser: argparse.ArgumentParser, seed: bool = True) -> None:
    parser.add_argument("--config", required=True, help="the run's config.yaml")
    parser.add_argument("--ckpt_path", required=True, help="the checkpoint, e.g. <run>/checkpoints/last.ckpt")
    _common_arguments(parser, seed)


def _common_arguments(parser: argparse.ArgumentParser, seed: bool = True) -> None:
    parser.add_argument("--out", required=True, help="directory for the tables and figures")
    parser.add_argument("--overwrite", action="store_true", help="replace results already in --out")
    if seed:  # the analyses that draw their own prompts
        parser.add_argument("--seed", type=int, default=0, help="seed of the random prompts")


def _check_outputs(out: str, files: tuple[str, ...], overwrite: bool, formats: list[str]) -> Path:
    """The output directory (made when results are written), refusing to replace earlier results unless asked
    to, and figure formats matplotlib can write; checked before any work is done."""
    path = writable_directory("out", out)
    existing = [f for f in files if (path / f).exists()]
    if existing and not overwrite:
        raise UsageError(f"out={path} already holds {existing[0]}: choose another directory or pass --overwrite")
    figure_formats(formats)
    return path


def _source_arguments(parser: argparse.ArgumentParser, several: bool) -> None:
    """--config/--ckpt_path (a run trained here) or --hf_model (a pretrained model), with several checkpoints of one
    model when ``several``."""
    nargs = "+" if several else None
    group = parser.add_argument_group("the model: a run trained here (--config, --ckpt_path) or a pretrained Hugging "
                                      "Face causal LM (--hf_model)")
    group.add_argument("--config", help="the run's config.yaml")
    group.add_argument("--ckpt_path", nargs=nargs,
                       help="the checkpoint, e.g. <run>/checkpoints/last.ckpt" + (
                           "; or several of one run (e.g. <run>/checkpoints/*.ckpt): each is analysed into "
                           "OUT/step<N>, then OUT/emergence.csv" if several else ""))
    group.add_argument("--hf_model", nargs=nargs,
                       help="a hub id (gpt2, EleutherAI/pythia-160m) or a directory saved with save_pretrained" + (
                           "; several directories of one model's checkpoints give a series like several "
                           "--revision" if several else ""))
    group.add_argument("--revision", nargs=nargs,
                       help="the hub revision (a branch, tag or commit)" + (
                           "; several revisions of one model (e.g. step1000 step2000 for Pythia) are a series of "
                           "checkpoints, each step read from its name" if several else ""))
    group.add_argument("--group", type=int, default=1,
                       help="a model without attention (a run's S4/S4D channels, Mamba inner channels or mLSTM heads; "
                            "a Hugging Face Mamba's inner channels): this many consecutive units make one head "
                            "(default 1: each unit is a head)")
    group.add_argument("--dtype", choices=list(DTYPES), default=None, help="weights of --hf_model (default float32)")
    group.add_argument("--device", choices=DEVICES, default=None, help="where --hf_model runs (default cpu)")


def _text_arguments(parser: argparse.ArgumentParser) -> None:
    """--prompt_vocabulary, --icl_score and --texts: the paper's prompts and ICL score for pretrained models."""
    group = parser.add_argument_group("the paper's prompts and ICL score (docs/icl.md); frequent, paper and --texts "
                                      "need --hf_model")
    group.add_argument("--prompt_vocabulary", default="all",
                       help="the tokens r is drawn from: all (default); frequent (the n_items most frequent tokens "
                            "of --texts, so each prompt orders the same n tokens); unembedding_bias (the paper's: the "
                            "n_items words with a leading space of largest unembedding bias, for models whose final "
                            "norm or output layer has a bias, e.g. GPT-2 and Pythia); or a file of token ids")
    group.add_argument("--icl_score", choices=ICL_SCORES, default="repeats",
                       help="repeats: loss at the last token of the second repeat minus the first's, on the prompts; "
                            "paper: loss at token 500 minus token 50 of 512-token windows of --texts (Olsson et al.)")
    group.add_argument("--texts", default=None,
                       help="natural text: JSON lines with a 'text' field (C4's files, .gz too) or one document per "
                            "line")


def _text_settings(options: argparse.Namespace, unused_by_paper: tuple[str, ...] = ()) -> TextSettings:
    """The text settings, checked; ``unused_by_paper`` names the options --icl_score paper makes meaningless."""
    check_text_options(options.prompt_vocabulary, options.icl_score, options.texts, options.hf_model is not None)
    if options.icl_score == "paper":
        for name in unused_by_paper:
            value = getattr(options, name)
            if value is not None and value != "all":
                raise UsageError(f"{name}={value} is unused with --icl_score paper: its sequences are text windows")
    return TextSettings(options.prompt_vocabulary, options.icl_score, options.texts, options.sequences)


def _listed(value: str | list[str] | None) -> list[str] | None:
    return [value] if isinstance(value, str) else value


def _sources(options: argparse.Namespace, command: str) -> list[Checkpoint]:
    """The checkpoints the options name, checked before any model is loaded."""
    positive(group=options.group)
    run = options.config is not None or options.ckpt_path is not None
    if options.hf_model is not None and run:
        raise UsageError("hf_model and config/ckpt_path are two sources: give --hf_model, or --config with "
                         "--ckpt_path, not both")
    if options.hf_model is None:
        if options.config is None or options.ckpt_path is None:
            raise UsageError(f"{command} needs a model: --config with --ckpt_path (a run trained here) or --hf_model "
                             f"(a pretrained model)")
        for name in ("revision", "dtype", "device"):
            if getattr(options, name) is not None:
                raise UsageError(f"{name}={getattr(options, name)} only applies to --hf_model: a run's checkpoint "
                                 f"loads as it was trained")
        require_influence(options.config, command)  # attention, or units with an exact influence
        return trained_checkpoints(options.config, _listed(options.ckpt_path), options.group)
    transformers_module()  # a one-line message now, not after the other checks, when it is missing
    return pretrained_checkpoints(_listed(options.hf_model), _listed(options.revision), options.dtype or "float32",
                                  options.device or "cpu", options.group)


def icl_command(args: list[str]) -> None:
    """Score every attention head on [BOS] r r prompts, fit CMR and a Gaussian to its lag-CRP, write tables
    and figures (docs/icl.md says what each one is); given several checkpoints, also how they change over training."""
    parser = ArgumentParser(prog="primacy analyze icl", description=icl_command.__doc__)
    _source_arguments(parser, several=True)
    _common_arguments(parser)
    parser.add_argument("--n_items", type=int, default=None,
                        help="n, the length of r (default: the task's prompt_items, else 25; 100 for --hf_model, "
                             "the paper's)")
    parser.add_argument("--prompts", type=int, default=64, help="number of random prompts averaged")
    parser.add_argument("--sequences", type=int, default=None,
                        help="--icl_score paper: at most this many text windows, the first ones (default 256)")
    parser.add_argument("--batch_size", type=int, default=16, help="prompts per forward pass")
    parser.add_argument("--layers", type=int, nargs="+", default=None,
                        help="analyse only these layers (0-based; default: all)")
    parser.add_argument("--grid", default=None, help="a CMR grid file (default: the paper grid shipped with primacy)")
    parser.add_argument("--alignment", choices=ALIGNMENTS, default="peak",
                        help="CMR CRP onto the lag-CRP: peak (the paper: minima subtracted, maxima matched) or "
                             "affine (least-squares offset and scale)")
    parser.add_argument("--top", type=int, default=4,
                        help="heads shown in the lag-CRP figure, and averaged (best by induction) over training")
    parser.add_argument("--query_window", choices=QUERY_WINDOWS, default="paper",
                        help="the queries each lag of the attention lag-CRP averages: paper (per lag k, first "
                             "occurrences in (|k|, n - |k|], keys in the first repeat; needs n >= 11) or common (one "
                             "set for every lag)")
    parser.add_argument("--top_heads_from", choices=HEAD_CHOICES, default=None,
                        help="several checkpoints: average the top heads of the final checkpoint at every step "
                             "(default final, the authors' code) or re-rank at each checkpoint")
    parser.add_argument("--formats", nargs="*", default=["png", "pdf"], help=FORMATS_HELP)
    _text_arguments(parser)
    options = parser.parse_args(args)
    positive(prompts=options.prompts, top=options.top, batch_size=options.batch_size)
    if options.sequences is not None and options.icl_score != "paper":
        raise UsageError(f"sequences={options.sequences} is unused: it counts the text windows of --icl_score paper")
    options.sequences = 256 if options.sequences is None else options.sequences
    positive(sequences=options.sequences)
    if options.n_items is not None:
        check_prompt_items(options.n_items, options.query_window)
    text = _text_settings(options)
    sources = _sources(options, "analyze icl")  # every file checked before any work
    several = len(sources) > 1
    if options.top_heads_from is not None and not several:
        raise UsageError(f"top_heads_from={options.top_heads_from} is unused with one checkpoint: it chooses which "
                         "heads to follow over training, so it needs several (--ckpt_path A B ..., --hf_model A B ... "
                         "or --revision A B ...)")
    out = _check_outputs(options.out, HeadsDir.SERIES_FILES if several else HeadsDir.FILES, options.overwrite,
                         options.formats)
    for source in sources if several else ():
        _check_outputs(str(HeadsDir(out).step(source.step).path), HeadsDir.FILES, options.overwrite, options.formats)
    grid = CMRGrid.paper() if options.grid is None else CMRGrid.load(options.grid)
    settings = ICLSettings(options.n_items, options.prompts, options.seed, grid, options.alignment, options.top,
                           tuple(options.formats), None if options.layers is None else tuple(options.layers),
                           options.batch_size, options.top_heads_from or "final", options.query_window, text)
    if several:
        rows = analyze_checkpoints(sources, out, settings)
        first = emergence_step(rows)
        print(f"{len(rows)} checkpoints -> {out}: "
              + ("no checkpoint has a head with induction score >= 0.5" if first is None else
                 f"a head with induction score >= 0.5 from step {first}"))
        return
    content = analyze_checkpoint(sources[0], out, settings)
    best = content["top_induction_heads"][0]
    print(f"{content['n_layers'] * content['n_heads']} heads -> {out}: "
          f"top induction head L{best['layer']}H{best['head']} score {best['induction']:.3f}, "
          f"lag-CRP peak {best['lag_crp_peak']:+d}, "
          f"CMR distance {best['cmr_distance']:.3f}")


def ablation_command(args: list[str]) -> None:
    """ICL score of the intact model, with the most CMR-like heads ablated, and with as many random heads ablated,
    on [BOS] r r ... r sequences, with paired statistics (Ji-An et al. 2024)."""
    parser = ArgumentParser(prog="primacy analyze ablation", description=ablation_command.__doc__)
    _source_arguments(parser, several=False)
    _common_arguments(parser)
    parser.add_argument("--heads", required=True, help="heads.csv written by `primacy analyze icl`")
    parser.add_argument("--rank_by", choices=("cmr_distance", "induction"), default="cmr_distance",
                        help="which heads count as top: lowest CMR distance (the paper) or highest induction score")
    parser.add_argument("--fraction", type=float, default=0.1,
                        help="share of heads ablated, rounded down as the authors' (14 of 144), at least one")
    parser.add_argument("--random", type=int, default=20,
                        help="random draws of as many heads, from the heads in --heads")
    parser.add_argument("--sequences", type=int, default=256,
                        help="evaluation sequences (with --icl_score paper: at most this many text windows)")
    parser.add_argument("--batch_size", type=int, default=16, help="sequences per forward pass")
    parser.add_argument("--n_items", type=int, default=None,
                        help="length of r (default: the task's prompt_items, else 25; 100 for --hf_model)")
    parser.add_argument("--repeats", type=int, default=None, help="copies of r in each sequence (default 2)")
    parser.add_argument("--formats", nargs="*", default=["png", "pdf"], help=FORMATS_HELP)
    _text_arguments(parser)
    options = parser.parse_args(args)
    positive(sequences=options.sequences, random=options.random, batch_size=options.batch_size)
    text = _text_settings(options, ("n_items", "repeats", "prompt_vocabulary"))
    out = _check_outputs(options.out, AblationDir.FILES, options.overwrite, options.formats)
    ranked = ranked_heads(options.heads, options.rank_by)
    source, = _sources(options, "analyze ablation")
    settings = AblationSettings(options.rank_by, options.fraction, options.random, options.sequences,
                                options.n_items, options.repeats or 2, options.seed, tuple(options.formats),
                                options.batch_size, text)
    result = ablate_checkpoint(source, ranked, out, settings, named=f"heads={options.heads}")
    s, c, d = result["summary"], result["comparisons"], result["random_draws"]
    print(f"ICL score (loss at token {result['late']} - token {result['early']}): intact {s['intact']['mean']:+.3f}, "
          f"top-{result['k']} ablated {s['top']['mean']:+.3f} (p = {c['top_minus_intact']['p_value']:.3g}), "
          f"random ablated {d['mean']:+.3f} +- {d['se']:.3f} over {d['n']} draws (first draw alone "
          f"{s['random_single']['mean']:+.3f}); top vs random p = {c['top_minus_random']['p_value']:.3g}")


def probes_command(args: list[str]) -> None:
    """Attention of each verification query on the study items, old probes against new ones, per layer and head, on
    the run's test trials (Morita 2025, appendix: why the Transformer is at ceiling)."""
    parser = ArgumentParser(prog="primacy analyze probes", description=probes_command.__doc__)
    _run_arguments(parser, seed=False)
    parser.add_argument("--sets", type=int, default=64,
                        help="test sets analysed, the run's first ones (each gives 2L trials)")
    parser.add_argument("--batch_size", type=int, default=32, help="trials per forward pass")
    parser.add_argument("--formats", nargs="*", default=["png", "pdf"], help=FORMATS_HELP)
    options = parser.parse_args(args)
    positive(sets=options.sets, batch_size=options.batch_size)
    out = _check_outputs(options.out, ProbesDir.FILES, options.overwrite, options.formats)
    require_influence(options.config, "analyze probes")  # it reads attention, or an exact influence
    require_task(options.config, VerificationTask, "analyze probes")  # it needs study items and old/new queries
    run = ProbeRun(Path(options.config), Path(options.ckpt_path), Path(options.config).parent.name)
    content = analyze_probes([run], out, options.sets, options.batch_size, options.formats)
    gap = max(content["heads"], key=lambda h: abs(h["old_minus_new"]["max_weight"] or 0.0))
    print(f"{len(content['heads'])} heads, {options.sets} sets -> {out}: largest old-new gap in max weight "
          f"L{gap['layer']}H{gap['head']}: old {gap['old']['max_weight']:.3f}, new {gap['new']['max_weight']:.3f}, "
          f"weight on the probed item {gap['old']['match_weight']:.3f}")


def published_command(args: list[str]) -> None:
    """Ji-An et al.'s published per-head results (corxyz/icl-cmr saved_scores, saved_ablation) as analyze icl's and
    analyze ablation's files: CMR and a Gaussian fitted here to their lag-CRPs; several checkpoints give
    emergence.csv."""
    parser = ArgumentParser(prog="primacy analyze published", description=published_command.__doc__)
    _common_arguments(parser, seed=False)
    parser.add_argument("--scores", nargs="+", default=None,
                        help="a saved_scores .pkl file (one model), or several checkpoints of one model (names ending "
                             "in _cp<N>.pkl): each into OUT/step<N>, then OUT/emergence.csv")
    parser.add_argument("--ablation", default=None, help="a saved_ablation .pkl file: OUT/ablation.json (Fig. 8)")
    parser.add_argument("--grid", default=None, help="a CMR grid file (default: the paper grid shipped with primacy)")
    parser.add_argument("--alignment", choices=ALIGNMENTS, default="peak",
                        help="CMR CRP onto the lag-CRP: peak (the paper) or affine (least squares)")
    parser.add_argument("--top", type=int, default=4,
                        help="heads shown in the lag-CRP figure, and averaged (best by induction) over checkpoints")
    parser.add_argument("--formats", nargs="*", default=["png", "pdf"], help=FORMATS_HELP)
    parser.add_argument("--beside", nargs="+", default=None, metavar="DIR",
                        help="analyze icl output directories of other models (trained here, say): OUT/beside.png "
                             "draws the published model's heads (its last checkpoint for a series) and theirs on one "
                             "page")
    options = parser.parse_args(args)
    positive(top=options.top)
    if options.scores is None and options.ablation is None:
        raise UsageError("analyze published needs --scores FILE [FILE ...], --ablation FILE or both")
    if options.beside and not options.scores:
        raise UsageError("beside needs --scores: it draws the published model's heads beside the others'")
    beside = [(str(d), read_analysis(d)) for d in options.beside or ()]
    several = options.scores is not None and len(options.scores) > 1
    outputs = (HeadsDir.SERIES_FILES if several else HeadsDir.FILES) if options.scores else ()
    out = _check_outputs(options.out, outputs + (AblationDir.FILES if options.ablation else ()), options.overwrite,
                         options.formats)
    series = read_series(options.scores) if several else None  # every file read and checked before any work
    for step, _ in series or ():
        _check_outputs(str(HeadsDir(out).step(step).path), HeadsDir.FILES, options.overwrite, options.formats)
    single = read_scores(options.scores[0]) if options.scores and not several else None
    ablation = read_ablation(options.ablation) if options.ablation else None
    grid = CMRGrid.paper() if options.grid is None else CMRGrid.load(options.grid)
    formats = tuple(options.formats)
    if series is not None:
        rows, last = write_series(series, out, grid, options.alignment, options.top, formats)
        published = (f"{Path(options.scores[0]).parent.name or 'published'} cp{series[-1][0]}", last)
        final = rows[-1]
        print(f"{len(rows)} checkpoints -> {out}: at checkpoint {final['step']} best head {final['best_head']} "
              f"induction {final['best_induction']:.3f}, CMR-like share {final['cmr_like_share']:.2f}")
    if single is not None:
        content, analysis = write_scores(single, out, grid, options.alignment, options.top, formats)
        published = (Path(options.scores[0]).stem, analysis)
        best = content["top_induction_heads"][0]
        print(f"{content['n_layers'] * content['n_heads']} heads -> {out}: top induction head "
              f"L{best['layer']}H{best['head']} score {best['induction']:.3f}, lag-CRP peak {best['lag_crp_peak']:+d}, "
              f"CMR distance {best['cmr_distance']:.3f} (beta_enc {best['beta_enc']:.2f}, beta_rec "
              f"{best['beta_rec']:.2f}, gamma_ft {best['gamma_ft']:.2f}); {content['cmr_like_heads']} CMR-like heads"
              + (f"; the file disagrees with itself: {'; '.join(content['published_notes'])}"
                 if content["published_notes"] else ""))
    if beside:
        written = write_beside([published, *beside], out, grid.variant, formats)
        print(f"{len(beside) + 1} models on one page -> {written[0] if written else out}")
    if ablation is not None:
        result = write_ablation(ablation, options.ablation, out, formats)
        s, c = result["summary"], result["comparisons"]
        print(f"ICL score of {result['sequences']} sequences (loss at token {result['late']} - token "
              f"{result['early']}) -> {out}: intact {s['intact']['mean']:+.3f}, top 10 % CMR-like heads ablated "
              f"{s['top']['mean']:+.3f} (p = {c['top_minus_intact']['p_value']:.3g}), one random draw "
              f"{s['random_single']['mean']:+.3f}; "
              f"top vs random p = {c['top_minus_random_single']['p_value']:.3g}")


SUBCOMMANDS = {"icl": icl_command, "ablation": ablation_command, "probes": probes_command,
               "published": published_command}


def command(args: list[str]) -> None:
    """``primacy analyze icl|ablation|probes|published ...``; ``--help`` after any of them says more."""
    if args[:1] in (["-h"], ["--help"]):
        print(f"usage: primacy analyze {{{','.join(SUBCOMMANDS)}}} [--help] ...\n")
        for name, command in SUBCOMMANDS.items():
            print(f"  {name:<9} {' '.join(command.__doc__.split())}")
        return
    if not args or args[0] not in SUBCOMMANDS:
        given = args[0] if args else "nothing"
        raise UsageError(f"analyze {given} is unknown: choose one of {', '.join(SUBCOMMANDS)}")
    SUBCOMMANDS[args[0]](args[1:])
