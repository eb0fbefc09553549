"""The per-head results Ji-An et al. (2024) published (corxyz/icl-cmr, MIT) as primacy's own: a ``saved_scores``
file becomes the heads.csv, lag_crps.npz and summary.json that ``primacy analyze icl`` writes, with CMR and the
Gaussian fitted here; a series of Pythia checkpoints gains emergence.csv; a ``saved_ablation`` file becomes an
ablation.json. What the authors' files hold and where each key goes: docs/icl.md and ``primacy analyze published``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from primacy import figures, files
from primacy.analysis.behaviour.cmr.fits import FIT_LAGS
from primacy.analysis.behaviour.cmr.grid import CMRGrid
from primacy.analysis.heads.ablation import paired_stats
from primacy.analysis.heads.analysis import HeadAnalysis, HeadResult, fit_head, summary
from primacy.analysis.heads.emergence import closest_heads, emergence_row, top_heads
from primacy.analysis.heads.natural_text import PAPER_EARLY, PAPER_LATE
from primacy.errors import UsageError
from primacy.rundir.layout import AblationDir, HeadsDir
from primacy.workflows.induction.analyses import draw_heads, write_emergence
from primacy.workflows.induction.published import read_published

PUBLISHED_LAGS = np.arange(-8, 8)  # lags of the authors' CRP_scores: 16 values, -8..7 (their util.load_scores_in_range)
_FIT_AT = np.searchsorted(PUBLISHED_LAGS, FIT_LAGS)  # where the fit lags -5..5 sit among them
SCORE_KEYS = ("head_scores", "copying_score", "CRP_scores", "CRP_scores_sem", "labels")  # a saved_scores file
SORTED_KEYS = ("head_scores", "copying_score", "CRP_scores", "CRP_scores_sem", "labels")  # each has a sorted_ copy
ABLATION_KEYS = ("original_icl_score", "ablated_icl_score", "ablated_rand_icl_score")  # a saved_ablation file
ABLATION_RESAMPLES = 2_000  # bootstrap and sign-flip resamples (resamples x sequences doubles are held at once)


@dataclass(frozen=True)
class PublishedScores:
    """One ``saved_scores`` file, checked: every array indexed (layer, head) as its ``labels`` say."""

    path: Path
    induction: np.ndarray  # (layers, heads) head_scores: the induction-head matching score
    copying: np.ndarray  # (layers, heads) copying_score
    lag_crps: np.ndarray  # (layers, heads, 16) CRP_scores: mean attention score by lag, on PUBLISHED_LAGS
    lag_crp_sems: np.ndarray  # (layers, heads, 16) CRP_scores_sem: its standard error
    layer_rank: np.ndarray  # (layers, heads) the head's place in its layer by induction score (their sort_ind), 0 first
    notes: tuple[str, ...]  # where the file disagrees with itself (sorted_ copies, labels)


def _array(content: dict, key: str, path: Path) -> np.ndarray:
    value = content[key]
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    if not isinstance(value, np.ndarray):
        raise UsageError(f"published file {str(path)!r} holds {key} as a {type(value).__name__}: an array was "
                         f"expected")
    return value


def _kind(content: Any) -> str:
    if isinstance(content, dict) and set(SCORE_KEYS) <= set(content):
        return "scores"
    if isinstance(content, dict) and set(ABLATION_KEYS) <= set(content):
        return "ablation"
    if isinstance(content, dict) and content and all(isinstance(v, dict) and "selection" in v
                                                     for v in content.values()):
        return "top heads"
    return "unknown"


def _wrong_kind(path: Path, content: Any, wanted: str) -> UsageError:
    kind = _kind(content)
    keys = sorted(map(str, content))[:8] if isinstance(content, dict) else type(content).__name__
    hint = {"scores": "a head-scores file: give it to --scores", "ablation": "an ablation file: give it to --ablation",
            "top heads": "a saved_top_heads file, which selects heads across models and is not converted"}.get(kind)
    return UsageError(f"published file {str(path)!r} is not a {wanted} file (it holds {keys})"
                      + (f": it is {hint}" if hint else ""))


def read_scores(path: str | Path) -> PublishedScores:
    """A ``saved_scores/<model>/...pkl`` file as ``PublishedScores``; a file of another kind, or of inconsistent
    shapes, is a UsageError naming it. Disagreements between the sorted copies and the arrays are kept as notes."""
    path = Path(path)
    content = read_published(path)
    if _kind(content) != "scores":
        raise _wrong_kind(path, content, f"head-scores ({', '.join(SCORE_KEYS)})")
    induction, copying, crps, sems, labels = (_array(content, key, path) for key in SCORE_KEYS)
    layers, heads = induction.shape if induction.ndim == 2 else (0, 0)
    shapes = {"head_scores": induction.shape, "copying_score": copying.shape, "labels": labels.shape,
              "CRP_scores": crps.shape, "CRP_scores_sem": sems.shape}
    expected = {key: (layers, heads) + ((len(PUBLISHED_LAGS),) if key.startswith("CRP") else ()) for key in shapes}
    if induction.ndim != 2 or induction.size == 0 or shapes != expected:
        raise UsageError(f"published file {str(path)!r} has inconsistent shapes {shapes}: expected (layers, heads) "
                         f"and (layers, heads, {len(PUBLISHED_LAGS)}) for lags -8..7")
    notes = [f"labels[{layer}, {h}] is {labels[layer, h]!r}, not 'L{layer}H{h}'" for layer in range(layers)
             for h in range(heads) if str(labels[layer, h]) != f"L{layer}H{h}"][:5]
    order = content.get("sort_ind")
    rank = np.full((layers, heads), -1)
    if isinstance(order, np.ndarray) and order.shape == (layers, heads):
        rank[np.arange(layers)[:, None], order] = np.arange(heads)  # sort_ind[l, i] is the head in place i
        unsorted = dict(zip(SCORE_KEYS, (induction, copying, crps, sems, labels)))
        for key in SORTED_KEYS:
            copy = content.get(f"sorted_{key}")
            copy = copy.detach().cpu().numpy() if isinstance(copy, torch.Tensor) else copy
            index = order.reshape(layers, heads, *[1] * (unsorted[key].ndim - 2))  # layers heads (1)
            permuted = np.take_along_axis(unsorted[key], index, axis=1)
            if copy is not None and not np.array_equal(np.asarray(copy), permuted):
                notes.append(f"sorted_{key} is not {key} permuted by sort_ind")
    return PublishedScores(path, induction.astype(np.float64), copying.astype(np.float64), crps.astype(np.float64),
                           sems.astype(np.float64), rank, tuple(notes))


def analyse(scores: PublishedScores, grid: CMRGrid, alignment: str = "peak") -> HeadAnalysis:
    """The heads of ``scores`` as ``analyze icl``'s HeadAnalysis: lag-CRPs on -5..+5 (the lags analyze icl keeps),
    CMR (on ``grid``, ``alignment``) and the Gaussian fitted as ``fit_head`` fits them, the peak lag; the scores the
    file does not have (duplicate-token, previous-token) and the attention of a prompt (none) are NaN or empty."""
    crps = scores.lag_crps[..., _FIT_AT]  # layers heads K (K = 11 lags, -5..5)
    layers, heads, _ = crps.shape
    cmr_fits, gauss_fits = np.full_like(crps, np.nan), np.full_like(crps, np.nan)
    results = []
    for layer in range(layers):
        for head in range(heads):
            curve = crps[layer, head]
            fits, cmr, gauss = fit_head(curve, FIT_LAGS, grid, alignment)
            if cmr is not None:
                cmr_fits[layer, head], gauss_fits[layer, head] = cmr.fitted, gauss.fitted
            results.append(HeadResult(layer=layer, head=head, induction=float(scores.induction[layer, head]),
                                      duplicate_token=float("nan"), previous_token=float("nan"),
                                      copying=float(scores.copying[layer, head]),
                                      lag_crp_peak=int(FIT_LAGS[curve.argmax()]), **fits))
    return HeadAnalysis(results, FIT_LAGS.copy(), crps, cmr_fits, gauss_fits, np.empty((layers, heads, 0, 0)),
                        np.empty(0, dtype=np.int64), n_items=None, layers=tuple(range(layers)))  # type: ignore[arg-type]


def head_rows(analysis: HeadAnalysis, scores: PublishedScores) -> list[dict]:
    """heads.csv rows: ``analyze icl``'s columns, then ``published_layer_rank`` (the authors' sort_ind)."""
    return [{**h.row(), "published_layer_rank": int(scores.layer_rank[h.layer, h.head])} for h in analysis.heads]


def write_scores(scores: PublishedScores, out: Path, grid: CMRGrid, alignment: str, top: int,
                 formats: tuple[str, ...]) -> tuple[dict, HeadAnalysis]:
    """heads.csv, lag_crps.npz, summary.json and the figures of one published file in ``out``, as ``analyze icl``
    writes them (without the attention-pattern figure: the file holds no attention); returns summary.json's content
    and the analysis. Unknown settings (n_items, BOS, prompts) are null."""
    analysis = analyse(scores, grid, alignment)
    out.mkdir(parents=True, exist_ok=True)
    written = HeadsDir(out)
    files.write_csv(written.heads, head_rows(analysis, scores))
    top = min(top, len(analysis.heads))
    content = {"source": "published", "published_file": str(scores.path), "published_notes": list(scores.notes),
               **summary(analysis, top), "bos": None, "n_prompts": None, "prompt_seed": None,
               "cmr_variant": grid.variant, "cmr_alignment": alignment, "top": top, "icl_score": float("nan"),
               "cmr_like_heads": sum(h.cmr_like for h in analysis.heads)}
    files.write_json(written.summary, content)
    files.save_npz(written.lag_crps, lags=analysis.lags, lag_crps=analysis.lag_crps, cmr_fits=analysis.cmr_fits,
                   gaussian_fits=analysis.gaussian_fits, lag_crp_sems=scores.lag_crp_sems[..., _FIT_AT],
                   published_lags=PUBLISHED_LAGS, published_lag_crps=scores.lag_crps,
                   published_lag_crp_sems=scores.lag_crp_sems)
    if formats:
        draw_heads(analysis, content, grid, top, out, formats)
    return content, analysis


_CHECKPOINT = re.compile(r"cp(\d+)$")


def checkpoint_number(path: str | Path) -> int:
    """N of a file named ``..._cp<N>.pkl`` (the authors' Pythia checkpoint index); a name without it is a
    UsageError."""
    found = _CHECKPOINT.search(Path(path).stem)
    if found is None:
        raise UsageError(f"published file {str(path)!r} has no checkpoint number: a series needs names ending in "
                         f"_cp<N>.pkl, as all_scores_pythia_70m_cp10.pkl")
    return int(found.group(1))


def read_series(paths: list[str | Path]) -> list[tuple[int, PublishedScores]]:
    """(checkpoint, scores) of several files of one model, in checkpoint order; names without a checkpoint number,
    a number given twice or files of different shapes are UsageErrors."""
    steps = [checkpoint_number(path) for path in paths]
    if len(set(steps)) < len(steps):
        twice = sorted({s for s in steps if steps.count(s) > 1})
        raise UsageError(f"scores name checkpoint {twice[0]} more than once: give each checkpoint once")
    series = sorted(zip(steps, (read_scores(path) for path in paths)), key=lambda pair: pair[0])
    shapes = {scores.induction.shape for _, scores in series}
    if len(shapes) > 1:
        raise UsageError(f"scores hold models of different sizes (layers, heads) {sorted(shapes)}: a series is the "
                         f"checkpoints of one model")
    return series


def write_series(series: list[tuple[int, PublishedScores]], out: Path, grid: CMRGrid, alignment: str, top: int,
                 formats: tuple[str, ...], report: Any = print) -> tuple[list[dict], HeadAnalysis]:
    """Each checkpoint into ``out/step<N>`` (figures for the last only), then emergence.csv and the emergence figure
    in ``out``, the top heads fixed at the last checkpoint as ``analyze_checkpoints`` fixes them; returns the rows
    (icl_score NaN: the files hold none) and the last checkpoint's analysis."""
    tables, analysis = [], None
    for step, scores in series:
        _, analysis = write_scores(scores, HeadsDir(out).step(step).path, grid, alignment, top,
                                   formats if step == series[-1][0] else ())
        tables.append((step, [h.row() for h in analysis.heads]))
    chosen, closest = top_heads(tables[-1][1], top), closest_heads(tables[-1][1], top)
    rows = []
    for step, heads in tables:
        row = emergence_row(step, heads, top, float("nan"), chosen, closest)
        report(f"  checkpoint {step}: best head {row['best_head']} induction {row['best_induction']:.3f}, "
               f"top-{row['top']} ({row['top_heads']}) CMR distance {row['top_cmr_distance']:.3f}, "
               f"CMR-like share {row['cmr_like_share']:.2f}")
        rows.append(row)
    write_emergence(rows, out, formats)
    return rows, analysis


def write_beside(models: list[tuple[str, HeadAnalysis]], out: Path, variant: str,
                 formats: tuple[str, ...]) -> list[Path]:
    """``out/beside``: the models' heads on one page, a row each (``figures.heads.heads_beside``); the files written."""
    if not formats:
        return []
    return figures.save(figures.heads.heads_beside(models, variant), out / "beside", formats)


def read_ablation(path: str | Path) -> dict[str, np.ndarray]:
    """The three per-sequence ICL-score arrays (S,) of a ``saved_ablation`` file; another kind of file, or arrays of
    different lengths, is a UsageError naming it."""
    path = Path(path)
    content = read_published(path)
    if _kind(content) != "ablation":
        raise _wrong_kind(path, content, f"ablation ({', '.join(ABLATION_KEYS)})")
    arrays = {key: np.asarray(_array(content, key, path), dtype=np.float64) for key in ABLATION_KEYS}
    lengths = {key: a.shape for key, a in arrays.items()}
    if len(set(lengths.values())) > 1 or any(len(shape) != 1 or shape[0] < 2 for shape in lengths.values()):
        raise UsageError(f"published file {str(path)!r} holds ICL scores of shapes {lengths}: three 1-D arrays of one "
                         f"length (at least 2 sequences) were expected")
    return arrays


def ablation_result(arrays: dict[str, np.ndarray], path: Path, seed: int = 0) -> dict:
    """ablation.json's content from a saved_ablation file: the per-sequence scores and their summaries under
    primacy's names (intact; top: the authors' top 10 % CMR-like heads ablated; random_single: their one draw of as
    many random heads), the paired comparisons, and null for what the file does not say (k, which heads)."""
    scores = {"intact": arrays["original_icl_score"], "top": arrays["ablated_icl_score"],
              "random_single": arrays["ablated_rand_icl_score"]}  # each (S,)
    n = len(scores["intact"])

    def compare(first: str, second: str) -> dict:
        stats = paired_stats(scores[first], scores[second], ABLATION_RESAMPLES, seed)
        return {key: getattr(stats, key) for key in stats.__dataclass_fields__}

    single = float(scores["random_single"].mean())
    return {
        "source": "published", "published_file": str(path), "rank_by": "cmr_distance", "fraction": 0.1,
        "icl_score": "paper", "early": PAPER_EARLY, "late": PAPER_LATE, "sequences": n,
        "k": None, "top_heads": None, "random_heads": None,
        "scores": {name: s.tolist() for name, s in scores.items()},
        "summary": {name: {"mean": float(s.mean()), "se": float(s.std(ddof=1) / np.sqrt(n))}
                    for name, s in scores.items()},
        "random_draws": {"mean": single, "se": None, "n": 1, "per_draw": [single]},
        "comparisons": {"top_minus_intact": compare("intact", "top"),
                        "random_single_minus_intact": compare("intact", "random_single"),
                        "top_minus_random_single": compare("random_single", "top")},
        "resamples": ABLATION_RESAMPLES,
    }


def write_ablation(arrays: dict[str, np.ndarray], path: str | Path, out: Path, formats: tuple[str, ...]) -> dict:
    """ablation.json and the ablation figure (Fig. 8) in ``out`` of the ``read_ablation`` arrays of the file at
    ``path``; returns the content."""
    result = ablation_result(arrays, Path(path))
    out.mkdir(parents=True, exist_ok=True)
    files.write_json(AblationDir(out).result, result)
    if formats:  # k is not in the file: the authors ablated the top 10 % of the heads
        figures.save(figures.heads.ablation_scores(result["summary"], "10 %", "CMR distance"), AblationDir(out).figure,
                     formats)
    return result
