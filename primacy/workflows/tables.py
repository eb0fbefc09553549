"""The tables `primacy reproduce` writes beside its figures, for docs: mean ± SE over seeds, marked where a panel
differs from the figure's reference panel by more than two standard errors of the difference; and the check that a
table is never drawn over one with columns it would lose."""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

import numpy as np

from primacy.analysis.behaviour.comparison import mean_and_se
from primacy.errors import UsageError

DT_QUANTILES = (0.05, 0.5, 0.95)
ROW_DECIMALS = 6  # the decimals a page's CSV keeps of a mean and its SE (``csv_rows``); the most a cell shows
SMALL_DT = 0.03  # the paper: after training, Δt concentrates at or below about this


def markdown_header(cells: list[str] | tuple[str, ...]) -> list[str]:
    """A markdown table's first two lines: its column titles and the rule under them."""
    return [markdown_row(cells), "|" + "---|" * len(cells)]


def markdown_row(cells: list[str] | tuple[str, ...]) -> str:
    """One line of a markdown table."""
    return "| " + " | ".join(cells) + " |"


# The markdown table's columns: (title, the row's key of the mean; its SE is key + "_se", when the row has one)
TABLE_COLUMNS = (("overall", "overall_accuracy"), ("early − late", "early_minus_late"),
                 ("primacy", "primacy_index"), ("recency", "recency_index"),
                 ("early-query decay", "early_query_decay"), ("median Δt after", "dt_final_median"))


def markdown_table(rows: list[dict[str, Any]], reference: dict[str, Any] | None) -> str:
    """A figure's table for docs: mean ± SE over seeds (n), a † where a panel differs from the ``reference`` panel by
    more than twice the standard error of the difference, sqrt(SE_a² + SE_b²); then the bottom-left block against
    the rest of the first query quarter, and Δt quantiles (every channel of every seed) before and after training."""
    header = ["panel", "L", "n", *[title for title, _ in TABLE_COLUMNS], "bottom-left / rest",
              "Δt 5/50/95 % before", "Δt 5/50/95 % after", f"Δt ≤ {SMALL_DT} before → after"]
    lines = markdown_header(header)
    for row in rows:
        cells = [str(row["panel"]), str(row["n_items"]), str(row["seeds"])]
        cells += [table_cell(row, key, reference) for _, key in TABLE_COLUMNS]
        cells.append(f"{_number(row['bottom_left'])} / {_number(row['rest'])}")
        for when in ("initial", "final"):
            quantiles = [row[f"dt_{when}_q{round(q * 100):02d}"] for q in DT_QUANTILES]
            cells.append("—" if None in quantiles else " / ".join(f"{q:.2g}" for q in quantiles))
        before, after = row[f"dt_initial_below_{SMALL_DT}"], row[f"dt_final_below_{SMALL_DT}"]
        cells.append("—" if before is None else f"{before:.2f} → {after:.2f}")
        lines.append(markdown_row(cells))
    if reference is not None:
        lines += ["", f"† differs from panel {reference['panel']} by more than 2 SE of the difference."]
    return "\n".join(lines) + "\n"


def table_cell(row: dict[str, Any], key: str, reference: dict[str, Any] | None) -> str:
    mean, se = row.get(key), row.get(f"{key}_se")
    if mean is None:
        return "—"
    if se is None:
        text = _number(mean)
    else:  # both to the SE's precision: 3 decimals, or the SE's 2 significant digits when it is below 0.001, at most
        # the ROW_DECIMALS the CSV keeps (a digit past them would not be in the CSV); an SE at
        # rounding level (equal values summed in another order: 5e-18 on 0.05) is no spread at all
        exact = se <= 1e-12 * max(1.0, abs(mean))
        decimals = 3 if se >= 0.001 or exact else min(ROW_DECIMALS, 1 - math.floor(math.log10(se)))
        text = f"{mean:.{decimals}f} ± {se:.{decimals}f}".replace("-", "−")
    if reference is not None and reference is not row and reference.get(key) is not None and se is not None:
        other_se = reference.get(f"{key}_se")
        if other_se is not None and abs(mean - reference[key]) > 2 * (se**2 + other_se**2) ** 0.5:
            text += " †"
    return text


def _number(x: float | None) -> str:
    """3 decimals, or 2 significant digits for small numbers (Δt), with a true minus sign."""
    if x is None:
        return "—"
    text = f"{x:.3f}" if abs(x) >= 0.01 or x == 0 else f"{x:.2g}"
    return text.replace("-", "−")


def unrounded(x: float | None) -> float | None:
    """A row's number as measured, every digit kept (a table cell rounds it once; ``csv_rows`` rounds its CSV): a
    float, None for a missing or NaN value."""
    return None if x is None or np.isnan(x) else float(x)


def rounded(x: float | None) -> float | None:
    """A number as a page's CSV keeps it: ``ROW_DECIMALS`` decimals, more than a table cell shows."""
    return None if x is None or np.isnan(x) else round(float(x), ROW_DECIMALS)


def csv_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A page's rows as its CSV keeps them: every float to ``ROW_DECIMALS`` decimals. The rows themselves keep every
    digit, so that a table cell is rounded once: rounded to 6 decimals first, an SE of 0.00096474 was 0.000965 and
    its cell 0.00097."""
    return [{key: rounded(value) if isinstance(value, float) else value for key, value in row.items()} for row in rows]


def weights_table(rows: list[dict[str, Any]]) -> str:
    """The weights page's table for docs: behaviour's and each layer's weights' early-minus-late, Δt after, and each
    layer's log10 Δ on old minus new probes (— for a model without Δt)."""
    def layers(prefix: str) -> int:
        return max(sum(key.startswith(prefix) and not key.endswith("_se") for key in row) for row in rows)
    weights, dts = layers("weight_early_minus_late_L"), layers("dt_repeat_minus_new_L")
    header = ["panel", "L", "n", "accuracy early − late", *[f"weight early − late, layer {i}" for i in range(weights)],
              "median Δt after", *[f"log10 Δ old − new probe, layer {i}" for i in range(dts)]]
    lines = markdown_header(header)
    for row in rows:
        cells = [str(row["panel"]), str(row["n_items"]), str(row["seeds"]), table_cell(row, "early_minus_late", None)]
        cells += [table_cell(row, f"weight_early_minus_late_L{i}", None) for i in range(weights)]
        cells.append(table_cell(row, "dt_final_median", None))
        cells += [table_cell(row, f"dt_repeat_minus_new_L{i}", None) for i in range(dts)]
        lines.append(markdown_row(cells))
    return "\n".join(lines) + "\n"


# emergence pages' markdown table: (title, the per-seed row's key), each as mean ± SE over a panel's seeds
EMERGENCE_COLUMNS = (("emerged at step", "emerged_at_step"), ("repeat accuracy", "repeat_accuracy"),
                     ("best induction", "best_induction"),
                     ("top-4 CMR distance", "top_cmr_distance"), ("CMR-like share", "cmr_like_share"),
                     ("β_enc", "beta_enc"), ("β_rec", "beta_rec"), ("ICL intact", "icl_intact"),
                     ("ICL, most CMR-like ablated", "icl_top"), ("ICL, random ablated", "icl_random"))


def emergence_table(rows: list[dict[str, Any]]) -> str:
    """An emergence page's table for docs: per panel, the mean ± SE over its seeds (n) of each run's final measures
    (``EMERGENCE_COLUMNS``; a seed whose head never emerged counts as missing in that column)."""
    header = ["panel", "n", *[title for title, _ in EMERGENCE_COLUMNS]]
    lines = markdown_header(header)
    for panel in dict.fromkeys(row["panel"] for row in rows):
        seeds = [row for row in rows if row["panel"] == panel]
        summary: dict[str, Any] = {}
        for _, key in EMERGENCE_COLUMNS:
            values = np.array([np.nan if row.get(key) is None else float(row[key]) for row in seeds])
            mean, se = mean_and_se(values)  # over the seeds that have a value; NaN (then None) where too few do
            summary[key], summary[f"{key}_se"] = (None if np.isnan(x) else float(x) for x in (mean, se))
        cells = [table_cell(summary, key, None) for _, key in EMERGENCE_COLUMNS]
        step, step_se = summary["emerged_at_step"], summary["emerged_at_step_se"]  # whole steps
        cells[0] = "—" if step is None else f"{step:.0f}" + ("" if step_se is None else f" ± {step_se:.0f}")
        lines.append(markdown_row([str(panel), str(len(seeds)), *cells]))
    return "\n".join(lines) + "\n"


def columns_of(path: Path) -> list[str]:
    """The columns of a table primacy wrote: a .csv's header, a .md table's first line; none without the file."""
    if not path.is_file():
        return []
    with path.open(encoding="utf-8", newline="") as f:
        if path.suffix == ".csv":
            return next(csv.reader(f), [])
        return markdown_columns(f.readline())


def markdown_columns(text: str) -> list[str]:
    """The cells of a markdown table's header, the first line of ``text`` ("| a | b |"); none when it is not one."""
    line = text.split("\n", 1)[0].strip()
    return [cell.strip() for cell in line.strip("|").split("|")] if line.startswith("|") else []


def lost_columns(path: Path, columns: list[str]) -> list[str]:
    """The columns of the table at ``path`` that a table of ``columns`` drawn over it would lose; none without one (a
    table that gains columns loses nothing)."""
    return [column for column in columns_of(path) if column not in columns]


def keep_columns(path: Path, columns: list[str], advice: str = "give another --out, or move the table away to draw "
                 "it anew") -> None:
    """Refuses, in one line naming the columns, to draw a table of ``columns`` over the one at ``path`` when that one
    has columns the new one would not (``lost_columns``); called before anything is trained or written."""
    lost = lost_columns(path, columns)
    if lost:
        raise UsageError(f"{path} has the columns {', '.join(lost)}, which this command would not write (drawing "
                         f"would lose them): {advice}")
