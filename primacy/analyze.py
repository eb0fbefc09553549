"""``primacy analyze icl|ablation|probes``: post-hoc analyses of a trained run's attention heads (Ji-An et al. 2024;
Morita 2025 for the verification probes)."""

from __future__ import annotations

import argparse
import csv
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import torch

from primacy import files, icl_plots
from primacy.analysis.ablation import ablation_study, icl_scores, repeated_tokens
from primacy.analysis.cmr_grid import CMRGrid
from primacy.analysis.emergence import as_float, emergence_row, emergence_step
from primacy.analysis.fits import ALIGNMENTS
from primacy.analysis.heads import repeated_prompt
from primacy.analysis.icl import HeadAnalysis, analyze_heads, check_prompt_items, summary
from primacy.analysis.probes import MEASURES, PROBES, ProbeStats, capture_bytes, head_summary, measure_probes
from primacy.backbones.transformer import TransformerBackbone
from primacy.checks import figure_formats, fits_in_memory, positive, writable_directory
from primacy.errors import ArgumentParser, UsageError
from primacy.pretrained import DEVICES, DTYPES, transformers_module
from primacy.runs import load_run, require_backbone, require_task
from primacy.sources import Checkpoint, pretrained_checkpoints, trained_checkpoints
from primacy.tasks.verification import VerificationTask

ICL_FILES = ("heads.csv", "summary.json", "lag_crps.npz")
PROBE_FILES = ("probes.csv", "probes.npz", "summary.json")


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


def _save(fig: plt.Figure, out: Path, name: str, formats: list[str]) -> None:
    try:
        for fmt in formats:
            files.save_figure(fig, out / f"{name}.{fmt}", dpi=150)
    finally:
        plt.close(fig)


@dataclass(frozen=True)
class ICLSettings:
    """How ``analyze icl`` scores a model: its prompts, the CMR fit and what it draws."""

    n_items: int | None  # n, the length of r; None: the task's prompt_items, else 25
    prompts: int
    seed: int
    grid: CMRGrid
    alignment: str
    top: int  # heads in the lag-CRP figure and in the emergence table's averages
    formats: tuple[str, ...]
    layers: tuple[int, ...] | None = None  # the layers analysed; None: all
    batch_size: int = 64  # prompts per forward pass

    def matches(self, summary: dict) -> bool:
        """Whether an earlier summary.json was written with these settings."""
        same_n = self.n_items is None or summary.get("n_items") == self.n_items
        same_layers = self.layers is None or summary.get("layers") == list(self.layers)
        return same_n and same_layers and all(summary.get(key) == value for key, value in self.recorded().items())

    def recorded(self) -> dict:
        return {"n_prompts": self.prompts, "prompt_seed": self.seed, "cmr_variant": self.grid.variant,
                "cmr_alignment": self.alignment, "top": self.top}


def write_icl(analysis: HeadAnalysis, settings: ICLSettings, out: Path, extra: dict | None = None) -> dict:
    """heads.csv, summary.json (with ``extra``), lag_crps.npz and the figures of one analysis."""
    out.mkdir(parents=True, exist_ok=True)
    rows = [h.row() for h in analysis.heads]
    with files.atomic_path(out / "heads.csv") as temp, temp.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    top, grid = min(settings.top, len(analysis.heads)), settings.grid
    content = {**(extra or {}), **summary(analysis, top), **settings.recorded()}
    files.write_text(out / "summary.json", json.dumps(_finite(content), indent=2) + "\n")
    files.save_npz(out / "lag_crps.npz", lags=analysis.lags, lag_crps=analysis.lag_crps, cmr_fits=analysis.cmr_fits,
                   gaussian_fits=analysis.gaussian_fits)
    ranked = analysis.by_induction()
    formats = list(settings.formats)
    _save(icl_plots.attention_pattern(analysis, ranked[0]), out, "attention_pattern", formats)
    _save(icl_plots.lag_crp_fits(analysis, ranked[:top], grid.variant), out, "lag_crp_fits", formats)
    _save(icl_plots.distance_vs_induction(analysis.heads), out, "cmr_distance_vs_induction", formats)
    _save(icl_plots.cmr_like_share(content["cmr_like_share_by_layer"], content["layers"]), out, "cmr_like_share", formats)
    best = ranked[0]
    base = (0.5, 0.5, 0.3) if np.isnan(best.cmr_distance) else (best.beta_enc, best.beta_rec, best.gamma_ft)
    _save(icl_plots.cmr_families(grid.params, grid.crps, grid.lags, base, grid.variant), out, "cmr_families", formats)
    return content


def _finite(value):
    """JSON has no NaN: undefined numbers (a flat head's fit) become null."""
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return None if isinstance(value, float) and np.isnan(value) else value


def _prompt_items(default: int | None, n_items: int | None) -> int:
    """n, the length of r: as asked, else the task's ``prompt_items``, else 25."""
    n = (default or 25) if n_items is None else n_items
    positive(n_items=n)
    return n


def analyze_checkpoint(source: Checkpoint, out: Path, settings: ICLSettings) -> dict:
    """``analyze icl`` of one checkpoint into ``out``; returns its summary.json content, which also says where the
    model came from, its training step and its ICL score on the same prompts (NaN for a model without next-token
    predictions)."""
    model, default_items = source.load()
    n = _prompt_items(default_items, settings.n_items)
    generator = torch.Generator().manual_seed(settings.seed)
    prompts = repeated_prompt(n, model.vocab_size, model.bos, settings.prompts, generator, model.allowed)  # P 2n(+1)
    analysis = analyze_heads(model, prompts, n, settings.grid, settings.alignment, settings.layers,
                             settings.batch_size)
    start = analysis.start
    icl = float("nan")
    if model.predicts_tokens:
        icl = float(icl_scores(model, prompts, start + n - 1, start + 2 * n - 1, settings.batch_size).mean())
    return write_icl(analysis, settings, out, {**source.describe(model), "icl_score": icl})


def read_heads(path: Path) -> list[dict]:
    with path.open() as f:
        return list(csv.DictReader(f))


def analyze_checkpoints(sources: list[Checkpoint], out: Path, settings: ICLSettings, reuse: bool = False,
                        report: Callable[[str], None] = print) -> list[dict]:
    """``analyze icl`` of checkpoints of one model in step order (``trained_checkpoints``, ``pretrained_checkpoints``),
    each into ``out/step<N>``, then ``emergence.csv`` and the emergence figure in ``out``; returns the emergence rows.
    With ``reuse``, a checkpoint already analysed with the same settings (its summary.json newer than the checkpoint)
    is read back, not analysed again."""
    rows = []
    for source in sources:
        target = out / f"step{source.step}"
        summary_file = target / "summary.json"
        done = reuse and summary_file.is_file() and not source.written_after(summary_file)
        content = json.loads(summary_file.read_text()) if done else None
        if content is None or not settings.matches(content):
            content = analyze_checkpoint(source, target, settings)
        row = emergence_row(source.step, read_heads(target / "heads.csv"), settings.top,
                            as_float(content["icl_score"]))
        report(f"  step {source.step}: best head {row['best_head']} induction {row['best_induction']:.3f}, "
               f"top-{row['top']} CMR distance {row['top_cmr_distance']:.3f}, ICL score {row['icl_score']:+.3f}")
        rows.append(row)
    write_emergence(rows, out, settings.formats)
    return rows


def write_emergence(rows: list[dict], out: Path, formats: tuple[str, ...] | list[str], seeds: dict | None = None,
                    title: str = "") -> None:
    """emergence.csv (``rows``) and the emergence figure; ``seeds`` maps names to per-seed rows drawn beneath."""
    out.mkdir(parents=True, exist_ok=True)
    files.write_csv(out / "emergence.csv", _finite(rows))
    _save(icl_plots.emergence(rows, seeds or {}, title), out, "emergence", list(formats))


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
    group.add_argument("--dtype", choices=list(DTYPES), default=None, help="weights of --hf_model (default float32)")
    group.add_argument("--device", choices=DEVICES, default=None, help="where --hf_model runs (default cpu)")


def _listed(value: str | list[str] | None) -> list[str] | None:
    return [value] if isinstance(value, str) else value


def _sources(options: argparse.Namespace, command: str) -> list[Checkpoint]:
    """The checkpoints the options name, checked before any model is loaded."""
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
        require_backbone(options.config, TransformerBackbone, command)  # only attention heads can be analysed
        return trained_checkpoints(options.config, _listed(options.ckpt_path))
    transformers_module()  # a one-line message now, not after the other checks, when it is missing
    return pretrained_checkpoints(_listed(options.hf_model), _listed(options.revision), options.dtype or "float32",
                                  options.device or "cpu")


def icl_command(args: list[str]) -> None:
    """Score every attention head on [BOS] r r prompts, fit CMR and a Gaussian to its lag-CRP, write tables
    and figures (docs/icl.md says what each one is); given several checkpoints, also how they change over training."""
    parser = ArgumentParser(prog="primacy analyze icl", description=icl_command.__doc__)
    _source_arguments(parser, several=True)
    _common_arguments(parser)
    parser.add_argument("--n_items", type=int, default=None,
                        help="n, the length of r (default: the task's prompt_items, else 25)")
    parser.add_argument("--prompts", type=int, default=64, help="number of random prompts averaged")
    parser.add_argument("--batch_size", type=int, default=16, help="prompts per forward pass")
    parser.add_argument("--layers", type=int, nargs="+", default=None,
                        help="analyse only these layers (0-based; default: all)")
    parser.add_argument("--grid", default=None, help="a CMR grid file (default: the paper grid shipped with primacy)")
    parser.add_argument("--alignment", choices=ALIGNMENTS, default="peak",
                        help="CMR CRP onto the lag-CRP: peak (the paper: minima subtracted, maxima matched) or "
                             "affine (least-squares offset and scale)")
    parser.add_argument("--top", type=int, default=4,
                        help="heads shown in the lag-CRP figure, and averaged (best by induction) over training")
    parser.add_argument("--formats", nargs="+", default=["png", "pdf"], help="figure formats")
    options = parser.parse_args(args)
    positive(prompts=options.prompts, top=options.top, batch_size=options.batch_size)
    if options.n_items is not None:
        check_prompt_items(options.n_items)
    sources = _sources(options, "analyze icl")  # every file checked before any work
    several = len(sources) > 1
    out = _check_outputs(options.out, ("emergence.csv",) if several else ICL_FILES, options.overwrite, options.formats)
    for source in sources if several else ():
        _check_outputs(str(out / f"step{source.step}"), ICL_FILES, options.overwrite, options.formats)
    grid = CMRGrid.paper() if options.grid is None else CMRGrid.load(options.grid)
    settings = ICLSettings(options.n_items, options.prompts, options.seed, grid, options.alignment, options.top,
                           tuple(options.formats), None if options.layers is None else tuple(options.layers),
                           options.batch_size)
    if several:
        rows = analyze_checkpoints(sources, out, settings)
        first = emergence_step(rows)
        print(f"{len(rows)} checkpoints -> {out}: "
              + ("no checkpoint has a head with induction score >= 0.5" if first is None else
                 f"a head with induction score >= 0.5 from step {first}"))
        return
    content = analyze_checkpoint(sources[0], out, settings)
    best = content["top_induction_heads"][0]
    print(f"{content['n_layers'] * content['n_heads']} heads -> {out}: top induction head L{best['layer']}H{best['head']} "
          f"score {best['induction']:.3f}, lag-CRP peak {best['lag_crp_peak']:+d}, "
          f"CMR distance {best['cmr_distance']:.3f}")


def ranked_heads(path: str | Path, key: str) -> list[tuple[int, int]]:
    """(layer, head) pairs of an ``analyze icl`` heads.csv, best first: lowest ``cmr_distance`` (flat heads last)
    or highest ``induction`` score."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"heads={path} does not exist: run `primacy analyze icl` first and give its heads.csv")
    with path.open() as f:
        rows = list(csv.DictReader(f))
    if not rows or not {"layer", "head", key} <= set(rows[0]):
        raise UsageError(f"heads={path} is not an `analyze icl` heads.csv: it needs layer, head and {key} columns")

    def order(row: dict) -> tuple[bool, float]:
        value = float(row[key]) if row[key] else float("nan")
        return np.isnan(value), (value if key == "cmr_distance" else -value)

    return [(int(r["layer"]), int(r["head"])) for r in sorted(rows, key=order)]


@dataclass(frozen=True)
class AblationSettings:
    """How ``analyze ablation`` tests a model: which heads, how many random draws, on which sequences."""

    rank_by: str = "cmr_distance"
    fraction: float = 0.1
    random: int = 20
    sequences: int = 256
    n_items: int | None = None  # None: the task's prompt_items, else 25
    repeats: int = 2
    seed: int = 0
    formats: tuple[str, ...] = ("png", "pdf")
    batch_size: int = 64  # sequences per forward pass


def ablate_checkpoint(source: Checkpoint, ranked: list[tuple[int, int]], out: Path, settings: AblationSettings) -> dict:
    """``analyze ablation`` of one checkpoint with heads ``ranked`` best first: ablation.json and its figure in
    ``out``; returns the result."""
    model, default_items = source.load()
    n = _prompt_items(default_items, settings.n_items)
    tokens = repeated_tokens(n, settings.repeats, model.vocab_size, model.bos, settings.sequences,
                             torch.Generator().manual_seed(settings.seed), model.allowed)
    result = ablation_study(model, tokens, ranked, settings.fraction, settings.random, settings.seed,
                            batch_size=settings.batch_size)
    result = {**source.describe(model), "rank_by": settings.rank_by, "n_items": n, "repeats": settings.repeats,
              **result}
    out.mkdir(parents=True, exist_ok=True)
    files.write_text(out / "ablation.json", json.dumps(_finite(result), indent=2) + "\n")
    figure = icl_plots.ablation_scores(result["summary"], result["k"], settings.rank_by)
    _save(figure, out, "ablation", list(settings.formats))
    return result


def ablation_command(args: list[str]) -> None:
    """ICL score of the intact model, with the most CMR-like heads ablated, and with as many random heads ablated,
    on [BOS] r r ... r sequences, with paired statistics (Ji-An et al. 2024)."""
    parser = ArgumentParser(prog="primacy analyze ablation", description=ablation_command.__doc__)
    _source_arguments(parser, several=False)
    _common_arguments(parser)
    parser.add_argument("--heads", required=True, help="heads.csv written by `primacy analyze icl`")
    parser.add_argument("--rank_by", choices=("cmr_distance", "induction"), default="cmr_distance",
                        help="which heads count as top: lowest CMR distance (the paper) or highest induction score")
    parser.add_argument("--fraction", type=float, default=0.1, help="share of heads ablated (at least one)")
    parser.add_argument("--random", type=int, default=20,
                        help="random draws of as many heads, from the heads in --heads")
    parser.add_argument("--sequences", type=int, default=256, help="evaluation sequences")
    parser.add_argument("--batch_size", type=int, default=16, help="sequences per forward pass")
    parser.add_argument("--n_items", type=int, default=None, help="length of r (default: the task's prompt_items)")
    parser.add_argument("--repeats", type=int, default=2, help="copies of r in each sequence")
    parser.add_argument("--formats", nargs="+", default=["png", "pdf"], help="figure formats")
    options = parser.parse_args(args)
    positive(sequences=options.sequences, random=options.random, batch_size=options.batch_size)
    out = _check_outputs(options.out, ("ablation.json",), options.overwrite, options.formats)
    ranked = ranked_heads(options.heads, options.rank_by)
    source, = _sources(options, "analyze ablation")
    settings = AblationSettings(options.rank_by, options.fraction, options.random, options.sequences,
                                options.n_items, options.repeats, options.seed, tuple(options.formats),
                                options.batch_size)
    result = ablate_checkpoint(source, ranked, out, settings)
    s, c = result["summary"], result["comparisons"]
    print(f"ICL score (loss at token {result['late']} - token {result['early']}): intact {s['intact']['mean']:+.3f}, "
          f"top-{result['k']} ablated {s['top']['mean']:+.3f} (p = {c['top_minus_intact']['p_value']:.3g}), "
          f"random ablated {s['random']['mean']:+.3f}; top vs random p = {c['top_minus_random']['p_value']:.3g}")


def write_probes(stats: ProbeStats, settings: dict, out: Path, formats: list[str]) -> dict:
    """probes.csv, probes.npz, summary.json and the probes figure of one probe analysis."""
    out.mkdir(parents=True, exist_ok=True)
    means, trials = stats.means(), stats.trials
    layers, heads, _, n_items = trials.shape
    with files.atomic_path(out / "probes.csv") as temp, temp.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["layer", "head", "probe", "query_position", *MEASURES, "n"])
        for (layer, head, k, j), n in np.ndenumerate(trials):
            writer.writerow([layer, head, PROBES[k], j, *(float(means[m][layer, head, k, j]) for m in MEASURES), int(n)])
    files.save_npz(out / "probes.npz", probes=np.array(PROBES), **means,
                   **{f"n_{m}": stats.counts[m] for m in MEASURES})
    content = {**settings, "n_layers": layers, "n_heads": heads, "n_items": n_items,
               **{f"{probe}_probes": int(trials[0, 0, k].sum()) for k, probe in enumerate(PROBES)},
               "heads": head_summary(means)}
    files.write_text(out / "summary.json", json.dumps(_finite(content), indent=2) + "\n")
    _save(icl_plots.probe_attention(means), out, "probes", formats)
    return content


def probes_command(args: list[str]) -> None:
    """Attention of each verification query on the study items, old probes against new ones, per layer and head, on
    the run's test trials (Morita 2025, appendix: why the Transformer is at ceiling)."""
    parser = ArgumentParser(prog="primacy analyze probes", description=probes_command.__doc__)
    _run_arguments(parser, seed=False)
    parser.add_argument("--sets", type=int, default=64,
                        help="test sets analysed, the run's first ones (each gives 2L trials)")
    parser.add_argument("--batch_size", type=int, default=32, help="trials per forward pass")
    parser.add_argument("--formats", nargs="+", default=["png", "pdf"], help="figure formats")
    options = parser.parse_args(args)
    positive(sets=options.sets, batch_size=options.batch_size)
    out = _check_outputs(options.out, PROBE_FILES, options.overwrite, options.formats)
    require_backbone(options.config, TransformerBackbone, "analyze probes")  # it reads attention weights
    require_task(options.config, VerificationTask, "analyze probes")  # it needs study items and old/new queries
    model, task = load_run(options.config, options.ckpt_path)
    if options.sets > task.num_test_sets:
        raise UsageError(f"sets={options.sets} is invalid: the run has num_test_sets={task.num_test_sets}, "
                         f"give at most {task.num_test_sets}")
    fits_in_memory("the captured attention of one batch", capture_bytes(model, options.batch_size, task.n_items),
                   batch_size=options.batch_size, n_items=task.n_items)
    stats = measure_probes(model, task.test_design(), options.sets, options.batch_size)
    settings = {"n_sets": options.sets, "condition": task.condition, "vocab_size": task.vocab_size}
    content = write_probes(stats, settings, out, options.formats)
    gap = max(content["heads"], key=lambda h: abs(h["old_minus_new"]["max_weight"] or 0.0))
    print(f"{len(content['heads'])} heads, {options.sets} sets -> {out}: largest old-new gap in max weight "
          f"L{gap['layer']}H{gap['head']}: old {gap['old']['max_weight']:.3f}, new {gap['new']['max_weight']:.3f}, "
          f"weight on the probed item {gap['old']['match_weight']:.3f}")


SUBCOMMANDS = {"icl": icl_command, "ablation": ablation_command, "probes": probes_command}


def analyze_command(args: list[str]) -> None:
    """``primacy analyze icl|ablation|probes ...``; ``--help`` after any of them says more."""
    if args[:1] in (["-h"], ["--help"]):
        print(f"usage: primacy analyze {{{','.join(SUBCOMMANDS)}}} [--help] ...\n")
        for name, command in SUBCOMMANDS.items():
            print(f"  {name:<9} {' '.join(command.__doc__.split())}")
        return
    if not args or args[0] not in SUBCOMMANDS:
        given = args[0] if args else "nothing"
        raise UsageError(f"analyze {given} is unknown: choose one of {', '.join(SUBCOMMANDS)}")
    SUBCOMMANDS[args[0]](args[1:])
