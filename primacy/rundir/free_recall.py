"""Reading a free-recall run's results back: its summary, its curves recomputed from the counts, and its long-format
table as text (``primacy aggregate`` pools the tables of several runs)."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import torch

from primacy.analysis.behaviour.free_recall import LONG_FORMAT_COLUMNS, FreeRecallCounts, summarize
from primacy.analysis.behaviour.serial_position import position_indices
from primacy.errors import UsageError
from primacy.rundir import results
from primacy.rundir.layout import FREE_RECALL_ARRAYS, FREE_RECALL_TABLE, SUMMARY
from primacy.tasks.free_recall import FreeRecallTask


def read_free_recall(out: Path) -> dict[str, Any]:
    """A free-recall run's results directory: its summary, its rates and curves recomputed from the counts in
    free_recall.npz (under their summary.json names, as numpy arrays), and free_recall.csv's ``header``, ``rows``
    (text, to be written again unchanged) and one ``subject``. A damaged or incomplete file is a UsageError that
    names it and says how to write it again."""
    remedy = results.retest_hint(out)
    path = out / FREE_RECALL_ARRAYS
    arrays = results.read_npz(path, FreeRecallCounts._fields, (), remedy)
    n = arrays["spc"].shape[0] if arrays["spc"].ndim == 1 else 0
    shapes = {"spc": (n,), "first_recall": (n,), "lag_actual": (2 * n - 1,), "lag_possible": (2 * n - 1,)}
    for key, value in arrays.items():
        if value.dtype.kind not in "biu":
            raise UsageError(f"{path} has {key} of dtype {value.dtype}, expected integer counts: {remedy}")
        if value.shape != shapes.get(key, ()):
            raise UsageError(f"{path} has {key} of shape {value.shape}, expected {shapes.get(key, ())} (L = {n}): "
                             f"{remedy}")
    if n == 0 or int(arrays["lists"]) <= 0:
        raise UsageError(f"{path} holds no lists: {remedy}")
    summary = results.read_summary(out / SUMMARY, remedy)
    if summary.get("task") != FreeRecallTask.name:
        raise UsageError(f"{out / SUMMARY} has task {summary.get('task')!r}, but only a {FreeRecallTask.name} "
                         f"test writes the free_recall.npz beside it: {remedy}")
    curves = summarize(FreeRecallCounts(*(torch.from_numpy(arrays[k]) for k in FreeRecallCounts._fields)))
    header, rows, subject = read_long_format(out / FREE_RECALL_TABLE, remedy)
    return {"summary": summary, "header": header, "rows": rows, "subject": subject,
            "mean_recalled": curves.mean_recalled, "intrusion_rate": curves.intrusion_rate,
            "repetition_rate": curves.repetition_rate, **position_indices(curves.spc),
            "serial_position_curve": curves.spc.numpy(), "first_recall_curve": curves.pfr.numpy(),  # L
            "lag_crp": curves.lag_crp.numpy(), "lag_crp_lags": curves.lags.numpy()}  # 2L-1


def read_long_format(path: Path, remedy: str) -> tuple[list[str], list[list[str]], str]:
    """free_recall.csv's header, its rows as text and the one subject they all have. A header without one of the
    columns primacy writes (``LONG_FORMAT_COLUMNS``) is refused, naming the file and the column: every reader of a
    run's results (``read_free_recall``) comes through here."""
    if not path.is_file():
        raise UsageError(f"{path} does not exist: {remedy}")
    try:
        with path.open(newline="", encoding="utf-8") as f:
            table = list(csv.reader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise UsageError(f"{path} is damaged (unreadable: {results._reason(err)}): {remedy}") from None
    if not table:
        raise UsageError(f"{path} is damaged (the file is empty): {remedy}")
    header, rows = table[0], table[1:]
    missing = [name for name in LONG_FORMAT_COLUMNS if name not in header]
    if missing:
        raise UsageError(f"{path} is damaged (it has no {' or '.join(missing)} column, of the columns "
                         f"{', '.join(LONG_FORMAT_COLUMNS)} primacy writes): {remedy}")
    short = next((i for i, row in enumerate(rows, start=2) if len(row) != len(header)), None)
    if short is not None:
        raise UsageError(f"{path} is damaged (line {short} has {len(table[short - 1])} fields, the header "
                         f"{len(header)}): {remedy}")
    subjects = sorted({row[header.index("subject")] for row in rows})
    if len(subjects) != 1:
        raise UsageError(f"{path} holds the subjects {subjects}, not one: a run's free_recall.csv is one subject's "
                         f"lists; {remedy}")
    return header, rows, subjects[0]
