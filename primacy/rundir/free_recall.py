"""Reading a free-recall run's results back: its summary, its curves recomputed from the counts, and its long-format
table as text (``primacy aggregate`` pools the tables of several runs), made again from the study lists and recalls
in free_recall.npz where free_recall.csv is absent (results/ keeps a seed's npz, not its CSV: the same lists twice)."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

import numpy as np
import torch

from primacy import files
from primacy.analysis.behaviour.free_recall import LONG_FORMAT_COLUMNS, FreeRecallCounts, long_format_rows, summarize
from primacy.analysis.behaviour.serial_position import position_indices
from primacy.errors import UsageError
from primacy.rundir import results
from primacy.rundir.layout import FREE_RECALL_ARRAYS, FREE_RECALL_TABLE, SUMMARY
from primacy.tasks.free_recall import FreeRecallTask

LISTS = ("study", "recalls")  # free_recall.npz's lists, from which free_recall.csv is made


def read_free_recall(out: Path) -> dict[str, Any]:
    """A free-recall run's results directory: its summary, its rates and curves recomputed from the counts in
    free_recall.npz (under their summary.json names, as numpy arrays), and free_recall.csv's ``header``, ``rows``
    (text, to be written again unchanged) and one ``subject``; without free_recall.csv, the text the test wrote
    there, made again from free_recall.npz's ``study`` and ``recalls`` with the run directory's name as subject (as
    the test names it). A damaged or incomplete file is a UsageError that names it and says how to write it again."""
    remedy = results.retest_hint(out)
    path = out / FREE_RECALL_ARRAYS
    arrays = results.read_npz(path, FreeRecallCounts._fields, LISTS, remedy)
    n = arrays["spc"].shape[0] if arrays["spc"].ndim == 1 else 0
    shapes = {"spc": (n,), "first_recall": (n,), "lag_actual": (2 * n - 1,), "lag_possible": (2 * n - 1,)}
    for key, value in ((k, arrays[k]) for k in FreeRecallCounts._fields):
        if value.dtype.kind not in "biu":
            raise UsageError(f"{path} has {key} of dtype {value.dtype}, expected integer counts: {remedy}")
        if value.shape != shapes.get(key, ()):
            raise UsageError(f"{path} has {key} of shape {value.shape}, expected {shapes.get(key, ())} (L = {n}): "
                             f"{remedy}")
    if n == 0 or int(arrays["lists"]) <= 0:
        raise UsageError(f"{path} holds no lists: {remedy}")
    for key in (k for k in LISTS if k in arrays):
        value = arrays[key]
        if value.dtype.kind not in "iu" or value.ndim != 2 or value.shape[0] != int(arrays["lists"]):
            raise UsageError(f"{path} has {key} of shape {value.shape} and dtype {value.dtype}, expected integer ids "
                             f"of shape ({int(arrays['lists'])} lists, steps): {remedy}")
    summary = results.read_summary(out / SUMMARY, remedy)
    if summary.get("task") != FreeRecallTask.name:
        raise UsageError(f"{out / SUMMARY} has task {summary.get('task')!r}, but only a {FreeRecallTask.name} "
                         f"test writes the free_recall.npz beside it: {remedy}")
    curves = summarize(FreeRecallCounts(*(torch.from_numpy(arrays[k]) for k in FreeRecallCounts._fields)))
    table = out / FREE_RECALL_TABLE
    if table.is_file() or not set(LISTS) <= arrays.keys():
        header, rows, subject = read_long_format(table, remedy)
    else:
        subject = out.parent.name
        try:
            header, rows = long_format_table(arrays["study"], arrays["recalls"], subject)
        except UsageError as err:  # lists no test writes (an item twice in a list, an output after stop)
            raise UsageError(f"{path} is damaged ({err}): {remedy}") from None
    return {"summary": summary, "header": header, "rows": rows, "subject": subject,
            "mean_recalled": curves.mean_recalled, "intrusion_rate": curves.intrusion_rate,
            "repetition_rate": curves.repetition_rate, **position_indices(curves.spc),
            "serial_position_curve": curves.spc.numpy(), "first_recall_curve": curves.pfr.numpy(),  # L
            "lag_crp": curves.lag_crp.numpy(), "lag_crp_lags": curves.lags.numpy()}  # 2L-1


def long_format_table(study: np.ndarray, recalls: np.ndarray, subject: str) -> tuple[list[str], list[list[str]]]:
    """free_recall.csv's header and rows as text, as a test writes them (``results.write_free_recall``) from its
    study lists (N, L) and recalls (N, R)."""
    text = files.csv_text(long_format_rows(torch.from_numpy(study), torch.from_numpy(recalls), subject))
    header, *rows = csv.reader(io.StringIO(text))
    return header, rows


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
