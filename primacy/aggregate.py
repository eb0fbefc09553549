"""Aggregate runs that differ only by seed: mean and standard error of the accuracy matrix, summary and
recognition-contiguity curves (raw and controlled), for a task with delays (reconstruction) the serial-position curve
by delay, the mean heatmap and contiguity figure, and every run's initial and final Δt distribution on one figure
(Fig. 5)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np

from primacy import files, plots, results
from primacy.checks import writable_directory
from primacy.errors import UsageError

SEED_KEYS = ("seed",)  # settings allowed to differ between aggregated runs


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
        if not (out / "summary.json").is_file() or not (out / "accuracy.npz").is_file():
            raise UsageError(f"run directory {run} has no results/summary.json and accuracy.npz: test it first")
        runs.append(results.read(out))
    reference = _comparable(runs[0]["summary"])
    for run, loaded in zip(run_dirs[1:], runs[1:]):
        diff = _first_difference(reference, _comparable(loaded["summary"]))
        if diff:
            raise UsageError(f"run {run} differs from {run_dirs[0]} in {diff}: only runs that differ by seed aggregate")
        # A summary without n_items would let runs of different lengths through to np.stack.
        shape, expected = tuple(loaded["matrix"].shape), tuple(runs[0]["matrix"].shape)
        if shape != expected:
            raise UsageError(f"run {run} has a {shape} accuracy matrix, {run_dirs[0]} a {expected} one: only runs "
                             "that differ by seed aggregate")
        delays, expected_delays = _delays(loaded), _delays(runs[0])
        if delays != expected_delays:
            raise UsageError(f"run {run} was tested {_delay_text(delays)}, {run_dirs[0]} "
                             f"{_delay_text(expected_delays)}: only runs that differ by seed aggregate")
    return runs


def _delays(run: dict[str, Any]) -> list[int] | None:
    """The delays a run's test used (``results.read``'s dict), None for a task without delays."""
    return [int(d) for d in run["delays"]] if "serial_position_by_delay" in run else None


def _delay_text(delays: list[int] | None) -> str:
    return "without delays" if delays is None else f"at delays {delays}"


def _mean_se(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard error over the first axis, over the runs that have a value (not NaN) there: a
    contiguity lag that one seed never tested is averaged over the others. SE is NaN with fewer than two
    values, the mean NaN with none."""
    values = np.asarray(values, dtype=float)
    seen = ~np.isnan(values)
    n = seen.sum(axis=0)
    mean = np.where(seen, values, 0.0).sum(axis=0) / np.where(n > 0, n, np.nan)
    squares = np.where(seen, (values - mean) ** 2, 0.0).sum(axis=0)
    se = np.sqrt(squares / np.where(n > 1, n - 1, np.nan)) / np.sqrt(np.where(n > 1, n, np.nan))
    return mean, se


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
    """
    run_dirs = [Path(r) for r in run_dirs]
    out = Path(out_dir)
    writable_directory("out", out)  # before any work
    runs = load_runs(run_dirs)
    histories = _dt_histories(run_dirs)  # read before anything is written, so damage there leaves no half result
    out.mkdir(parents=True, exist_ok=True)
    matrices = np.stack([np.asarray(r["matrix"]) for r in runs])  # R L L
    distractors = np.stack([np.asarray(r["distractor_accuracy_by_query"]) for r in runs])  # R L
    matrix_mean, matrix_se = _mean_se(matrices)
    distractor_mean, distractor_se = _mean_se(distractors)
    arrays = {"matrices": matrices, "matrix_mean": matrix_mean, "matrix_se": matrix_se,
              "distractor_accuracy": distractors, "distractor_mean": distractor_mean, "distractor_se": distractor_se}
    curve_keys = results.CURVE_KEYS
    for key, name in (("contiguity_curve", "contiguity"), ("controlled_contiguity_curve", "controlled_contiguity")):
        if all(key in r for r in runs):
            curve_keys += (key,)
            curves = np.stack([np.asarray(r[key], dtype=float) for r in runs])  # R 2L-1
            arrays[f"{name}_curves"] = curves
            arrays[f"{name}_mean"], arrays[f"{name}_se"] = _mean_se(curves)
    delays = _delays(runs[0])  # the same for every run (load_runs)
    if delays is not None:
        by_delay = np.stack([np.asarray(r["serial_position_by_delay"], dtype=float) for r in runs])  # R D L
        indices = np.stack([np.asarray(r["early_minus_late_by_delay"], dtype=float) for r in runs])  # R D
        arrays["delays"] = np.asarray(delays, dtype=np.int64)
        arrays["serial_position_by_delay_curves"] = by_delay
        arrays["serial_position_by_delay_mean"], arrays["serial_position_by_delay_se"] = _mean_se(by_delay)
        arrays["early_minus_late_by_delay_values"] = indices
        arrays["early_minus_late_by_delay_mean"], arrays["early_minus_late_by_delay_se"] = _mean_se(indices)
    files.save_npz(out / "accuracy.npz", **arrays)

    summary: dict[str, Any] = {"n_runs": len(runs), "runs": [str(r) for r in run_dirs]}
    for key in results.SCALAR_KEYS:
        values = np.array([r[key] for r in runs], dtype=float)
        mean, se = _mean_se(values)
        summary[key] = {"mean": _num(mean), "se": _num(se), "values": [_num(v) for v in values]}
    for key in curve_keys:
        mean, se = _mean_se(np.stack([np.asarray(r[key], dtype=float) for r in runs]))
        summary[key] = {"mean": [_num(v) for v in mean], "se": [_num(v) for v in se]}
    if "contiguity_curve" in curve_keys:
        summary["contiguity_lags"] = [int(d) for d in runs[0]["contiguity_lags"]]
    if delays is not None:
        summary["delays"] = delays
        summary["serial_position_by_delay"] = {
            "mean": [[_num(v) for v in row] for row in arrays["serial_position_by_delay_mean"]],
            "se": [[_num(v) for v in row] for row in arrays["serial_position_by_delay_se"]]}
        summary["early_minus_late_by_delay"] = {
            "mean": [_num(v) for v in arrays["early_minus_late_by_delay_mean"]],
            "se": [_num(v) for v in arrays["early_minus_late_by_delay_se"]],
            "values": [[_num(v) for v in row] for row in arrays["early_minus_late_by_delay_values"]]}
    summary["settings"] = _comparable(runs[0]["summary"])
    files.write_text(out / "summary.json", json.dumps(summary, indent=2) + "\n")

    s = summary["settings"]
    title = (f"{plots.describe(s)} · mean of {len(runs)} runs\n"
             f"accuracy {_fixed(summary['overall_accuracy']['mean'], '.3f')} · "
             f"early−late {_fixed(summary['early_minus_late']['mean'], '+.3f')} ± "
             f"{_fixed(summary['early_minus_late']['se'] or 0, '.3f')}")
    figures = {"heatmap": lambda: plots.heatmap(matrix_mean, distractor_mean, title,
                                                distractor_label=plots.distractor_label(s["task"]))}
    if delays is not None:
        curves, curves_se = arrays["serial_position_by_delay_mean"], arrays["serial_position_by_delay_se"]
        figures["delay_heatmap"] = lambda: plots.delay_heatmap(np.asarray(delays), curves, title, curves_se)
        if s["condition"] == "forward":  # its study x query matrix is only a diagonal: the curves by delay say more
            figures["heatmap"] = figures["delay_heatmap"]
    for name, draw in figures.items():
        fig = draw()
        for fmt in ("png", "pdf"):
            files.save_figure(fig, out / f"{name}.{fmt}", dpi=dpi)
        plt.close(fig)

    if "contiguity_mean" in arrays:
        controlled = "controlled_contiguity_mean" in arrays
        fig = plots.contiguity(np.asarray(summary["contiguity_lags"]), arrays["contiguity_mean"],
                               arrays["controlled_contiguity_mean"] if controlled else None,
                               f"recognition contiguity · {title.splitlines()[0]}", arrays["contiguity_se"],
                               arrays["controlled_contiguity_se"] if controlled else None)
        for fmt in ("png", "pdf"):
            files.save_figure(fig, out / f"contiguity.{fmt}", dpi=dpi)
        plt.close(fig)

    if histories:
        fig = plots.dt_histograms(histories, [r.name for r in run_dirs])
        files.save_figure(fig, out / "dt_histograms.png", dpi=dpi)
        plt.close(fig)
    return summary


def _dt_histories(run_dirs: list[Path]) -> list[dict[str, np.ndarray]]:
    """Every run's Δt history, or none when any run lacks one (its backbone has no Δt)."""
    paths = [r / "results" / "dt_history.npz" for r in run_dirs]
    return [results.read_dt_history(p) for p in paths] if all(p.is_file() for p in paths) else []


def _num(x: float) -> float | None:
    return None if np.isnan(x) else float(x)


def _fixed(x: float | None, spec: str) -> str:
    """``x`` formatted for a title; "n/a" for an undefined (null) value, e.g. an index over untested positions."""
    return "n/a" if x is None else format(x, spec)
