"""Aggregate runs that differ only by seed: each run read by its kind of result (``primacy.rundir.kinds``), the runs
checked to share their settings but for the seed, then the kind's aggregate (for the accuracy matrix its mean and
standard error, the mean heatmap and contiguity figure; for free recall the mean curves, the lists pooled for psifr
and the CMR fits; for logged values their mean and standard error; for a plugin's kind, what it writes), and every
run's initial and final Δt distribution on one figure (Fig. 5)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from primacy import figures
from primacy.checks import writable_directory
from primacy.errors import UsageError
from primacy.rundir import kinds, results
from primacy.rundir.kinds.free_recall import FREE_RECALL_CURVES, FREE_RECALL_SCALARS  # noqa: F401 - their old place
from primacy.rundir.layout import RunDir

SEED_KEYS = ("seed",)  # settings allowed to differ between aggregated runs
# Task settings added after runs were written, by task name, at the value that makes a run the same as one written
# before them (whose data_args lack them): free recall's distractors (issue 71).
ADDED_DATA_ARGS = {"free_recall": {"delay": 0, "gap": 0, "distractor_vocab": 0}}


def _comparable(summary: dict[str, Any]) -> dict[str, Any]:
    """The settings that must agree between aggregated runs. A summary without ``task`` (written before there were
    other tasks) is a verification run's; a setting of ``ADDED_DATA_ARGS`` at its old behaviour's value counts as
    absent."""
    data = summary.get("data_args")
    if isinstance(data, dict):
        added = ADDED_DATA_ARGS.get(summary.get("task") or "verification", {})
        data = {k: v for k, v in data.items() if k not in SEED_KEYS and not (k in added and v == added[k])}
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
    """Each run's results, read by its kind of result (``primacy.rundir.kinds``), after checking that they exist,
    are of one kind and share their settings but for the seed."""
    return _load(run_dirs)[1]


def _load(run_dirs: list[Path]) -> tuple[kinds.ResultKind, list[dict[str, Any]]]:
    if not run_dirs:
        raise UsageError("no run directories given: pass at least one RUN_DIR")
    runs = [RunDir(run) for run in run_dirs]
    found = [kinds.for_run(run) for run in runs]
    loaded = [kind.read(run) for kind, run in zip(found, runs)]
    reference = _comparable(loaded[0]["summary"])
    for run, kind, result in zip(runs[1:], found[1:], loaded[1:]):
        diff = _first_difference(reference, _comparable(result["summary"]))
        if diff:
            raise UsageError(f"run {run.path} differs from {runs[0].path} in {diff}: only runs that differ by seed "
                             "aggregate")
        if kind.name != found[0].name:  # a summary that names the wrong task
            raise UsageError(f"run {run.path} holds {kind.name}, {runs[0].path} {found[0].name}: only runs of one "
                             "kind of result aggregate")
    found[0].check_together(runs, loaded)
    return found[0], loaded


def aggregate(run_dirs: list[str | Path], out_dir: str | Path, dpi: int = 150) -> dict[str, Any]:
    """Write the aggregate of runs that differ only by seed into ``out_dir`` as their kind of result does it
    (``ResultKind.aggregate``: for the accuracy matrix summary.json, accuracy.npz, heatmap and contiguity figures;
    for free recall summary.json, free_recall.npz, free_recall.csv and free_recall.png/.pdf; for logged values
    summary.json and logged.png/.pdf) and, if every run recorded Δt, dt_histograms.png. Nothing is written before
    every run is read and checked. Returns the aggregate's summary."""
    runs = [RunDir(r) for r in run_dirs]
    out = Path(out_dir)
    writable_directory("out", out)  # before any work
    kind, loaded = _load([run.path for run in runs])
    histories = _dt_histories(runs)  # read before anything is written, so damage there leaves no half result
    out.mkdir(parents=True, exist_ok=True)
    summary = kind.aggregate(runs, loaded, _comparable(loaded[0]["summary"]), out, dpi)
    if histories:
        figures.save(figures.dt.dt_histograms(histories, [r.name for r in runs]), out / "dt_histograms", ["png"],
                     dpi)
    return summary


def headline(summary: dict[str, Any]) -> dict[str, float | None]:
    """The numbers of an aggregate's summary worth a line: its kind of result's ``headline``, or, for a kind without
    one, every number it holds as mean and se; each as its mean over the runs."""
    keys = kinds.get(summary[kinds.KIND_KEY]).headline
    if not keys:
        keys = tuple(key for key, entry in summary.items()
                     if isinstance(entry, dict) and "se" in entry and isinstance(entry.get("mean"), (int, float)))
    return {key: summary[key]["mean"] for key in keys if key in summary}


def _dt_histories(runs: list[RunDir]) -> list[dict[str, np.ndarray]]:
    """Every run's Δt history, or none when any run lacks one (its backbone has no Δt)."""
    paths = [run.dt_history for run in runs]
    return [results.read_dt_history(p) for p in paths] if all(p.is_file() for p in paths) else []


