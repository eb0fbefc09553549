"""Aggregate runs that differ only by seed: mean and standard error of the accuracy matrix, summary and
recognition-contiguity curves (raw and controlled), for a task with delays (reconstruction) the serial-position curve
by delay, the mean heatmap and contiguity figure; for free recall the mean and standard error of its rates and curves,
the runs' lists pooled for psifr, the CMR fits and the figure of the mean curves; and every run's initial and final Δt
distribution on one figure (Fig. 5)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from primacy import figures, files
from primacy.analysis.comparison import mean_and_se
from primacy.checks import writable_directory
from primacy.errors import UsageError
from primacy.rundir import results
from primacy.rundir.free_recall import read_free_recall
from primacy.tasks.free_recall import FreeRecallTask

SEED_KEYS = ("seed",)  # settings allowed to differ between aggregated runs
FREE_RECALL_SCALARS = ("mean_recalled", "intrusion_rate", "repetition_rate",
                       "primacy_index", "recency_index", "early_minus_late")
CMR_FIT_NUMBERS = ("distance", "beta_enc", "beta_rec", "gamma_ft", "inv_temperature")  # of each run's own fit
# summary.json key of each free-recall curve -> the prefix of its arrays in the aggregate's free_recall.npz
FREE_RECALL_CURVES = {"serial_position_curve": "serial_position", "first_recall_curve": "first_recall",
                      "lag_crp": "lag_crp"}


def _comparable(summary: dict[str, Any]) -> dict[str, Any]:
    """The settings that must agree between aggregated runs. A summary without ``task`` (written before there were
    other tasks) is a verification run's."""
    data = summary.get("data_args")
    if isinstance(data, dict):
        data = {k: v for k, v in data.items() if k not in SEED_KEYS}
    keys = ("condition", "n_items", "vocab_size", "backbone", "backbone_args", "model_args")
    return {"task": summary.get("task") or "verification", **{k: summary.get(k) for k in keys}, "data_args": data}


def _first_difference(a: dict[str, Any], b: dict[str, Any], prefix: str = "") -> str | None:
    for key in sorted(set(a) | set(b), key=lambda k: (k != "task", k)):  # a different task first: it says most
        x, y = a.get(key), b.get(key)
        if isinstance(x, dict) and isinstance(y, dict):
            found = _first_difference(x, y, f"{prefix}{key}.")
            if found:
                return found
        elif x != y:
            return f"{prefix}{key} ({x!r} vs {y!r})"
    return None


def load_runs(run_dirs: list[Path]) -> list[dict[str, Any]]:
    """Each run's results (``results.read``), after checking that they exist and share their settings."""
    if not run_dirs:
        raise UsageError("no run directories given: pass at least one RUN_DIR")
    runs = []
    for run in run_dirs:
        out = Path(run) / "results"
        if not Path(run).is_dir():
            raise UsageError(f"run directory {run} does not exist: give directories that `primacy fit` made")
        if (out / "free_recall.npz").is_file():
            runs.append(read_free_recall(out))
            continue
        if not (out / "summary.json").is_file() or not (out / "accuracy.npz").is_file():
            raise UsageError(f"run directory {run} has no results/summary.json and accuracy.npz (or "
                             "free_recall.npz): test it first")
        runs.append(results.read(out))
    reference = _comparable(runs[0]["summary"])
    for run, loaded in zip(run_dirs[1:], runs[1:]):
        diff = _first_difference(reference, _comparable(loaded["summary"]))
        if diff:
            raise UsageError(f"run {run} differs from {run_dirs[0]} in {diff}: only runs that differ by seed aggregate")
        if _is_free_recall(loaded) != _is_free_recall(runs[0]):  # a summary that names the wrong task
            kinds = [_result_file(r) for r in (loaded, runs[0])]
            raise UsageError(f"run {run} has {kinds[0]}, {run_dirs[0]} {kinds[1]}: only runs of one task aggregate")
        if _is_free_recall(loaded):
            _check_free_recall_pair(run, loaded, run_dirs[0], runs[0])
            continue
        # A summary without n_items would let runs of different lengths through to np.stack.
        shape, expected = tuple(loaded["matrix"].shape), tuple(runs[0]["matrix"].shape)
        if shape != expected:
            raise UsageError(f"run {run} has a {shape} accuracy matrix, {run_dirs[0]} a {expected} one: only runs "
                             "that differ by seed aggregate")
        delays, expected_delays = _delays(loaded), _delays(runs[0])
        if delays != expected_delays:
            raise UsageError(f"run {run} was tested {_delay_text(delays)}, {run_dirs[0]} "
                             f"{_delay_text(expected_delays)}: only runs that differ by seed aggregate")
    if _is_free_recall(runs[0]):
        _check_distinct_subjects(run_dirs, runs)
    return runs


def _delays(run: dict[str, Any]) -> list[int] | None:
    """The delays a run's test used (``results.read``'s dict), None for a task without delays."""
    return [int(d) for d in run["delays"]] if "serial_position_by_delay" in run else None


def _delay_text(delays: list[int] | None) -> str:
    return "without delays" if delays is None else f"at delays {delays}"


def aggregate(run_dirs: list[str | Path], out_dir: str | Path, dpi: int = 150) -> dict[str, Any]:
    """Write summary.json, accuracy.npz, heatmap.png/.pdf and (if the runs recorded Δt) dt_histograms.png.

    The recognition-contiguity curve is aggregated (``contiguity_curve`` and ``contiguity_lags`` in the summary,
    ``contiguity_curves``, ``contiguity_mean``, ``contiguity_se`` in accuracy.npz, contiguity.png/.pdf) when every
    run has it, and so is the controlled one (``controlled_contiguity_curve``; ``controlled_contiguity_curves``,
    ``controlled_contiguity_mean``, ``controlled_contiguity_se``); runs written before either existed leave it out.

    Runs of a task with delays (reconstruction; all runs at the same delays, which ``load_runs`` checks) also give
    ``delays``, ``serial_position_by_delay`` (mean and se per (delay, study position) cell) and
    ``early_minus_late_by_delay`` (mean, se and the runs' values per delay) in the summary, ``delays``,
    ``serial_position_by_delay_curves`` (R, D, L), ``serial_position_by_delay_mean``, ``serial_position_by_delay_se``
    (D, L) and ``early_minus_late_by_delay_values`` (R, D), ``_mean``, ``_se`` (D) in accuracy.npz, and
    delay_heatmap.png/.pdf, the mean curves by delay; for condition ``forward`` heatmap.png/.pdf is that figure too,
    as a run's is (its study x query matrix is only a diagonal).

    Free-recall runs give summary.json, free_recall.npz, free_recall.csv and free_recall.png/.pdf instead
    (``_aggregate_free_recall``).
    """
    run_dirs = [Path(r) for r in run_dirs]
    out = Path(out_dir)
    writable_directory("out", out)  # before any work
    runs = load_runs(run_dirs)
    histories = _dt_histories(run_dirs)  # read before anything is written, so damage there leaves no half result
    out.mkdir(parents=True, exist_ok=True)
    if _is_free_recall(runs[0]):  # every run is then (load_runs)
        summary = _aggregate_free_recall(run_dirs, runs, out, dpi)
    else:
        summary = _aggregate_accuracy(run_dirs, runs, out, dpi)
    if histories:
        figures.save(figures.dt.dt_histograms(histories, [r.name for r in run_dirs]), out / "dt_histograms", ["png"],
                     dpi)
    return summary


def _aggregate_accuracy(run_dirs: list[Path], runs: list[dict[str, Any]], out: Path, dpi: int) -> dict[str, Any]:
    """accuracy.npz, summary.json and the figures of runs with a study x query accuracy matrix (``aggregate``
    describes them); returns the summary."""
    matrices = np.stack([np.asarray(r["matrix"]) for r in runs])  # R L L
    distractors = np.stack([np.asarray(r["distractor_accuracy_by_query"]) for r in runs])  # R L
    matrix_mean, matrix_se = mean_and_se(matrices)
    distractor_mean, distractor_se = mean_and_se(distractors)
    arrays = {"matrices": matrices, "matrix_mean": matrix_mean, "matrix_se": matrix_se,
              "distractor_accuracy": distractors, "distractor_mean": distractor_mean, "distractor_se": distractor_se}
    curve_keys = results.CURVE_KEYS
    for key, name in (("contiguity_curve", "contiguity"), ("controlled_contiguity_curve", "controlled_contiguity")):
        if all(key in r for r in runs):
            curve_keys += (key,)
            curves = np.stack([np.asarray(r[key], dtype=float) for r in runs])  # R 2L-1
            arrays[f"{name}_curves"] = curves
            arrays[f"{name}_mean"], arrays[f"{name}_se"] = mean_and_se(curves)
    delays = _delays(runs[0])  # the same for every run (load_runs)
    if delays is not None:
        by_delay = np.stack([np.asarray(r["serial_position_by_delay"], dtype=float) for r in runs])  # R D L
        indices = np.stack([np.asarray(r["early_minus_late_by_delay"], dtype=float) for r in runs])  # R D
        arrays["delays"] = np.asarray(delays, dtype=np.int64)
        arrays["serial_position_by_delay_curves"] = by_delay
        arrays["serial_position_by_delay_mean"], arrays["serial_position_by_delay_se"] = mean_and_se(by_delay)
        arrays["early_minus_late_by_delay_values"] = indices
        arrays["early_minus_late_by_delay_mean"], arrays["early_minus_late_by_delay_se"] = mean_and_se(indices)
    files.save_npz(out / "accuracy.npz", **arrays)

    summary: dict[str, Any] = {"n_runs": len(runs), "runs": [str(r) for r in run_dirs]}
    for key in results.SCALAR_KEYS:
        summary[key] = _scalar_entry(np.array([r[key] for r in runs], dtype=float))  # R
    for key in curve_keys:
        summary[key] = _curve_entry(*mean_and_se(np.stack([np.asarray(r[key], dtype=float) for r in runs])))
    if "contiguity_curve" in curve_keys:
        summary["contiguity_lags"] = [int(d) for d in runs[0]["contiguity_lags"]]
    if delays is not None:
        summary["delays"] = delays
        summary["serial_position_by_delay"] = {
            "mean": [[files.plain(v) for v in row] for row in arrays["serial_position_by_delay_mean"]],
            "se": [[files.plain(v) for v in row] for row in arrays["serial_position_by_delay_se"]]}
        summary["early_minus_late_by_delay"] = {
            "mean": [files.plain(v) for v in arrays["early_minus_late_by_delay_mean"]],
            "se": [files.plain(v) for v in arrays["early_minus_late_by_delay_se"]],
            "values": [[files.plain(v) for v in row] for row in arrays["early_minus_late_by_delay_values"]]}
    summary["settings"] = _comparable(runs[0]["summary"])
    files.write_json(out / "summary.json", summary)

    s = summary["settings"]
    title = (f"{figures.style.describe(s)} · mean of {len(runs)} runs\n"
             f"accuracy {figures.style.fixed(summary['overall_accuracy']['mean'], '.3f')} · "
             f"early−late {figures.style.fixed(summary['early_minus_late']['mean'], '+.3f')} ± "
             f"{figures.style.fixed(summary['early_minus_late']['se'] or 0, '.3f')}")
    drawers = {"heatmap": lambda: figures.accuracy.heatmap(matrix_mean, distractor_mean, title,
                                                           distractor_label=figures.style.distractor_label(s["task"]))}
    if delays is not None:
        curves, curves_se = arrays["serial_position_by_delay_mean"], arrays["serial_position_by_delay_se"]
        drawers["delay_heatmap"] = lambda: figures.accuracy.delay_heatmap(np.asarray(delays), curves, title, curves_se)
        if s["condition"] == "forward":  # its study x query matrix is only a diagonal: the curves by delay say more
            drawers["heatmap"] = drawers["delay_heatmap"]
    for name, draw in drawers.items():
        figures.save(draw(), out / name, dpi=dpi)

    if "contiguity_mean" in arrays:
        controlled = "controlled_contiguity_mean" in arrays
        fig = figures.accuracy.contiguity(np.asarray(summary["contiguity_lags"]), arrays["contiguity_mean"],
                                          arrays["controlled_contiguity_mean"] if controlled else None,
                                          f"recognition contiguity · {title.splitlines()[0]}", arrays["contiguity_se"],
                                          arrays["controlled_contiguity_se"] if controlled else None)
        figures.save(fig, out / "contiguity", dpi=dpi)
    return summary


def _aggregate_free_recall(run_dirs: list[Path], runs: list[dict[str, Any]], out: Path, dpi: int) -> dict[str, Any]:
    """free_recall.npz, free_recall.csv, summary.json and free_recall.png/.pdf of free-recall runs; returns the summary.

    summary.json: ``n_runs``, ``runs``, ``subjects`` (each run's subject in the pooled csv, in the order of ``runs``),
    ``task``, for each of ``FREE_RECALL_SCALARS`` its ``mean``, ``se`` and the runs' ``values``, for each curve of
    ``FREE_RECALL_CURVES`` its ``mean`` and ``se`` by study position (``lag_crp``: by lag, ``lag_crp_lags``), and the
    ``settings``. The runs' values are recomputed from their free_recall.npz counts. A curve's mean at a position or
    lag is over the runs that have a value there (as pandas averages psifr's per-subject curves, skipping NaN): null
    only where no run has one, as at lag 0, never possible; its se is null where fewer than two runs have one.
    ``cmr_fit`` is the CMR fit of the mean lag-CRP (``results.cmr_fit_entry``); ``cmr_fit_runs`` holds, for each
    variant, the ``mean``, ``se`` and ``values`` of every run's own fit (distance, parameters, inverse temperature;
    null for a run without a fit).

    free_recall.npz: ``<prefix>_curves`` (R, L; lag_crp (R, 2L - 1), NaN where a run has no value), ``<prefix>_mean``
    and ``<prefix>_se`` for each prefix of ``FREE_RECALL_CURVES``, and ``lag_crp_lags`` (2L - 1).

    free_recall.csv: every run's rows, run after run, under one header, each keeping its own subject; the subjects
    are distinct (``load_runs``), so psifr reads the pooled file as one subject per run.

    free_recall.png/.pdf: the mean curves with standard-error bands and the fits of the mean lag-CRP.
    """
    summary: dict[str, Any] = {"n_runs": len(runs), "runs": [str(r) for r in run_dirs],
                               "subjects": [r["subject"] for r in runs], "task": FreeRecallTask.name}
    for key in FREE_RECALL_SCALARS:
        summary[key] = _scalar_entry(np.array([r[key] for r in runs], dtype=float))  # R
    arrays = {}
    for key, prefix in FREE_RECALL_CURVES.items():
        curves = np.stack([r[key] for r in runs])  # R L (lag_crp: R 2L-1)
        mean, se = mean_and_se(curves)
        arrays.update({f"{prefix}_curves": curves, f"{prefix}_mean": mean, f"{prefix}_se": se})
        summary[key] = _curve_entry(mean, se)
    arrays["lag_crp_lags"] = runs[0]["lag_crp_lags"]  # the same for every run: their lists have one length
    summary["lag_crp_lags"] = [int(k) for k in arrays["lag_crp_lags"]]
    summary["cmr_fit"] = results.cmr_fit_entry(arrays["lag_crp_mean"], arrays["lag_crp_lags"])
    own_fits = [results.cmr_fit_entry(r["lag_crp"], r["lag_crp_lags"]) for r in runs]
    summary["cmr_fit_runs"] = _cmr_fits_over_runs(own_fits)
    summary["settings"] = _comparable(runs[0]["summary"])
    files.save_npz(out / "free_recall.npz", **arrays)
    header = runs[0]["header"]  # the same for every run (load_runs)
    files.write_csv(out / "free_recall.csv", [dict(zip(header, row)) for run in runs for row in run["rows"]])
    files.write_json(out / "summary.json", summary)
    _draw_free_recall(summary, arrays, out, dpi)
    return summary


def _cmr_fits_over_runs(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """For each CMR variant, the mean, se and values over runs of each number of their fits (``cmr_fit_entry``s)."""
    over_runs = {}
    for variant in (key for key in entries[0] if key != "lags"):
        fits = [entry[variant] for entry in entries]
        over_runs[variant] = {key: _scalar_entry(np.array([np.nan if f is None else f[key] for f in fits]))
                              for key in CMR_FIT_NUMBERS}
    return over_runs


def _draw_free_recall(summary: dict[str, Any], arrays: dict[str, np.ndarray], out: Path, dpi: int) -> None:
    settings = summary["settings"]
    recalled, intrusions, repetitions = (summary[k] for k in ("mean_recalled", "intrusion_rate", "repetition_rate"))
    title = (f"{figures.style.describe(settings)} · mean of {summary['n_runs']} runs\n" +
             figures.style.recall_line(settings["n_items"], recalled["mean"], intrusions["mean"], repetitions["mean"],
                                       recalled["se"]))
    se = {"spc": arrays["serial_position_se"], "pfr": arrays["first_recall_se"], "lag_crp": arrays["lag_crp_se"]}
    fig = figures.free_recall.free_recall(arrays["serial_position_mean"], arrays["first_recall_mean"],
                                          arrays["lag_crp_lags"], arrays["lag_crp_mean"], title,
                                          figures.free_recall.cmr_overlays(summary["cmr_fit"]), se)
    figures.save(fig, out / "free_recall", dpi=dpi)


def _is_free_recall(run: dict[str, Any]) -> bool:
    """Whether ``run`` (from ``load_runs``) is a free-recall run's results rather than an accuracy matrix's."""
    return "lag_crp" in run


def _result_file(run: dict[str, Any]) -> str:
    return "free_recall.npz" if _is_free_recall(run) else "accuracy.npz"


def _check_free_recall_pair(run: Path, loaded: dict[str, Any], reference: Path, expected: dict[str, Any]) -> None:
    """Refuses a free-recall run whose lists have another length, or whose free_recall.csv has other columns, than
    the first run's (``load_runs``), which would not stack or pool."""
    n, expected_n = len(loaded["serial_position_curve"]), len(expected["serial_position_curve"])
    if n != expected_n:
        raise UsageError(f"run {run} has lists of {n} items, {reference} of {expected_n}: only runs that differ by "
                         "seed aggregate")
    if loaded["header"] != expected["header"]:
        raise UsageError(f"run {run} has free_recall.csv columns {loaded['header']}, {reference} "
                         f"{expected['header']}: re-test the older run so that both have the same")


def _check_distinct_subjects(run_dirs: list[Path], runs: list[dict[str, Any]]) -> None:
    """Refuses two runs with one subject (their directories' name) in free_recall.csv: psifr would read the pooled
    file's lists of both as one subject's. Refused rather than renamed, so that a subject in the pooled file is the
    one in its run's own free_recall.csv."""
    seen: dict[str, Path] = {}
    for run, loaded in zip(run_dirs, runs):
        subject = loaded["subject"]
        if subject in seen:
            raise UsageError(f"runs {seen[subject]} and {run} have the same subject {subject!r} in free_recall.csv "
                             "(the name of the run directory): psifr would pool their lists as one subject's; "
                             "aggregate runs whose directories have different names")
        seen[subject] = run


def _scalar_entry(values: np.ndarray) -> dict[str, Any]:
    """A scalar's summary entry from its value in each run (R,): mean, se and the values, null for NaN."""
    mean, se = mean_and_se(values)
    return {"mean": files.plain(mean), "se": files.plain(se), "values": [files.plain(v) for v in values]}


def _curve_entry(mean: np.ndarray, se: np.ndarray) -> dict[str, Any]:
    """A curve's summary entry: its mean and se by position, null for NaN."""
    return {"mean": [files.plain(v) for v in mean], "se": [files.plain(v) for v in se]}


def _dt_histories(run_dirs: list[Path]) -> list[dict[str, np.ndarray]]:
    """Every run's Δt history, or none when any run lacks one (its backbone has no Δt)."""
    paths = [r / "results" / "dt_history.npz" for r in run_dirs]
    return [results.read_dt_history(p) for p in paths] if all(p.is_file() for p in paths) else []


