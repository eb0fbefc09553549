"""A figure of your own for ``primacy reproduce``: a YAML file naming its panels and the config of each, so that the
runs of any model and task (a plugin's, with its own kind of result, included) are launched, resumed and checked like
a paper figure's, and each panel is aggregated over seeds by its kind of result, with one table of every panel's
numbers. The file::

    title: Calibration by backbone          # optional; the file's name otherwise
    reference: A                            # optional: the panel the table marks differences from
    panels:
      - label: A
        title: S4D
        config: s4d-calibration             # s4d-calibration.yaml beside this file, at every scale
      - label: B
        title: LSTM
        config: {cpu: lstm-small, paper: lstm}
      - label: C
        title: Mamba, composed
        config: [trainer/cpu, task/calibration, backbone/mamba]   # parts beside this file, each a --config in turn

A panel composed of parts runs in the folder named by their names joined with ``+``
(``cpu+calibration+mamba``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from primacy import files
from primacy.errors import UsageError
from primacy.workflows import aggregate
from primacy.workflows.paper.pages import AGGREGATES, FigureSpec, Panel
from primacy.workflows.runs import SCALES, read_yaml
from primacy.workflows.tables import csv_rows, markdown_header, markdown_row, table_cell, unrounded


def read_figure(path: str | Path) -> FigureSpec:
    """The figure a figure file describes; a missing file, invalid YAML or a panel without a label or config is refused
    in one line naming the file and what is allowed."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"figure={path} is neither one of primacy's figures nor a figure file (YAML) that exists")
    content = read_yaml("figure", path)
    panels = content.get("panels") if isinstance(content, dict) else None
    if not isinstance(panels, list) or not panels:
        raise UsageError(f"figure={path} has no panels: give a list `panels:` of {{label, title, config}}")
    spec = FigureSpec(path.stem, str(content.get("title") or path.stem), tuple(_panel(path, p) for p in panels),
                      AGGREGATES, content.get("reference"), path.parent.resolve())
    labels = [panel.label for panel in spec.panels]
    if len(set(labels)) < len(labels):
        raise UsageError(f"figure={path} has the panel labels {labels}: give each panel its own")
    for scale in SCALES:
        composed: dict[str, tuple[str, ...]] = {}
        for panel in spec.panels:
            name, parts = panel.config(scale), panel.config_parts(scale)
            if composed.setdefault(name, parts) != parts:
                raise UsageError(f"figure={path} composes two configs whose runs would share the folder {name}: "
                                 "give their parts different names")
    if spec.reference is not None and spec.reference not in labels:
        raise UsageError(f"figure={path} has reference={spec.reference!r}: give one of the labels {labels}")
    return spec


def _panel(path: Path, entry: Any) -> Panel:
    if not isinstance(entry, dict) or "label" not in entry or "config" not in entry:
        raise UsageError(f"figure={path} has the panel {entry!r}: give each panel a label and a config (a config "
                         "name beside the file, a list of them composed in turn, or {cpu: NAME, paper: NAME})")
    config = entry["config"]
    by_scale = config if isinstance(config, dict) else {scale: config for scale in SCALES}
    if set(by_scale) != set(SCALES) or not all(_is_config(value) for value in by_scale.values()):
        raise UsageError(f"figure={path} has config={config!r} in panel {entry['label']}: give a config name, a "
                         f"list of config names (parts), or one of them per scale ({', '.join(SCALES)})")
    names = tuple(_run_name(by_scale[scale]) for scale in SCALES)
    parts = tuple(_parts(by_scale[scale]) for scale in SCALES)
    return Panel(str(entry["label"]), str(entry.get("title", "")), names, parts=parts)  # type: ignore[arg-type]


def _is_config(value: Any) -> bool:
    """A config name, or a non-empty list of them (the parts of one config)."""
    if isinstance(value, list):
        return bool(value) and all(isinstance(part, str) and part for part in value)
    return isinstance(value, str) and bool(value)


def _run_name(config: str | list[str]) -> str:
    """The folder of a panel's runs: its config's name, or its parts' names joined by ``+``."""
    return config if isinstance(config, str) else "+".join(Path(part).name.removesuffix(".yaml") for part in config)


def _parts(config: str | list[str]) -> tuple[str, ...]:
    """The files (beside the figure file) that compose a panel's config, in order; () for one named config."""
    return () if isinstance(config, str) else tuple(p if p.endswith(".yaml") else f"{p}.yaml" for p in config)


def draw_aggregates(spec: FigureSpec, scale: str, out: Path, runs: list[Any]) -> list[Path]:
    """Each panel's runs aggregated into ``out/<panel>/mean`` by their kind of result (its files and figures), and
    ``out/<figure>.csv`` and ``.md``: a row per panel with the mean and standard error over seeds of every number
    the aggregate's summary holds as one (entries with a ``mean`` and ``se``)."""
    rows = []
    for panel in spec.panels:
        name = panel.config(scale)
        dirs = [run.dir for run in runs if run.panel == name]
        summary = aggregate.aggregate(dirs, out / name / "mean")
        row = {"panel": panel.label, "title": panel.title, "config": name, "seeds": len(dirs),
               "result_kind": summary.get("result_kind")}
        for key, entry in summary.items():
            if isinstance(entry, dict) and isinstance(entry.get("mean"), (int, float, type(None))) and "se" in entry:
                row[key], row[f"{key}_se"] = unrounded(entry["mean"]), unrounded(entry["se"])
        rows.append(row)
    reference = next((row for row in rows if row["panel"] == spec.reference), None)
    return [files.write_csv(out / f"{spec.name}.csv", csv_rows(rows)),
            files.write_text(out / f"{spec.name}.md", _table(rows, reference))]


def _table(rows: list[dict[str, Any]], reference: dict[str, Any] | None) -> str:
    """Every panel's numbers as mean ± SE (n seeds), a † where a panel differs from the ``reference`` by more than
    twice the standard error of the difference; a number some panel lacks shows as —."""
    keys = [key for key in dict.fromkeys(k for row in rows for k in row) if any(f"{key}_se" in row for row in rows)]
    header = ["panel", "n", *keys]
    lines = markdown_header(header)
    for row in rows:
        lines.append(markdown_row([f"{row['panel']} {row['title']}".strip(), str(row["seeds"]),
                                 *(table_cell(row, key, reference) for key in keys)]))
    if reference is not None:
        lines += ["", f"† differs from panel {reference['panel']} by more than 2 SE of the difference."]
    return "\n".join(lines) + "\n"

