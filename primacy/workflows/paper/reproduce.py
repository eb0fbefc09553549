"""The runs of a paper figure (panels x seeds) and where each stands, read from its files: what ``primacy reproduce``
plans, launches and checks again."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from primacy.errors import UsageError
from primacy.workflows.paper import figure_files, pages
from primacy.workflows.paper.pages import FIGURES, FigureSpec
from primacy.workflows.paper.spec import Panel
from primacy.workflows.runs import SCALES, Run, config_dir
from primacy.workflows.tables import emergence_table, markdown_columns, markdown_table


def figure(name: str) -> FigureSpec:
    """One of primacy's figures by its name, or the figure a figure file (YAML, ``figure_files``) describes."""
    if name in FIGURES:
        return FIGURES[name]
    if not name.endswith((".yaml", ".yml")):
        raise UsageError(f"figure={name} is not one of primacy's figures ({', '.join(sorted(FIGURES))}) nor a figure "
                         "file (.yaml, see docs/reproduce.md)")
    return figure_files.read_figure(name)


def draw(spec: FigureSpec, scale: str, out: Path, runs: list[Any]) -> list[Path]:
    """The figure of finished runs: a figure file's panels aggregated by their kinds of result and a table
    (``figure_files.draw_aggregates``), a paper figure in its layout (``pages.draw``)."""
    if spec.layout == figure_files.AGGREGATES:
        return figure_files.draw_aggregates(spec, scale, out, runs)
    return pages.draw(spec, scale, out, runs)


def panels_left_out(full: FigureSpec, chosen: FigureSpec, scale: str, out: Path) -> list[str]:
    """The panels of ``full`` that ``chosen`` (the figure as ``--panels`` selects it) leaves out but whose runs are in
    ``out``: the figure drawn from ``chosen`` alone would be drawn over theirs, without their rows."""
    names = {panel.config(scale) for panel in chosen.panels}
    return [panel.label for panel in full.panels
            if panel.config(scale) not in names and any((out / panel.config(scale)).glob("seed*"))]


def table_columns(spec: FigureSpec) -> dict[str, list[str]]:
    """The columns of the figure's markdown table where ``draw`` knows them before reading the runs: a paper figure's
    (the weights page's, a figure file's and the humans page's tables have a column per layer or per number of the
    runs' results)."""
    tables = {"heatmaps": markdown_table, "dt": markdown_table, "probes": markdown_table,
              "emergence": lambda rows, reference: emergence_table(rows)}
    if spec.layout not in tables:
        return {}
    return {f"{spec.name}.md": markdown_columns(tables[spec.layout]([], None))}


def plan(spec: FigureSpec, scale: str, seeds: int, out: Path, overrides: list[str],
         parse: Callable[[list[str]], Any]) -> tuple[list[Run], dict]:
    """Every run of the figure, and each panel's config as ``parse`` (the command line's) reads the arguments of its
    first run, which checks the overrides once per panel."""
    configs = spec.config_root or config_dir(scale)
    runs, parsed = [], {}
    for panel in spec.panels:
        name = panel.config(scale)
        if not name:
            have = [other for other in SCALES if panel.config(other)]
            raise UsageError(f"scale={scale}: figure {spec.name} has no {scale}-scale config for panel {panel.label}; "
                             f"its panels run at --scale {' or '.join(have)}")
        config = _config(spec, panel, scale, configs)
        first = Run(name, 0, out / name / "seed0", config, tuple(overrides))
        parsed[name] = parse(list(first.fit_args()))
        runs += [Run(name, seed, out / name / f"seed{seed}", config, tuple(overrides)) for seed in range(seeds)]
    return runs, parsed


def _config(spec: FigureSpec, panel: Panel, scale: str, configs: Path) -> Path | tuple[Path, ...]:
    """The panel's config file at ``scale`` in ``configs``, or the files under its parent that compose it."""
    name, parts = panel.config(scale), panel.config_parts(scale)
    if parts:
        files = tuple((spec.config_root or configs.parent) / part for part in parts)
        missing = [str(path) for path in files if not path.is_file()]
        if missing:
            raise UsageError(f"figure={spec.name}: the config parts {', '.join(missing)} of panel {panel.label} are "
                             "missing")
        return files
    config = configs / f"{name}.yaml"
    quickstart = configs.parent / f"{name}.yaml"  # a quickstart serves as a CPU panel of primacy's figures
    if not config.is_file() and spec.config_root is None and quickstart.is_file():
        config = quickstart
    if not config.is_file():
        raise UsageError(f"figure={spec.name}: its config {config} is missing")
    return config
