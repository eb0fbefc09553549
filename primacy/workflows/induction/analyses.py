"""The post-hoc analyses of ``primacy analyze`` and ``primacy reproduce`` as functions: score the heads of checkpoints
(ICL, emergence over training), ablate them, and write each analysis's tables and figures into a directory."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from dataclasses import fields as dataclass_fields
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from primacy import figures, files
from primacy.analysis.behaviour.cmr.grid import CMRGrid
from primacy.analysis.heads.ablation import ablation_study, icl_scores, repeated_tokens
from primacy.analysis.heads.analysis import HeadAnalysis, HeadResult, analyze_heads, summary
from primacy.analysis.heads.emergence import as_float, closest_heads, emergence_row, top_heads
from primacy.analysis.heads.model import HeadModel, check_length
from primacy.analysis.heads.probes import MEASURES, PROBES, ProbeStats, early_minus_late, head_summary
from primacy.checks import one_of, positive
from primacy.errors import UsageError
from primacy.rundir.layout import AblationDir, HeadsDir, ProbesDir
from primacy.tasks.prompts import repeated_prompt
from primacy.workflows.induction.sources import Checkpoint
from primacy.workflows.induction.texts import TextSettings


@dataclass(frozen=True)
class ICLSettings:
    """How ``analyze icl`` scores a model: its prompts, the CMR fit and what it draws."""

    n_items: int | None  # n, the length of r; None: the task's prompt_items (100 for a pretrained model), else 25
    prompts: int
    seed: int
    grid: CMRGrid
    alignment: str
    top: int  # heads in the lag-CRP figure and in the emergence table's averages
    formats: tuple[str, ...]
    layers: tuple[int, ...] | None = None  # the layers analysed; None: all
    batch_size: int = 64  # prompts per forward pass
    top_heads_from: str = "final"  # over training: the top heads of the final checkpoint, or of "each" one
    query_window: str = "paper"  # the queries each lag of the attention lag-CRP averages (heads.QUERY_WINDOWS)
    text: TextSettings = field(default_factory=TextSettings)  # the prompts' vocabulary and the ICL score

    def matches(self, summary: dict) -> bool:
        """Whether an earlier summary.json was written with these settings (one written before a setting existed
        counts as written with its default)."""
        same_n = self.n_items is None or summary.get("n_items") == self.n_items
        same_layers = self.layers is None or summary.get("layers") == list(self.layers)
        before = TextSettings().recorded()
        return same_n and same_layers and all(summary.get(key, before.get(key)) == value
                                              for key, value in self.recorded().items())

    def recorded(self) -> dict:
        return {"n_prompts": self.prompts, "prompt_seed": self.seed, "cmr_variant": self.grid.variant,
                "cmr_alignment": self.alignment, "top": self.top, "query_window": self.query_window,
                **self.text.recorded()}


def write_icl(analysis: HeadAnalysis, settings: ICLSettings, out: Path, extra: dict | None = None) -> dict:
    """heads.csv, summary.json (with ``extra``), lag_crps.npz and the figures of one analysis."""
    out.mkdir(parents=True, exist_ok=True)
    rows, written = [h.row() for h in analysis.heads], HeadsDir(out)
    files.write_csv(written.heads, rows)
    top, grid = min(settings.top, len(analysis.heads)), settings.grid
    content = {**(extra or {}), **summary(analysis, top), **settings.recorded()}
    files.write_json(written.summary, content)
    files.save_npz(written.lag_crps, lags=analysis.lags, lag_crps=analysis.lag_crps, cmr_fits=analysis.cmr_fits,
                   gaussian_fits=analysis.gaussian_fits)
    formats = list(settings.formats)
    if formats:
        figures.save(figures.heads.attention_pattern(analysis, analysis.by_induction()[0]), out / "attention_pattern",
                     formats)
        draw_heads(analysis, content, grid, top, out, formats)
    return content


def draw_heads(analysis: HeadAnalysis, content: dict, grid: CMRGrid, top: int, out: Path,
               formats: Sequence[str]) -> None:
    """The figures of an analysis that need no attention pattern, into ``out``: the top heads' lag-CRP fits and
    CMR distance against induction score (Fig. 5), the CMR-like share by layer (``content``, summary.json's; Fig. 6)
    and CMR's families around the best head's fit (Fig. 4)."""
    ranked = analysis.by_induction()
    figures.save(figures.heads.lag_crp_fits(analysis, ranked[:top], grid.variant), out / "lag_crp_fits", formats)
    figures.save(figures.heads.distance_vs_induction(analysis.heads), out / "cmr_distance_vs_induction", formats)
    figures.save(figures.heads.cmr_like_share(content["cmr_like_share_by_layer"], content["layers"]),
                 out / "cmr_like_share", formats)
    best = ranked[0]
    base = (0.5, 0.5, 0.3) if np.isnan(best.cmr_distance) else (best.beta_enc, best.beta_rec, best.gamma_ft)
    figures.save(figures.heads.cmr_families(grid.params, grid.crps, grid.lags, base, grid.variant),
                 out / "cmr_families", formats)


def _prompt_items(default: int | None, n_items: int | None) -> int:
    """n, the length of r: as asked, else the task's ``prompt_items``, else 25."""
    n = (default or 25) if n_items is None else n_items
    positive(n_items=n)
    return n


def _vocabulary(model: HeadModel, n: int, text: TextSettings,
                documents: list[torch.Tensor] | None) -> tuple[torch.Tensor | None, dict]:
    """The mask of the tokens prompts draw from and what summary.json says of it: the number of such tokens and,
    for a chosen list, the list."""
    chosen = text.prompt_tokens(model, n, documents)
    allowed = model.allowed if chosen is None else chosen
    if chosen is None:
        return allowed, {}
    return allowed, {"prompt_tokens": int(chosen.sum()), "prompt_token_ids": torch.nonzero(chosen)[:, 0].tolist()}


def analyze_checkpoint(source: Checkpoint, out: Path, settings: ICLSettings) -> dict:
    """``analyze icl`` of one checkpoint into ``out``; returns its summary.json content, which also says where the
    model came from, its training step and its ICL score (NaN for a model without next-token predictions): on the
    same prompts, or the paper's on natural text (``settings.text``)."""
    model, default_items = source.load()
    n = _prompt_items(default_items, settings.n_items)
    documents = settings.text.documents(model)
    allowed, vocabulary = _vocabulary(model, n, settings.text, documents)
    check_length(model, 2 * n + (model.bos is not None), f"prompts of n_items={n}")
    generator = torch.Generator().manual_seed(settings.seed)
    prompts = repeated_prompt(n, model.vocab_size, model.bos, settings.prompts, generator, allowed)  # P 2n(+1)
    analysis = analyze_heads(model, prompts, n, settings.grid, settings.alignment, settings.layers,
                             settings.batch_size, settings.query_window)
    start = analysis.start
    icl, sequences = float("nan"), settings.prompts
    if model.predicts_tokens and settings.text.icl_score == "paper":
        windows, early, late = settings.text.paper_windows(model, documents)
        icl, sequences = float(icl_scores(model, windows, early, late, settings.batch_size).mean()), len(windows)
    elif model.predicts_tokens:
        icl = float(icl_scores(model, prompts, start + n - 1, start + 2 * n - 1, settings.batch_size).mean())
    extra = {**source.describe(model), **vocabulary, "icl_score": icl, "icl_sequences": sequences}
    return write_icl(analysis, settings, out, extra)


def read_heads(path: Path) -> list[dict]:
    with path.open() as f:
        return list(csv.DictReader(f))


def read_analysis(directory: str | Path) -> HeadAnalysis:
    """An ``analyze icl`` (or ``analyze published``) output directory read back as a HeadAnalysis: heads.csv and
    lag_crps.npz (no attention pattern: it is not kept). A directory without them is a one-line UsageError."""
    directory, written = Path(directory), HeadsDir(directory)
    missing = [path.name for path in (written.heads, written.lag_crps) if not path.is_file()]
    if missing:
        raise UsageError(f"beside={directory} has no {missing[0]}: give a directory that analyze icl or analyze "
                         f"published wrote")
    integers = {"layer", "head", "lag_crp_peak"}
    names = [f.name for f in dataclass_fields(HeadResult)]
    try:
        heads = [HeadResult(**{name: int(row[name]) if name in integers else as_float(row[name]) for name in names})
                 for row in read_heads(written.heads)]
        with np.load(written.lag_crps, allow_pickle=False) as arrays:
            lags, crps, cmr, gauss = (arrays[key] for key in ("lags", "lag_crps", "cmr_fits", "gaussian_fits"))
    except (KeyError, ValueError, TypeError, OSError) as error:
        raise UsageError(f"beside={directory} holds files analyze icl did not write ({error})") from None
    layers = tuple(sorted({h.layer for h in heads}))
    if not heads or crps.shape[:2] != (len(layers), max(h.head for h in heads) + 1):
        raise UsageError(f"beside={directory}: heads.csv and lag_crps.npz disagree on the layers and heads")
    return HeadAnalysis(heads, lags, crps, cmr, gauss, np.empty((*crps.shape[:2], 0, 0)), np.empty(0, dtype=np.int64),
                        n_items=0, layers=layers)


def analyze_checkpoints(sources: list[Checkpoint], out: Path, settings: ICLSettings, reuse: bool = False,
                        report: Callable[[str], None] = print, draw: Literal["every", "final"] = "every") -> list[dict]:
    """``analyze icl`` of checkpoints of one model in step order (``trained_checkpoints``, ``pretrained_checkpoints``),
    each into ``out/step<N>``, then ``emergence.csv`` and the emergence figure in ``out``; returns the emergence rows.
    With ``reuse``, a checkpoint already analysed with the same settings and units per head (its summary.json newer
    than the checkpoint) is read back, not analysed again. ``draw``: which checkpoints get their figures, ``every``
    one or the ``final`` one only (the others get their tables; five figures a checkpoint took longer to draw than to
    analyse)."""
    one_of("draw", draw, ("every", "final"))
    tables_only = replace(settings, formats=())
    analysed = []  # (step, heads.csv rows, ICL score) per checkpoint
    for source in sources:
        step_settings = settings if draw == "every" or source is sources[-1] else tables_only
        target = HeadsDir(out).step(source.step)
        summary_file = target.summary
        done = reuse and summary_file.is_file() and not source.written_after(summary_file)
        content = json.loads(summary_file.read_text()) if done else None
        same_group = content is not None and content.get("units_per_head", 1) == source.group
        if content is None or not settings.matches(content) or not same_group:
            content = analyze_checkpoint(source, target.path, step_settings)
        analysed.append((source.step, read_heads(target.heads), as_float(content["icl_score"])))
    return _emergence_rows(analysed, out, settings, report)


def kept_analyses(out: Path, settings: ICLSettings, group: int = 1) -> list[dict]:
    """The emergence rows of a run kept as its results (its checkpoints removed, as results/ keeps them): its
    analyses in ``out/step<N>`` read back in step order, each made with ``settings`` and ``group`` units to a head,
    else a one-line error; then emergence.csv (and its figure) in ``out`` as ``analyze_checkpoints`` writes them."""
    steps = sorted((int(d.name[4:]), d) for d in out.glob("step*") if d.name[4:].isdigit())
    if not steps:
        raise UsageError(f"{out} holds no analysis (step<N>/): this run was kept without its checkpoints and "
                         "without the analyses that need them, so nothing can be drawn from it")
    analysed = []
    for step, folder in steps:
        content = json.loads(HeadsDir(folder).summary.read_text())
        if not settings.matches(content) or content.get("units_per_head", 1) != group:
            raise UsageError(f"{HeadsDir(folder).summary} was analysed with other settings than these (or "
                             f"units_per_head {content.get('units_per_head', 1)}, not {group}), and its run was kept "
                             "without checkpoints: it cannot be analysed again")
        analysed.append((step, read_heads(HeadsDir(folder).heads), as_float(content["icl_score"])))
    return _emergence_rows(analysed, out, settings, lambda line: None)


def _emergence_rows(analysed: list[tuple], out: Path, settings: ICLSettings,
                    report: Callable[[str], None]) -> list[dict]:
    """(step, heads.csv rows, ICL score) per checkpoint in step order -> the emergence rows, written to ``out``."""
    final = settings.top_heads_from == "final"
    chosen = top_heads(analysed[-1][1], settings.top) if final else None
    closest = closest_heads(analysed[-1][1], settings.top) if final else None
    rows = []
    for step, heads, icl in analysed:
        row = emergence_row(step, heads, settings.top, icl, chosen, closest)
        report(f"  step {step}: best head {row['best_head']} induction {row['best_induction']:.3f}, "
               f"top-{row['top']} ({row['top_heads']}) CMR distance {row['top_cmr_distance']:.3f}, "
               f"ICL score {row['icl_score']:+.3f}")
        rows.append(row)
    write_emergence(rows, out, settings.formats)
    return rows


def write_emergence(rows: list[dict], out: Path, formats: tuple[str, ...] | list[str], seeds: dict | None = None,
                    title: str = "") -> None:
    """emergence.csv (``rows``) and the emergence figure in each of ``formats`` (none: the table alone); ``seeds``
    maps names to per-seed rows drawn beneath."""
    out.mkdir(parents=True, exist_ok=True)
    files.write_csv(HeadsDir(out).emergence, files.plain(rows))
    if formats:
        figures.save(figures.heads.emergence(rows, seeds or {}, title), HeadsDir(out).emergence_figure, formats)


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

    try:
        scored = [(int(r["layer"]), int(r["head"]), float(r[key]) if r[key] else float("nan")) for r in rows]
    except (ValueError, TypeError) as error:  # TypeError: a short row's missing cell
        raise UsageError(f"heads={path} is not an `analyze icl` heads.csv: {error} (layer and head are whole numbers, "
                         f"{key} a number or empty)") from None

    def order(row: tuple[int, int, float]) -> tuple[bool, float]:
        value = row[2]
        return np.isnan(value), (value if key == "cmr_distance" else -value)

    return [(layer, head) for layer, head, _ in sorted(scored, key=order)]


@dataclass(frozen=True)
class AblationSettings:
    """How ``analyze ablation`` tests a model: which heads, how many random draws, on which sequences."""

    rank_by: str = "cmr_distance"
    fraction: float = 0.1
    random: int = 20
    sequences: int = 256
    n_items: int | None = None  # None: the task's prompt_items (100 for a pretrained model), else 25
    repeats: int = 2
    seed: int = 0
    formats: tuple[str, ...] = figures.FORMATS
    batch_size: int = 64  # sequences per forward pass
    text: TextSettings = field(default_factory=TextSettings)  # the sequences' vocabulary, or the paper's ICL
    # score on natural text


def ablate_checkpoint(source: Checkpoint, ranked: list[tuple[int, int]], out: Path, settings: AblationSettings,
                      named: str = "ranked_heads") -> dict:
    """``analyze ablation`` of one checkpoint with heads ``ranked`` best first: ablation.json and its figure in
    ``out``; returns the result. ``named``: where ``ranked`` came from (``heads=FILE``), which a refusal names (heads
    this model does not have, say)."""
    model, default_items = source.load()
    documents = settings.text.documents(model)
    if settings.text.icl_score == "paper":  # the paper's: natural text windows
        n, vocabulary = None, {}
        tokens, early, late = settings.text.paper_windows(model, documents)
    else:  # [BOS] r r ... r
        n = _prompt_items(default_items, settings.n_items)
        allowed, vocabulary = _vocabulary(model, n, settings.text, documents)
        check_length(model, n * settings.repeats + (model.bos is not None), f"sequences of n_items={n}")
        tokens = repeated_tokens(n, settings.repeats, model.vocab_size, model.bos, settings.sequences,
                                 torch.Generator().manual_seed(settings.seed), allowed)
        early = late = None
    result = ablation_study(model, tokens, ranked, settings.fraction, settings.random, settings.seed, early, late,
                            batch_size=settings.batch_size, named=named)
    result = {**source.describe(model), **vocabulary, "rank_by": settings.rank_by, "n_items": n,
              "repeats": None if n is None else settings.repeats, **settings.text.recorded(), **result}
    out.mkdir(parents=True, exist_ok=True)
    files.write_json(AblationDir(out).result, result)
    if settings.formats:
        figure = figures.heads.ablation_scores(result["summary"], result["k"], settings.rank_by)
        figures.save(figure, AblationDir(out).figure, settings.formats)
    return result


def write_probes(stats: ProbeStats, settings: dict, out: Path, formats: list[str]) -> dict:
    """probes.csv, probes.npz, summary.json and the probes figure of one probe analysis. probes.npz also holds
    ``study_weight`` (layers, heads, 2, L), the ``study_profile`` by study position, and summary.json its early
    minus late quarter per layer (the heads' mean profile), old and new probes."""
    out.mkdir(parents=True, exist_ok=True)
    means, trials = stats.means(), stats.trials
    layers, heads, _, n_items = trials.shape
    written = ProbesDir(out)
    files.write_csv(written.table, [
        {"layer": layer, "head": head, "probe": PROBES[k], "query_position": j,
         **{m: float(means[m][layer, head, k, j]) for m in MEASURES}, "n": int(n)}
        for (layer, head, k, j), n in np.ndenumerate(trials)])
    profile = stats.study_profile()  # layers heads 2 L, by study position
    files.save_npz(written.arrays, probes=np.array(PROBES), **means,
                   **{f"n_{m}": stats.counts[m] for m in MEASURES}, study_weight=profile,
                   n_study_weight=stats.study_counts)
    by_layer = early_minus_late(np.nanmean(profile, axis=1))  # layers 2: the heads' mean profile
    content = {**settings, "n_layers": layers, "n_heads": heads, "n_items": n_items,
               **{f"{probe}_probes": int(trials[0, 0, k].sum()) for k, probe in enumerate(PROBES)},
               "study_weight_early_minus_late": [{"layer": layer, **{probe: float(by_layer[layer, k])
                                                                     for k, probe in enumerate(PROBES)}}
                                                 for layer in range(layers)],
               "heads": head_summary(means)}
    files.write_json(written.summary, content)
    if formats:
        figures.save(figures.heads.probe_attention(means, profile), written.figure, formats)
    return content
