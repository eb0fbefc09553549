"""The run's result files: summary.json, accuracy.npz, verification.csv and contiguity.csv; for free recall
summary.json, free_recall.npz and free_recall.csv (their schema: README.md, "What a run writes")."""

from __future__ import annotations

import json
import zipfile
import zlib
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import torch

from primacy import files
from primacy.analysis.behaviour.cmr.fits import FREE_RECALL_FIT_LAGS, fit_free_recall
from primacy.analysis.behaviour.free_recall import FreeRecallCounts, long_format_rows
from primacy.analysis.behaviour.free_recall import summarize as free_recall_curves
from primacy.analysis.behaviour.serial_position import position_indices, summarize
from primacy.errors import UsageError
from primacy.rundir.layout import ACCURACY_ARRAYS, FREE_RECALL_ARRAYS, FREE_RECALL_TABLE, SUMMARY, RunDir

COUNT_KEYS = ("hits", "counts", "distractor_hits", "distractor_counts")
# Recognition contiguity (StudyQueryAccuracy): always written now, absent from runs written before it existed.
CONTIGUITY_KEYS = ("contiguity_hits", "contiguity_counts")
# Its position control (float64, 2L - 1): absent from runs written before the controlled curve existed.
EXPECTED_KEY = "contiguity_expected"
# The serial-position curve by delay (tasks with a delay between study and queries): absent for the others.
DELAY_KEYS = ("delays", "delay_hits", "delay_counts")
CURVE_KEYS = ("serial_position_curve", "query_position_curve", "delay_curve")
RENAMED_KEYS = {"lag_curve": "delay_curve"}  # summary.json keys of older runs -> their names now
SCALAR_KEYS = ("overall_accuracy", "target_accuracy", "distractor_accuracy",
               "primacy_index", "recency_index", "early_minus_late", "early_query_decay")


def summary(result: dict[str, Any], settings: dict[str, Any]) -> dict[str, Any]:
    """The summary.json content: scalars, curves, the number of test sets and the run's key settings.

    ``contiguity_curve`` (null where a lag has no pairs) and ``contiguity_lags`` are included when ``result``
    has them, and ``controlled_contiguity_curve`` (the same lags) when it has that; ``delays``,
    ``serial_position_by_delay`` (one curve per delay) and ``early_minus_late_by_delay`` for a task with delays.
    """
    contiguity = {}
    if "contiguity_curve" in result:
        contiguity = {"contiguity_curve": [files.plain(float(v)) for v in result["contiguity_curve"]],
                      "contiguity_lags": [int(d) for d in result["contiguity_lags"]]}
    if "controlled_contiguity_curve" in result:
        contiguity["controlled_contiguity_curve"] = [files.plain(float(v))
                                                     for v in result["controlled_contiguity_curve"]]
    if "serial_position_by_delay" in result:
        contiguity["delays"] = [int(d) for d in result["delays"]]
        contiguity["serial_position_by_delay"] = [[files.plain(float(v)) for v in row]
                                                  for row in result["serial_position_by_delay"]]
        contiguity["early_minus_late_by_delay"] = [files.plain(float(v)) for v in result["early_minus_late_by_delay"]]
    return {
        **{k: files.plain(float(result[k])) for k in SCALAR_KEYS},
        **{k: [files.plain(float(v)) for v in result[k]] for k in CURVE_KEYS},
        **contiguity,
        "n_sets": _n_sets(result),
        **settings,
    }


def _n_sets(result: dict[str, Any]) -> int | None:
    """Test sets behind the matrix: each set asks every (study, query) cell once (forward reconstruction: every cell of
    the diagonal, the only ones it asks) at each delay; None when the counts are not those of whole sets."""
    counts = torch.as_tensor(result["counts"])
    off_diagonal = counts - torch.diag(torch.diagonal(counts))
    asked = torch.diagonal(counts) if bool((off_diagonal == 0).all()) and counts.shape[0] > 1 else counts
    if not bool((asked == asked.min()).all()):
        return None
    sets, rest = divmod(int(asked.min()), len(result["delays"]) if "delays" in result else 1)
    return None if rest else sets


def write(out_dir: str | Path, result: dict[str, Any], settings: dict[str, Any]) -> dict[str, Any]:
    """Write summary.json, accuracy.npz, <task>.csv (verification.csv, reconstruction.csv, recall.csv), contiguity.csv
    and, for a task with delays, delays.csv under ``out_dir``; returns the summary.

    ``result`` is StudyQueryAccuracy.compute()'s dict; ``settings`` holds at least ``condition`` (and ``task``; none
    means verification). A result without the contiguity states (``summarize`` of an older run's counts) gives no
    contiguity.csv; one without ``contiguity_expected`` leaves its ``controlled`` column empty.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    keys = COUNT_KEYS + (CONTIGUITY_KEYS if "contiguity_counts" in result else ())
    keys += (EXPECTED_KEY,) if EXPECTED_KEY in result else ()
    keys += DELAY_KEYS if "delay_counts" in result else ()
    arrays = {k: np.asarray(torch.as_tensor(result[k]).cpu()) for k in keys}
    files.save_npz(out / ACCURACY_ARRAYS, **arrays)
    content = write_summary(out, summary(result, settings))
    write_csv(out / f"{settings.get('task') or 'verification'}.csv", arrays, settings["condition"])
    if "contiguity_counts" in arrays:
        write_contiguity_csv(out / "contiguity.csv", arrays, settings["condition"])
    if "delay_counts" in arrays:
        write_delay_csv(out / "delays.csv", arrays, settings["condition"])
    return content


def free_recall_summary(counts: FreeRecallCounts, settings: dict[str, Any], loss: float | None = None,
                        forced: dict[str, float] | None = None) -> dict[str, Any]:
    """The summary.json of a free-recall test: ``serial_position_curve`` is the recall probability by study position
    (psifr's spc of free_recall.csv), with its primacy and recency indices; ``first_recall_curve`` (psifr's pnr at
    the first output); ``lag_crp`` by ``lag_crp_lags`` (null where a lag was never possible) and its ``cmr_fit``
    (``cmr_fit_entry``); the rates, the mean number of distinct studied items recalled per list, the counts behind
    them, ``forced_accuracy`` (``FreeRecallStats.forced_accuracy``: the share of teacher-forced steps answered right
    fed the task's order and the model's own; null where not measured) and the run's settings."""
    curves = free_recall_curves(counts)

    def values(x: torch.Tensor) -> list[float | None]:
        return [files.plain(float(v)) for v in x]

    return {
        "mean_recalled": curves.mean_recalled,
        "intrusion_rate": files.plain(curves.intrusion_rate),
        "repetition_rate": files.plain(curves.repetition_rate),
        **{k: files.plain(v) for k, v in position_indices(curves.spc).items()},
        "loss": loss,
        "forced_accuracy": forced,
        "serial_position_curve": values(curves.spc),
        "first_recall_curve": values(curves.pfr),
        "lag_crp": values(curves.lag_crp),
        "lag_crp_lags": [int(k) for k in curves.lags],
        "cmr_fit": cmr_fit_entry(curves.lag_crp.numpy(), curves.lags.numpy()),
        "n_lists": int(counts.lists),
        "counts": {k: int(getattr(counts, k)) for k in ("outputs", "correct", "intrusions", "repetitions")},
        **settings,
    }


def cmr_fit_entry(lag_crp: np.ndarray, lags: np.ndarray) -> dict[str, Any]:
    """summary.json's ``cmr_fit`` of a lag-CRP (``fit_free_recall``): the ``lags`` fitted (FREE_RECALL_FIT_LAGS) and
    for each variant its ``distance``, ``beta_enc``, ``beta_rec``, ``gamma_ft``, ``inv_temperature`` and the fitted
    ``curve`` on those lags, or null where the lag-CRP has no fit (a lag never possible, or a flat curve)."""
    entry: dict[str, Any] = {"lags": [int(k) for k in FREE_RECALL_FIT_LAGS]}
    for variant, fit in fit_free_recall(lag_crp, lags).items():
        entry[variant] = None if fit is None else {
            "distance": fit.distance, "beta_enc": fit.beta_enc, "beta_rec": fit.beta_rec, "gamma_ft": fit.gamma_ft,
            "inv_temperature": fit.inv_temperature, "curve": [float(v) for v in fit.fitted]}
    return entry


def write_free_recall(out_dir: str | Path, counts: FreeRecallCounts, study: torch.Tensor, recalls: torch.Tensor,
                      settings: dict[str, Any], subject: str, loss: float | None = None,
                      forced: dict[str, float] | None = None) -> dict[str, Any]:
    """Writes <out_dir>/free_recall.npz (the counts, ``study`` (N, L) and ``recalls`` (N, L), -1 after stop),
    free_recall.csv (the long format psifr reads, lists numbered from 1 in test order, ``subject`` in every row)
    and summary.json (``free_recall_summary``); returns the summary."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files.save_npz(out / FREE_RECALL_ARRAYS, **{k: v.cpu().numpy() for k, v in counts._asdict().items()},
                   study=study.cpu().numpy(), recalls=recalls.cpu().numpy())
    files.write_csv(out / FREE_RECALL_TABLE, long_format_rows(study.cpu(), recalls.cpu(), subject))
    return write_summary(out, free_recall_summary(counts, settings, loss, forced))


def replacing_notice(out_dir: str | Path) -> str | None:
    """The line to show before a test writes into ``out_dir`` when it already holds results (a summary.json), so
    that replacing an earlier test's results is never silent; None when there is nothing to replace."""
    path = Path(out_dir) / SUMMARY
    try:
        written = datetime.fromtimestamp(path.stat().st_mtime)
    except FileNotFoundError:
        return None
    return f"replacing the results in {path.parent} (written {written:%Y-%m-%d %H:%M})"


def write_summary(out_dir: str | Path, content: dict[str, Any]) -> dict[str, Any]:
    """Write ``content`` to <out_dir>/summary.json; returns it."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files.write_json(out / SUMMARY, content)
    return content


def write_csv(path: Path, arrays: dict[str, np.ndarray], condition: str) -> None:
    """Long format: one row per (study, query) cell, then one per query position for distractors (study_pos -1)."""
    hits, counts = arrays["hits"], arrays["counts"]
    n = hits.shape[0]
    rows = [{"condition": condition, "study_pos": i, "query_pos": j, "accuracy": _ratio(hits[i, j], counts[i, j]),
             "n": int(counts[i, j])} for i in range(n) for j in range(n)]
    rows += [{"condition": condition, "study_pos": -1, "query_pos": j, "accuracy": _ratio(h, c), "n": int(c)}
             for j, (h, c) in enumerate(zip(arrays["distractor_hits"], arrays["distractor_counts"]))]
    files.write_csv(path, rows)


def write_contiguity_csv(path: Path, arrays: dict[str, np.ndarray], condition: str) -> None:
    """Long format: one row per recognition-contiguity lag d = -(L - 1) .. L - 1: ``accuracy`` (the raw curve) and
    ``controlled`` (the controlled curve: accuracy minus the mean accuracy of the queries' own cells), both empty
    where n = 0, ``controlled`` also when ``arrays`` has no ``contiguity_expected``."""
    hits, counts = arrays["contiguity_hits"], arrays["contiguity_counts"]
    expected = arrays.get(EXPECTED_KEY)
    n = (counts.shape[0] + 1) // 2
    files.write_csv(path, [{"condition": condition, "lag": index - (n - 1), "accuracy": _ratio(h, c),
                            "controlled": "" if expected is None else _ratio(h - expected[index], c), "n": int(c)}
                           for index, (h, c) in enumerate(zip(hits, counts))])


def write_delay_csv(path: Path, arrays: dict[str, np.ndarray], condition: str) -> None:
    """Long format: one row per (delay, study position): the accuracy of the answers about that study position in the
    trials of that delay (over all query positions), empty where n = 0."""
    files.write_csv(path, [{"condition": condition, "delay": int(delay), "study_pos": i, "accuracy": _ratio(h, c),
                            "n": int(c)}
                           for delay, hits, counts in zip(arrays["delays"], arrays["delay_hits"],
                                                          arrays["delay_counts"])
                           for i, (h, c) in enumerate(zip(hits, counts))])


def _ratio(hits: float, count: float) -> str:
    return f"{hits / count:.6g}" if count else ""


def read(out_dir: str | Path) -> dict[str, Any]:
    """Load a results directory: the summary and the recomputed result dict from accuracy.npz.

    Runs written before the recognition-contiguity curve existed have no contiguity arrays: their dict then
    lacks ``contiguity_hits``, ``contiguity_counts``, ``contiguity_curve`` and ``contiguity_lags`` (as their
    summary lacks the last two) and everything else is as before. Runs written before its control existed lack
    ``contiguity_expected`` and ``controlled_contiguity_curve`` only. A summary's ``lag_curve`` (the name before
    ``delay_curve``) is read as ``delay_curve``.

    A damaged, truncated, empty or foreign summary.json or accuracy.npz is a UsageError that names the file and
    says how to make it again.
    """
    out = Path(out_dir)
    remedy = retest_hint(out)
    path = out / ACCURACY_ARRAYS
    arrays = read_npz(path, COUNT_KEYS, CONTIGUITY_KEYS + (EXPECTED_KEY,) + DELAY_KEYS, remedy)
    present_delays = [k for k in DELAY_KEYS if k in arrays]
    if present_delays and len(present_delays) < len(DELAY_KEYS):
        raise UsageError(f"{path} has {', '.join(present_delays)} without the rest of {', '.join(DELAY_KEYS)}, which "
                         f"are written together; {remedy}")
    present = [k for k in CONTIGUITY_KEYS if k in arrays]
    if len(present) == 1:
        raise UsageError(f"{path} has {present[0]} without its partner: contiguity_hits and contiguity_counts "
                         f"are written together; {remedy}")
    if EXPECTED_KEY in arrays and not present:
        raise UsageError(f"{path} has {EXPECTED_KEY} without contiguity_hits and contiguity_counts, which are "
                         f"written with it; {remedy}")
    _check_counts(path, arrays, remedy)
    states = {k: torch.from_numpy(v) for k, v in arrays.items()}
    return {"summary": read_summary(out / SUMMARY, remedy), **summarize(**states), **states}


def retest_hint(out: Path) -> str:
    """What to do about a run's damaged result file: test the run again, which rewrites every one of them."""
    return f"re-test the run with `primacy {' '.join(RunDir(out.parent).test_args())}`"


def _reason(error: BaseException) -> str:
    """An exception's message on one line (some, such as BadZipFile's, are empty or span lines)."""
    text = " ".join(str(error).split())
    return text or type(error).__name__


# What np.load and reading an archive member raise on a truncated, empty, corrupted or foreign file.
NPZ_ERRORS = (OSError, EOFError, ValueError, zipfile.BadZipFile, zlib.error)


def read_npz(path: Path, keys: tuple[str, ...], optional: tuple[str, ...], remedy: str) -> dict[str, np.ndarray]:
    """The arrays ``keys`` and those of ``optional`` that are present, read in full now, so that any damage shows
    here as a UsageError naming ``path`` rather than as a numpy or zipfile traceback later."""
    if not path.is_file():
        raise UsageError(f"{path} does not exist: {remedy}")
    with path.open("rb") as f:
        head = f.read(6)
    if not head:
        raise UsageError(f"{path} is damaged (the file is empty): {remedy}")
    if not head.startswith(b"PK"):  # else np.load would read it as a single .npy array or offer to unpickle it
        kind = "a single .npy array" if head == b"\x93NUMPY" else "not a zip archive"
        raise UsageError(f"{path} is damaged (not a valid .npz: {kind}): {remedy}")
    try:
        data = np.load(path)
    except NPZ_ERRORS as err:
        raise UsageError(f"{path} is damaged (not a valid .npz: {_reason(err)}): {remedy}") from None
    with data:
        missing = [k for k in keys if k not in data.files]
        if missing:
            raise UsageError(f"{path} lacks {', '.join(missing)}: it is not a complete {path.name}; {remedy}")
        arrays = {}
        for key in keys + tuple(k for k in optional if k in data.files):
            try:
                arrays[key] = data[key]
            except NPZ_ERRORS as err:
                raise UsageError(f"{path} is damaged (array {key} is unreadable: {_reason(err)}): {remedy}") from None
    return arrays


def _check_counts(path: Path, arrays: dict[str, np.ndarray], remedy: str) -> None:
    """Counts of the shapes the schema gives (hits, counts L x L; distractors L; contiguity 2L - 1; delays D and
    D x L), numeric, with at least one trial: anything else would fail later, deep inside ``summarize`` or a plot."""
    hits = arrays["hits"]
    n = hits.shape[0] if hits.ndim else 0
    d = arrays["delays"].shape[0] if "delays" in arrays and arrays["delays"].ndim else 0
    shapes = {"delays": (d,), "delay_hits": (d, n), "delay_counts": (d, n), "hits": (n, n), "counts": (n, n),
              "distractor_hits": (n,), "distractor_counts": (n,),
              "contiguity_hits": (2 * n - 1,), "contiguity_counts": (2 * n - 1,), EXPECTED_KEY: (2 * n - 1,)}
    for key, value in arrays.items():
        if value.dtype.kind not in "biuf":
            raise UsageError(f"{path} has {key} of dtype {value.dtype}, expected numbers: {remedy}")
        if value.shape != shapes[key]:
            raise UsageError(f"{path} has {key} of shape {value.shape}, expected {shapes[key]} (L = {n}): {remedy}")
    if n == 0 or arrays["counts"].sum() + arrays["distractor_counts"].sum() <= 0:
        raise UsageError(f"{path} holds no trials (all counts are zero): {remedy}")


def read_summary(path: Path, remedy: str) -> dict[str, Any]:
    """A summary.json's object; an unreadable, empty or invalid file, or JSON that is not an object, is a UsageError."""
    if not path.is_file():
        raise UsageError(f"{path} does not exist: {remedy}")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise UsageError(f"{path} is damaged (unreadable: {_reason(err)}): {remedy}") from None
    if not text.strip():
        raise UsageError(f"{path} is damaged (the file is empty): {remedy}")
    try:
        content = json.loads(text)
    except json.JSONDecodeError as err:
        raise UsageError(f"{path} is damaged (invalid JSON: {_reason(err)}): {remedy}") from None
    if not isinstance(content, dict):
        raise UsageError(f"{path} is damaged (it holds a JSON {type(content).__name__}, expected an object of "
                         f"results): {remedy}")
    return renamed(content)


def renamed(summary: dict[str, Any]) -> dict[str, Any]:
    """A summary with the keys older runs wrote under other names (``RENAMED_KEYS``) under their names now."""
    summary = dict(summary)
    for old, new in RENAMED_KEYS.items():
        if old in summary and new not in summary:
            summary[new] = summary.pop(old)
    return summary


def write_dt_history(path: str | Path, steps: np.ndarray, dt: np.ndarray, layers: list[str],
                     channels: list[int]) -> None:
    """dt_history.npz: steps (S,), dt (S, C) with the layers' channels side by side, layers (names), channels
    (each layer's channel count, in order)."""
    files.save_npz(path, steps=np.asarray(steps, dtype=np.int64), dt=np.asarray(dt, dtype=np.float64),
                   layers=np.asarray(layers, dtype=str), channels=np.asarray(channels, dtype=np.int64))


def read_dt_history(path: str | Path) -> dict[str, np.ndarray]:
    """A dt_history.npz's arrays; a damaged, truncated or incomplete file is a UsageError naming it."""
    path = Path(path)
    remedy = ("fit the run again to rewrite it (`primacy fit` writes it at the end), or delete it to leave the "
              "Δt figures out")
    history = read_npz(path, ("steps", "dt", "layers", "channels"), (), remedy)
    steps, dt = history["steps"], history["dt"]
    if steps.ndim != 1 or dt.ndim != 2 or len(steps) != len(dt) or not len(steps):
        raise UsageError(f"{path} has steps of shape {steps.shape} and dt of shape {dt.shape}, expected (S,) and "
                         f"(S, channels) with S >= 1: {remedy}")
    return history
