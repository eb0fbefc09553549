"""The probe attention of verification runs (Morita 2025, appendix: why the Transformer is at ceiling), measured and
written: ``primacy analyze probes`` (one run) and the Transformer panel of ``primacy reproduce`` (its seeds)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from primacy.analysis.behaviour.comparison import mean_and_se
from primacy.analysis.heads.model import head_model
from primacy.analysis.heads.probes import MEASURES, PROBES, capture_bytes, measure_probes, strongest_head
from primacy.checks import fits_in_memory
from primacy.errors import UsageError
from primacy.rundir.runs import load_run
from primacy.workflows.induction.analyses import write_probes

PROBE_SETS = 64  # test sets (2L trials each) of every run measured when none are asked for


@dataclass(frozen=True)
class ProbeRun:
    """A verification run's config.yaml and checkpoint, and its name in summary.json (``strongest_heads``)."""

    config: Path
    checkpoint: Path
    name: str


def analyze_probes(runs: Sequence[ProbeRun], out: Path, sets: int | None = None, batch_size: int = 32,
                   formats: Sequence[str] = ("png", "pdf"), at_most: int = PROBE_SETS) -> dict:
    """The probe attention of each run on its first ``sets`` test sets (None: ``at_most``, or all a run has if
    fewer), summed head by head over the runs (the seeds of one config: a head's index means nothing across seeds, so
    those rows mix heads), and each run's strongest head with the mean and standard error over runs of its measures
    (``strongest_heads``, ``strongest_head_mean``): written to ``out`` (``write_probes``); returns summary.json's
    content. More ``sets`` than a run has, or a batch whose attention does not fit in memory, is a one-line
    UsageError."""
    total, strongest = None, []
    for run in runs:
        model, task = load_run(run.config, run.checkpoint)
        model = head_model(model)
        n_sets = min(at_most, task.num_test_sets) if sets is None else sets
        if n_sets > task.num_test_sets:
            raise UsageError(f"sets={n_sets} is invalid: the run has num_test_sets={task.num_test_sets}, give at most "
                             f"{task.num_test_sets}")
        fits_in_memory("the captured attention of one batch", capture_bytes(model, batch_size, task.n_items),
                       batch_size=batch_size, n_items=task.n_items)
        stats = measure_probes(model, task.test_design(), n_sets, batch_size)
        strongest.append({"run": run.name, **strongest_head(stats.means())})
        total = stats if total is None else total + stats
    settings = {"n_sets": n_sets, "seeds": len(runs), "condition": task.condition, "vocab_size": task.vocab_size,
                "strongest_heads": strongest, "strongest_head_mean": strongest_mean(strongest)}
    return write_probes(total, settings, out, list(formats))


def strongest_mean(strongest: list[dict]) -> dict:
    """Mean and standard error over runs of each measure of the runs' strongest heads, old and new probes."""
    summary = {}
    for probe in PROBES:
        for measure in MEASURES:
            values = [row[probe][measure] for row in strongest if row[probe][measure] is not None]
            if values:
                mean, se = mean_and_se(np.array(values))
                summary[f"{probe}_{measure}"] = {"mean": float(mean), "se": float(se), "n": len(values)}
    return summary
