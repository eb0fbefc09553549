"""FreeRecallResults: the free-recall counts and recall sequences of a model's test lists
(``primacy.metrics.FreeRecallStats``): a run's summary.json, free_recall.npz, free_recall.csv (the long format psifr
reads) and figure; over seeds the mean curves, the runs' lists pooled for psifr and the CMR fits."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
from matplotlib.figure import Figure

from primacy import figures, files
from primacy.analysis.behaviour.comparison import mean_and_se
from primacy.errors import UsageError
from primacy.rundir import results
from primacy.rundir.free_recall import read_free_recall
from primacy.rundir.kinds.base import ResultKind, curve_entry, missing_results, scalar_entry, write_summary
from primacy.rundir.layout import FREE_RECALL_ARRAYS, FREE_RECALL_TABLE, RunDir
from primacy.tasks.free_recall import FreeRecallTask

ARRAYS, TABLE = FREE_RECALL_ARRAYS, FREE_RECALL_TABLE
FREE_RECALL_SCALARS = ("mean_recalled", "intrusion_rate", "repetition_rate",
                       "primacy_index", "recency_index", "early_minus_late")
CMR_FIT_NUMBERS = ("distance", "beta_enc", "beta_rec", "gamma_ft", "inv_temperature")  # of each run's own fit
# summary.json key of each free-recall curve -> the prefix of its arrays in the aggregate's free_recall.npz
FREE_RECALL_CURVES = {"serial_position_curve": "serial_position", "first_recall_curve": "first_recall",
                      "lag_crp": "lag_crp"}


class FreeRecallResults(ResultKind):
    """A run's results/: summary.json, free_recall.npz (the counts and the recall sequences), free_recall.csv and
    free_recall.png/.pdf (serial-position, first-recall and lag-CRP curves, the CMR fits overlaid)."""

    files = (ARRAYS, TABLE)
    headline = ("mean_recalled", "early_minus_late")

    def collect(self, pl_module: L.LightningModule, stage: str) -> dict[str, Any]:
        """The counts, study lists and recalls (``FreeRecallStats.compute``, every list in test order) and the mean
        loss of ``stage``, read before the model resets it."""
        metric = pl_module.metric(stage)
        counts, study, recalls = metric.compute()  # syncs across processes
        return {"counts": counts, "study": study, "recalls": recalls, "forced": metric.forced_accuracy(),
                "loss": float(getattr(pl_module, f"{stage}_loss").compute())}

    def write(self, out: Path, collected: dict[str, Any], logged: dict[str, float], settings: dict[str, Any],
              subject: str) -> dict[str, Any]:
        return results.write_free_recall(out, collected["counts"], collected["study"], collected["recalls"],
                                         settings, subject, collected["loss"], collected.get("forced"))

    def figures(self, collected: dict[str, Any], summary: dict[str, Any],
                settings: dict[str, Any]) -> dict[str, Figure]:
        curves = (np.array(summary[k], dtype=float)  # null (never possible) -> NaN
                  for k in ("serial_position_curve", "first_recall_curve", "lag_crp_lags", "lag_crp"))
        title = (f"{figures.style.describe(settings)} · {summary['n_lists']} lists (test)\n" +
                 figures.style.recall_line(settings["n_items"], summary["mean_recalled"], summary["intrusion_rate"],
                                           summary["repetition_rate"]))
        overlays = figures.free_recall.cmr_overlays(summary["cmr_fit"])
        return {"free_recall": figures.free_recall.free_recall(*curves, title, overlays)}

    def read(self, run: RunDir) -> dict[str, Any]:
        if not (run.results / ARRAYS).is_file():
            raise missing_results(run, self)
        return read_free_recall(run.results)

    def check_together(self, runs: list[RunDir], loaded: list[dict[str, Any]]) -> None:
        """Refuses runs whose lists have another length, or whose free_recall.csv has other columns, than the first
        run's (they would not stack or pool), and two runs with one subject (their directories' name) in
        free_recall.csv: psifr would read the pooled file's lists of both as one subject's. Refused rather than
        renamed, so that a subject in the pooled file is the one in its run's own free_recall.csv."""
        first, expected = runs[0].path, loaded[0]
        for run, result in zip(runs[1:], loaded[1:]):
            n, expected_n = len(result["serial_position_curve"]), len(expected["serial_position_curve"])
            if n != expected_n:
                raise UsageError(f"run {run.path} has lists of {n} items, {first} of {expected_n}: only runs that "
                                 "differ by seed aggregate")
            if result["header"] != expected["header"]:
                raise UsageError(f"run {run.path} has {TABLE} columns {result['header']}, {first} "
                                 f"{expected['header']}: re-test the older run so that both have the same")
        seen: dict[str, Path] = {}
        for run, result in zip(runs, loaded):
            subject = result["subject"]
            if subject in seen:
                raise UsageError(f"runs {seen[subject]} and {run.path} have the same subject {subject!r} in {TABLE} "
                                 "(the name of the run directory): psifr would pool their lists as one subject's; "
                                 "aggregate runs whose directories have different names")
            seen[subject] = run.path

    def aggregate(self, runs: list[RunDir], loaded: list[dict[str, Any]], settings: dict[str, Any], out: Path,
                  dpi: int) -> dict[str, Any]:
        """free_recall.npz, free_recall.csv, summary.json and free_recall.png/.pdf of free-recall runs.

        summary.json: ``n_runs``, ``runs``, ``subjects`` (each run's subject in the pooled csv, in the order of
        ``runs``), ``task``, for each of ``FREE_RECALL_SCALARS`` (and of ``forced_accuracy``'s orders, when every run
        has it) its ``mean``, ``se`` and the runs' ``values``, for
        each curve of ``FREE_RECALL_CURVES`` its ``mean`` and ``se`` by study position (``lag_crp``: by lag,
        ``lag_crp_lags``), and the ``settings``. The runs' values are recomputed from their free_recall.npz counts. A
        curve's mean at a position or lag is over the runs that have a value there (as pandas averages psifr's
        per-subject curves, skipping NaN): null only where no run has one, as at lag 0, never possible; its se is
        null where fewer than two runs have one. ``cmr_fit`` is the CMR fit of the mean lag-CRP
        (``results.cmr_fit_entry``); ``cmr_fit_runs`` holds, for each variant, the ``mean``, ``se`` and ``values`` of
        every run's own fit (distance, parameters, inverse temperature; null for a run without a fit).

        free_recall.npz: ``<prefix>_curves`` (R, L; lag_crp (R, 2L - 1), NaN where a run has no value),
        ``<prefix>_mean`` and ``<prefix>_se`` for each prefix of ``FREE_RECALL_CURVES``, and ``lag_crp_lags``
        (2L - 1).

        free_recall.csv: every run's rows, run after run, under one header, each keeping its own subject; the
        subjects are distinct (``check_together``), so psifr reads the pooled file as one subject per run.

        free_recall.png/.pdf: the mean curves with standard-error bands and the fits of the mean lag-CRP.
        """
        summary: dict[str, Any] = {**self.aggregate_header(runs), "subjects": [r["subject"] for r in loaded],
                                   "task": FreeRecallTask.name}
        for key in FREE_RECALL_SCALARS:
            summary[key] = scalar_entry(np.array([r[key] for r in loaded], dtype=float))  # R
        forced = [r["summary"].get("forced_accuracy") for r in loaded]
        summary["forced_accuracy"] = None if None in forced else {  # only where every run measured it
            order: scalar_entry(np.array([f[order] for f in forced], dtype=float)) for order in forced[0]}
        arrays = {}
        for key, prefix in FREE_RECALL_CURVES.items():
            curves = np.stack([r[key] for r in loaded])  # R L (lag_crp: R 2L-1)
            mean, se = mean_and_se(curves)
            arrays.update({f"{prefix}_curves": curves, f"{prefix}_mean": mean, f"{prefix}_se": se})
            summary[key] = curve_entry(mean, se)
        arrays["lag_crp_lags"] = loaded[0]["lag_crp_lags"]  # the same for every run: their lists have one length
        summary["lag_crp_lags"] = [int(k) for k in arrays["lag_crp_lags"]]
        summary["cmr_fit"] = results.cmr_fit_entry(arrays["lag_crp_mean"], arrays["lag_crp_lags"])
        own_fits = [results.cmr_fit_entry(r["lag_crp"], r["lag_crp_lags"]) for r in loaded]
        summary["cmr_fit_runs"] = _cmr_fits_over_runs(own_fits)
        summary["settings"] = settings
        files.save_npz(out / ARRAYS, **arrays)
        header = loaded[0]["header"]  # the same for every run (check_together)
        files.write_csv(out / TABLE, [dict(zip(header, row)) for run in loaded for row in run["rows"]])
        write_summary(out, summary)
        figures.save(_mean_figure(summary, arrays), out / "free_recall", dpi=dpi)
        return summary


def _cmr_fits_over_runs(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """For each CMR variant, the mean, se and values over runs of each number of their fits (``cmr_fit_entry``s)."""
    over_runs = {}
    for variant in (key for key in entries[0] if key != "lags"):
        fits = [entry[variant] for entry in entries]
        over_runs[variant] = {key: scalar_entry(np.array([np.nan if f is None else f[key] for f in fits]))
                              for key in CMR_FIT_NUMBERS}
    return over_runs


def _mean_figure(summary: dict[str, Any], arrays: dict[str, np.ndarray]) -> Figure:
    settings = summary["settings"]
    recalled, intrusions, repetitions = (summary[k] for k in ("mean_recalled", "intrusion_rate", "repetition_rate"))
    title = (f"{figures.style.describe(settings)} · mean of {summary['n_runs']} runs\n" +
             figures.style.recall_line(settings["n_items"], recalled["mean"], intrusions["mean"], repetitions["mean"],
                                       recalled["se"]))
    se = {"spc": arrays["serial_position_se"], "pfr": arrays["first_recall_se"], "lag_crp": arrays["lag_crp_se"]}
    return figures.free_recall.free_recall(arrays["serial_position_mean"], arrays["first_recall_mean"],
                                           arrays["lag_crp_lags"], arrays["lag_crp_mean"], title,
                                           figures.free_recall.cmr_overlays(summary["cmr_fit"]), se)
