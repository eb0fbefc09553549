"""StudyQueryResults: the study x query accuracy matrix (``primacy.metrics.StudyQueryAccuracy``) of memory verification,
delayed reconstruction and associative recall: a run's summary.json, accuracy.npz, long-format tables and heatmaps
(``primacy.rundir.results``), and the mean and standard error over seeds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from primacy import figures, files
from primacy.analysis.behaviour.comparison import mean_and_se
from primacy.errors import UsageError
from primacy.rundir import results
from primacy.rundir.kinds.base import ResultKind, curve_entry, missing_results, scalar_entry, write_summary
from primacy.rundir.layout import ACCURACY_ARRAYS, RunDir

ARRAYS = ACCURACY_ARRAYS


class StudyQueryResults(ResultKind):
    """A run's results/: summary.json, accuracy.npz, <task>.csv (verification.csv, reconstruction.csv, recall.csv),
    contiguity.csv, heatmap and contiguity figures (raw and controlled contiguity), and for a task with delays
    delays.csv and delay_heatmap (the serial-position curve by delay, which is also forward reconstruction's heatmap:
    its study x query matrix is a diagonal). After each validation, the heatmap of the validation sets."""

    files = (ARRAYS,)
    headline = ("overall_accuracy", "early_minus_late")
    draws_validation = True

    def write(self, out: Path, collected: dict[str, Any], logged: dict[str, float], settings: dict[str, Any],
              subject: str) -> dict[str, Any]:
        return results.write(out, collected, settings)

    def figures(self, collected: dict[str, Any], summary: dict[str, Any],
                settings: dict[str, Any]) -> dict[str, Figure]:
        drawn = {"heatmap": _heatmap(collected, summary, settings)}
        if "serial_position_by_delay" in collected:
            drawn["delay_heatmap"] = _heatmap(collected, summary, settings, by_delay=True)
        title = f"contiguity · {figures.style.describe(settings)}"
        curves = (np.asarray(collected[k])
                  for k in ("contiguity_lags", "contiguity_curve", "controlled_contiguity_curve"))
        drawn["contiguity"] = figures.accuracy.contiguity(*curves, title)
        return drawn

    def validation_figure(self, collected: dict[str, Any], settings: dict[str, Any], caption: str) -> Figure:
        return _heatmap(collected, results.summary(collected, settings), settings, caption)

    def read(self, run: RunDir) -> dict[str, Any]:
        if not run.summary.is_file() or not (run.results / ARRAYS).is_file():
            raise missing_results(run, self)
        return results.read(run.results)

    def check_together(self, runs: list[RunDir], loaded: list[dict[str, Any]]) -> None:
        first, expected = runs[0].path, loaded[0]
        for run, result in zip(runs[1:], loaded[1:]):
            # A summary without n_items would let runs of different lengths through to np.stack.
            shape, expected_shape = tuple(result["matrix"].shape), tuple(expected["matrix"].shape)
            if shape != expected_shape:
                raise UsageError(f"run {run.path} has a {shape} accuracy matrix, {first} a {expected_shape} one: only "
                                 "runs that differ by seed aggregate")
            delays, expected_delays = _delays(result), _delays(expected)
            if delays != expected_delays:
                raise UsageError(f"run {run.path} was tested {_delay_text(delays)}, {first} "
                                 f"{_delay_text(expected_delays)}: only runs that differ by seed aggregate")

    def aggregate(self, runs: list[RunDir], loaded: list[dict[str, Any]], settings: dict[str, Any], out: Path,
                  dpi: int) -> dict[str, Any]:
        """accuracy.npz, summary.json, heatmap.png/.pdf and contiguity.png/.pdf of the runs.

        The recognition-contiguity curve is aggregated (``contiguity_curve`` and ``contiguity_lags`` in the summary,
        ``contiguity_curves``, ``contiguity_mean``, ``contiguity_se`` in accuracy.npz, contiguity.png/.pdf) when
        every run has it, and so is the controlled one (``controlled_contiguity_curve``;
        ``controlled_contiguity_curves``, ``controlled_contiguity_mean``, ``controlled_contiguity_se``); runs written
        before either existed leave it out.

        Runs of a task with delays (reconstruction; all at the same delays, which ``check_together`` checks) also
        give ``delays``, ``serial_position_by_delay`` (mean and se per (delay, study position) cell) and
        ``early_minus_late_by_delay`` (mean, se and the runs' values per delay) in the summary, ``delays``,
        ``serial_position_by_delay_curves`` (R, D, L), ``serial_position_by_delay_mean``,
        ``serial_position_by_delay_se`` (D, L) and ``early_minus_late_by_delay_values`` (R, D), ``_mean``, ``_se``
        (D) in accuracy.npz, and delay_heatmap.png/.pdf, the mean curves by delay; for condition ``forward``
        heatmap.png/.pdf is that figure too, as a run's is (its study x query matrix is only a diagonal).
        """
        matrices = np.stack([np.asarray(r["matrix"]) for r in loaded])  # R L L
        distractors = np.stack([np.asarray(r["distractor_accuracy_by_query"]) for r in loaded])  # R L
        matrix_mean, matrix_se = mean_and_se(matrices)
        distractor_mean, distractor_se = mean_and_se(distractors)
        arrays = {"matrices": matrices, "matrix_mean": matrix_mean, "matrix_se": matrix_se,
                  "distractor_accuracy": distractors, "distractor_mean": distractor_mean,
                  "distractor_se": distractor_se}
        curve_keys = results.CURVE_KEYS
        for key, name in (("contiguity_curve", "contiguity"), ("controlled_contiguity_curve", "controlled_contiguity")):
            if all(key in r for r in loaded):
                curve_keys += (key,)
                curves = np.stack([np.asarray(r[key], dtype=float) for r in loaded])  # R 2L-1
                arrays[f"{name}_curves"] = curves
                arrays[f"{name}_mean"], arrays[f"{name}_se"] = mean_and_se(curves)
        delays = _delays(loaded[0])  # the same for every run (check_together)
        if delays is not None:
            by_delay = np.stack([np.asarray(r["serial_position_by_delay"], dtype=float) for r in loaded])  # R D L
            indices = np.stack([np.asarray(r["early_minus_late_by_delay"], dtype=float) for r in loaded])  # R D
            arrays["delays"] = np.asarray(delays, dtype=np.int64)
            arrays["serial_position_by_delay_curves"] = by_delay
            arrays["serial_position_by_delay_mean"], arrays["serial_position_by_delay_se"] = mean_and_se(by_delay)
            arrays["early_minus_late_by_delay_values"] = indices
            arrays["early_minus_late_by_delay_mean"], arrays["early_minus_late_by_delay_se"] = mean_and_se(indices)
        files.save_npz(out / ARRAYS, **arrays)

        summary: dict[str, Any] = self.aggregate_header(runs)
        for key in results.SCALAR_KEYS:
            summary[key] = scalar_entry(np.array([r[key] for r in loaded], dtype=float))  # R
        for key in curve_keys:
            summary[key] = curve_entry(*mean_and_se(np.stack([np.asarray(r[key], dtype=float) for r in loaded])))
        if "contiguity_curve" in curve_keys:
            summary["contiguity_lags"] = [int(d) for d in loaded[0]["contiguity_lags"]]
        if delays is not None:
            summary["delays"] = delays
            summary["serial_position_by_delay"] = {
                "mean": [[files.plain(v) for v in row] for row in arrays["serial_position_by_delay_mean"]],
                "se": [[files.plain(v) for v in row] for row in arrays["serial_position_by_delay_se"]]}
            summary["early_minus_late_by_delay"] = {
                "mean": [files.plain(v) for v in arrays["early_minus_late_by_delay_mean"]],
                "se": [files.plain(v) for v in arrays["early_minus_late_by_delay_se"]],
                "values": [[files.plain(v) for v in row] for row in arrays["early_minus_late_by_delay_values"]]}
        summary["settings"] = settings
        write_summary(out, summary)

        s = summary["settings"]
        title = (f"{figures.style.describe(s)} · mean of {len(loaded)} runs\n"
                 f"accuracy {figures.style.fixed(summary['overall_accuracy']['mean'], '.3f')} · "
                 f"early−late {figures.style.fixed(summary['early_minus_late']['mean'], '+.3f')} ± "
                 f"{figures.style.fixed(summary['early_minus_late']['se'] or 0, '.3f')}")
        label = figures.style.distractor_label(s["task"])
        drawers = {"heatmap": lambda: figures.accuracy.heatmap(matrix_mean, distractor_mean, title,
                                                               distractor_label=label)}
        if delays is not None:
            curves, curves_se = arrays["serial_position_by_delay_mean"], arrays["serial_position_by_delay_se"]
            drawers["delay_heatmap"] = lambda: figures.accuracy.delay_heatmap(np.asarray(delays), curves, title,
                                                                              curves_se)
            if s["condition"] == "forward":  # its study x query matrix is only a diagonal: the curves by delay say more
                drawers["heatmap"] = drawers["delay_heatmap"]
        for name, draw in drawers.items():
            figures.save(draw(), out / name, dpi=dpi)

        if "contiguity_mean" in arrays:
            controlled = "controlled_contiguity_mean" in arrays
            fig = figures.accuracy.contiguity(np.asarray(summary["contiguity_lags"]), arrays["contiguity_mean"],
                                              arrays["controlled_contiguity_mean"] if controlled else None,
                                              f"recognition contiguity · {title.splitlines()[0]}",
                                              arrays["contiguity_se"],
                                              arrays["controlled_contiguity_se"] if controlled else None)
            figures.save(fig, out / "contiguity", dpi=dpi)
        return summary



    def mean_matrix(self, out: Path) -> tuple[np.ndarray, np.ndarray]:
        """An aggregate's mean accuracy matrix (L, L) and mean distractor accuracy by query position (L,)."""
        with np.load(out / ARRAYS) as arrays:
            return arrays["matrix_mean"], arrays["distractor_mean"]


def _heatmap(result: dict[str, Any], summary: dict[str, Any], settings: dict[str, Any], stage: str = "test",
             by_delay: bool = False) -> Figure:
    """The Fig. 3 heatmap, or with ``by_delay`` the serial-position curve by delay, which is also the heatmap of
    forward reconstruction (its study x query matrix is only a diagonal)."""
    title = (f"{figures.style.describe(settings)} · {summary['n_sets']} sets ({stage})\n"
             f"accuracy {summary['overall_accuracy']:.3f} · early−late {summary['early_minus_late']:+.3f}")
    if by_delay or (settings["condition"] == "forward" and "serial_position_by_delay" in result):
        return figures.accuracy.delay_heatmap(np.asarray(result["delays"]),
                                              np.asarray(result["serial_position_by_delay"]), title)
    matrix, distractor = np.asarray(result["matrix"]), np.asarray(result["distractor_accuracy_by_query"])
    return figures.accuracy.heatmap(matrix, distractor, title,
                                    distractor_label=figures.style.distractor_label(settings.get("task")))


def _delays(result: dict[str, Any]) -> list[int] | None:
    """The delays a run's test used (``results.read``'s dict), None for a task without delays."""
    return [int(d) for d in result["delays"]] if "serial_position_by_delay" in result else None


def _delay_text(delays: list[int] | None) -> str:
    return "without delays" if delays is None else f"at delays {delays}"
