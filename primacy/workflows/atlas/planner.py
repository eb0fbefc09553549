"""A memory atlas: every backbone at matched difficulty. For each row (a backbone), a search over one difficulty knob
finds the setting where the test accuracy falls inside a band; seeds are trained there, and every row's serial-position
and query-position curves and indices are compared side by side. What ``primacy atlas`` plans, launches and draws.

An atlas file (YAML; primacy's are in configs/atlas/)::

    title: Memory verification at matched difficulty
    band: [0.70, 0.80]                  # optional (the default); of ``metric``, in every seed's test results
    metric: overall_accuracy            # optional (the default): a number of each run's summary.json
    config: {cpu: verification-cpu, paper: verification-paper}   # the task and training, beside this file
    args: {cpu: [], paper: [--model.init_args.backbone.init_args.d_model, "256"]}  # optional: every row's runs
    rows:
      - label: S4D
        backbone: {class_path: S4DBackbone, init_args: {d_model: 64}}
        knob: data.init_args.n_items    # a dotted config key
        values: [16, 32, 64, 128]       # easiest to hardest: the accuracy falls along the list
      - label: Transformer
        backbone: {class_path: TransformerBackbone}
        knob: model.init_args.backbone.init_args.d_model
        values: {cpu: [64, 16, 4], paper: [128, 32, 8]}
        args: [--model.init_args.lr, "0.0003"]   # optional: this row's runs (or {cpu: [...], paper: [...]})

The search is a bisection over ``values`` from the middle one; each value's first run (seed 0) is its pilot, trained
with the full budget, so the chosen value's pilot is its seed 0. A value's accuracy is its pilot's until its other
seeds finish, then the mean of them all while every seed is inside the band, else the seed farthest outside it
(``seeds_accuracy``): where a seed leaves the band that the pilot was inside, the search goes on from there, away
from the side it left by (an atlas file can add values between two tried ones). Where no value lands inside the
band, the row takes the value nearest to it and the table says so. Everything is read again from the run
directories each time, so the search, like the runs, resumes where it stopped.
"""

from __future__ import annotations

import importlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from primacy import figures, files
from primacy.contract import task_class_and_settings
from primacy.errors import UsageError
from primacy.rundir.checkpoints import checkpoint_step
from primacy.rundir.layout import RunDir
from primacy.rundir.settings import tested_at
from primacy.workflows import aggregate, launchers
from primacy.workflows.atlas.knob_search import Search, search, seeds_accuracy
from primacy.workflows.atlas.spec import AtlasSpec, Row
from primacy.workflows.runs import SCALES, Run, Status, status
from primacy.workflows.tables import csv_rows, markdown_columns, markdown_header, markdown_row, table_cell, unrounded


@dataclass(frozen=True)
class AtlasRun(Run):
    """A run of an atlas row at one value of its knob; ``test`` marks the test of its model at 2L (--extrapolate),
    whose files are in <run>/extrapolate."""

    row: str = ""
    value: Any = None
    test: bool = False

    @property
    def label(self) -> str:
        return super().label + ("/extrapolate" if self.test else "")


def extrapolation_of(run: AtlasRun) -> AtlasRun:
    """The test of a run's model at twice its list length (--extrapolate), in <run>/extrapolate."""
    return replace(run, dir=run.dir / "extrapolate", test=True)


def value_dir(out: Path, row: Row, value: Any) -> Path:
    return out / row.slug / f"{row.knob_name}={value}"


@dataclass
class RowState:
    """Where a row stands: its search, every run it has needed so far with its status, and the chosen value's seeds
    (empty while searching); ``accuracy``: the values measured (index -> accuracy), as ``search`` takes them."""

    row: Row
    search: Search
    runs: dict[AtlasRun, Status]
    seeds: list[AtlasRun]
    accuracy: dict[int, float] = field(default_factory=dict)

    @property
    def todo(self) -> list[AtlasRun]:
        return [run for run, state in self.runs.items() if state.args]

    @property
    def done(self) -> bool:
        """Every seed trained and tested; a test at 2L done or failed (a list too long for the task's sequence
        fails in its own log, and the table leaves its 2L columns empty)."""
        return bool(self.seeds) and all(state.state == "done" or (run.test and state.state == "failed")
                                        for run, state in self.runs.items())

    @property
    def extrapolated(self) -> list[AtlasRun]:
        """The seeds' tests at 2L when every one of them is done, else none."""
        tests = [extrapolation_of(seed) for seed in self.seeds]
        done = all(test in self.runs and self.runs[test].state == "done" for test in tests)
        return tests if tests and done else []

    def line(self, values: tuple[Any, ...], band: tuple[float, float]) -> str:
        """The search in a line: each value tried with its accuracy, then where it stands; a row that settled at an
        end of its list outside the band says which values would let the search go on."""
        tried = ", ".join(f"{values[i]}: {'…' if acc is None else f'{acc:.3f}'}" for i, acc in self.search.tried)
        chosen = self.search.chosen
        if chosen is None:
            return f"{self.row.label}: {self.row.knob_name} {tried}; searching"
        where = f"chose {values[chosen]}"
        if not self.search.in_band:
            measured = self.accuracy.get(chosen, float("nan"))
            end = ("the easiest value of the list, below it; add easier" if chosen == 0 and measured < band[0] else
                   "the hardest value of the list, above it; add harder" if chosen == len(values) - 1
                   and measured > band[1] else None)
            where += " (nearest to the band" + (f": {end} ones to go on)" if end else ")")
        return f"{self.row.label}: {self.row.knob_name} {tried}; {where}"


class Planner:
    """The atlas's runs, read again from their files at each call: a row's next pilot while it searches, then its
    seeds at the chosen value and (with ``extrapolate``) their tests at twice the list length."""

    def __init__(self, spec: AtlasSpec, scale: str, seeds: int, out: Path, overrides: list[str],
                 parse: Callable[[list[str]], Any], band: tuple[float, float] | None = None,
                 extrapolate: bool = False) -> None:
        self.spec, self.scale, self.seeds, self.out = spec, scale, seeds, out
        self.overrides, self.parse = list(overrides), parse
        self.band, self.extrapolate = band or spec.band, extrapolate
        self.configs: dict[str, Any] = {}  # a value's parsed config, by its runs' panel

    def run(self, row: Row, value: Any, seed: int) -> AtlasRun:
        """The run of ``row`` at knob ``value`` and ``seed``: the atlas's config, the row's backbone, the atlas's
        args, the row's args and knob, then the command line's overrides (later ones win)."""
        scale = SCALES.index(self.scale)
        args = [*(["--model.init_args.backbone", json.dumps(row.backbone)] if row.backbone else []),
                *self.spec.args[scale], *row.args[scale], f"--{row.knob}", str(value), *self.overrides]
        panel = f"{row.slug}/{row.knob_name}={value}"
        run = AtlasRun(panel, seed, value_dir(self.out, row, value) / f"seed{seed}",
                       self.spec.config_path(row, self.scale), tuple(args), row=row.label, value=value)
        if panel not in self.configs:  # the overrides are checked once per value, before anything runs
            self.configs[panel] = self.parse(list(run.fit_args()))
        return run

    def status(self, run: AtlasRun) -> Status:
        if run.test:
            return _test_status(run, self.configs[run.panel])
        return status(run, self.configs[run.panel])

    def row(self, row: Row) -> RowState:
        values = row.scale_values(self.scale)
        accuracy: dict[int, float] = {}
        runs: dict[AtlasRun, Status] = {}
        for index, value in enumerate(values):  # every pilot measured so far, on the search's path or not
            if (value_dir(self.out, row, value) / "seed0").is_dir():
                finished = self._finished_seeds(row, value)
                if finished:
                    accuracy[index] = seeds_accuracy([metric for _, metric in finished.values()], self.band)
                    runs.update({run: status_of for run, (status_of, _) in finished.items()})
        while True:
            found = search(values, accuracy, self.band)
            if found.next is None:
                break
            pilot = self.run(row, values[found.next], 0)
            runs[pilot] = self.status(pilot)
            value = measured(pilot, runs[pilot], self.spec.metric)
            if value is None:
                return RowState(row, found, self._with_tests(runs, []), [], accuracy)
            accuracy[found.next] = value
        seeds = [self.run(row, values[found.chosen], seed) for seed in range(self.seeds)]
        runs.update({run: self.status(run) for run in seeds if run not in runs})
        return RowState(row, found, self._with_tests(runs, seeds), seeds, accuracy)

    def _with_tests(self, runs: dict[AtlasRun, Status], seeds: list[AtlasRun]) -> dict[AtlasRun, Status]:
        """``runs`` and, with ``extrapolate``, the tests at 2L of every model trained, pilots too, as soon as it is:
        which value is chosen is known later, perhaps on another machine, where a pilot's checkpoints are gone
        (results/ keeps none). A pilot kept as its results, untested, is passed over; a seed's test is always due."""
        if not self.extrapolate:
            return runs
        for run, status_of in list(runs.items()):
            test = extrapolation_of(run)
            if status_of.state == "done" and (run in seeds or test.dir.is_dir() or not RunDir(run.dir).kept_as_results):
                runs[test] = self.status(test)
        return runs

    def _finished_seeds(self, row: Row, value: Any) -> dict[AtlasRun, tuple[Status, float]]:
        """Each seed trained and tested at ``value`` with its status and metric, the pilot (seed 0) first; none while
        the pilot is not."""
        finished = {}
        for seed in range(self.seeds):
            run = self.run(row, value, seed)
            if seed and not run.dir.is_dir():
                continue
            status_of = self.status(run)
            if (metric := measured(run, status_of, self.spec.metric)) is not None:
                finished[run] = status_of, metric
            elif not seed:
                return {}
        return finished

    def rows(self) -> list[RowState]:
        return [self.row(row) for row in self.spec.rows]

    def n_items(self, run: AtlasRun) -> int:
        return int(self.configs[run.panel].data.init_args.n_items)


def slowest_first(states: list[RowState]) -> list[RowState]:
    """The rows in the order their runs should start: rows with no finished run first (their time is unknown), then
    by the mean wall time of their finished runs, longest first. A row's search is a chain of pilots, so the slowest
    rows set when the atlas ends; started last, they would leave one core working alone at the end. Ties keep the
    file's order."""
    def mean_seconds(state: RowState) -> float:
        seconds = mean_run_seconds(state)
        return math.inf if seconds is None else seconds
    return sorted(states, key=mean_seconds, reverse=True)


def mean_run_seconds(state: RowState, tests: bool = False) -> float | None:
    """The mean wall time of the row's finished training runs (with ``tests``: of its finished tests at 2L), every
    launch of each counted (``launchers.run_seconds``); None when none has finished."""
    times = [launchers.run_seconds(run.dir) for run, status_of in state.runs.items()
             if status_of.state == "done" and run.test == tests]
    return sum(times) / len(times) if times else None


def measured(run: Run, state: Status, metric: str) -> float | None:
    """The run's tested ``metric`` once it is done; None before."""
    if state.state != "done":
        return None
    summary = json.loads(RunDir(run.dir).summary.read_text())
    if not isinstance(summary.get(metric), (int, float)):
        raise UsageError(f"metric={metric} is not a number of {RunDir(run.dir).summary}: choose one of "
                         f"{', '.join(k for k, v in summary.items() if isinstance(v, (int, float)))}")
    return float(summary[metric])


def _test_status(test: AtlasRun, config: Any) -> Status:
    """Where the test of a run's model at twice its list length stands, from <run>/extrapolate."""
    trained = test.dir.parent
    state = launchers.read_state(test.dir)
    if launchers.is_alive(state):
        return Status("running", f"pid {state.get('pid')}")
    tested, ckpt, kept = RunDir(test.dir), RunDir(trained).last_checkpoint, RunDir(trained).kept_as_results
    if tested.is_tested() and (kept or ckpt.is_file() and tested_at(tested, checkpoint_step(ckpt))):
        return Status("done", "tested at 2L")
    if kept:
        return Status("failed", f"no model to test: {trained} was kept as its results only (its checkpoints removed); "
                      "delete it to train it again")
    n_items = 2 * int(config.data.init_args.n_items)
    task, settings = task_class_and_settings(config.data)
    changed = task.at_list_length(settings, n_items) if hasattr(task, "at_list_length") else {"n_items": n_items}
    args = (*RunDir(trained).test_args(), *(arg for key, value in changed.items()
                                             for arg in (f"--data.init_args.{key}", str(value))),
            "--trainer.default_root_dir", str(test.dir), "--trainer.logger", "false")
    if state.get("state") == "exited" and state.get("exit_code") not in (0, *launchers.STOPPED):
        return Status("failed", f"exit code {state.get('exit_code')}, log {state.get('log')}", args)
    return Status("missing", f"test at L = {n_items}", args)


INDEX_COLUMNS = ("primacy_index", "recency_index", "early_minus_late", "early_query_decay")


def draw(planner: Planner, states: list[RowState]) -> list[Path]:
    """Each row's seeds aggregated into <row>/<knob>=<value>/mean (and their tests at 2L into mean-2L), then
    atlas.csv and atlas.md (a row per architecture: the knob's value, the accuracy reached and each index, mean ± SE
    over seeds, and the state it keeps) and the atlas figure."""
    out, spec, rows, curves = planner.out, planner.spec, [], []
    for state in states:
        first = state.seeds[0]
        directory = value_dir(out, state.row, first.value)
        summary = aggregate.aggregate([run.dir for run in state.seeds], directory / "mean")
        config = planner.configs[first.panel]
        metric = summary[spec.metric]
        row = {"row": state.row.label, "knob": state.row.knob_name, "value": first.value,
               "in_band": state.search.in_band, "seeds": len(state.seeds),
               "seeds_in_band": sum(planner.band[0] <= v <= planner.band[1] for v in metric["values"]),
               f"{spec.metric}_seeds": " ".join(f"{v:.3f}" for v in metric["values"]),
               "n_items": planner.n_items(first), spec.metric: unrounded(metric["mean"]),
               f"{spec.metric}_se": unrounded(metric["se"])}
        for key in INDEX_COLUMNS:
            row[key], row[f"{key}_se"] = unrounded(summary[key]["mean"]), unrounded(summary[key]["se"])
        row["state_floats"] = _state_floats(config, row["n_items"])
        if planner.extrapolate:
            tested = (aggregate.aggregate([run.dir for run in state.extrapolated], directory / "mean-2L")
                      if state.extrapolated else {})
            for key in (spec.metric, "primacy_index", "early_minus_late"):
                entry = tested.get(key, {})
                row[f"{key}_2L"], row[f"{key}_2L_se"] = unrounded(entry.get("mean")), unrounded(entry.get("se"))
        rows.append(row)
        curves.append(figures.atlas.AtlasCurves(
            f"{state.row.label} ({state.row.knob_name} {first.value})",
            *(tuple(np.asarray(summary[key][part], dtype=float) for part in ("mean", "se"))
              for key in ("serial_position_curve", "query_position_curve")),
            {key: (row[key], row[f"{key}_se"]) for key in INDEX_COLUMNS},
            str(config.model.init_args.backbone.class_path).rpartition(".")[2], tuple(metric["values"])))
    written = [files.write_csv(out / "atlas.csv", csv_rows(rows)),
               files.write_text(out / "atlas.md", atlas_table(rows, spec, planner.band))]
    page = figures.atlas.atlas_page(curves, spec.title, planner.band, spec.metric.replace("_", " "))
    return written + figures.save(page, out / "atlas")


def atlas_table(rows: list[dict[str, Any]], spec: AtlasSpec, band: tuple[float, float]) -> str:
    """The atlas's table for docs: per architecture the knob and its value, the seeds inside the band (each seed's
    accuracy where the row settled on the value nearest to it), the accuracy and every index as mean ± SE over seeds,
    and the state it keeps after the study list."""
    columns = [spec.metric, *INDEX_COLUMNS]
    extra = [key for key in (f"{spec.metric}_2L", "primacy_index_2L", "early_minus_late_2L") if key in rows[0]]
    header = ["architecture", "knob", "L", "in band", *[c.replace("_", " ") for c in columns + extra],
              "state (floats)"]
    lines = markdown_header(header)
    for row in rows:
        inside = f"{row['seeds_in_band']}/{row['seeds']}"
        if not row["in_band"]:  # where seeds disagree (one learned, one did not) the mean hides it: each seed's
            inside += f" (nearest: {', '.join(row[f'{spec.metric}_seeds'].split())})"
        cells = [row["row"], f"{row['knob']} = {row['value']}", str(row["n_items"]), inside,
                 *(table_cell(row, key, None) for key in columns + extra),
                 "—" if row["state_floats"] is None else f"{row['state_floats']:,}"]
        lines.append(markdown_row(cells))
    lines += ["", f"Band: {spec.metric} in [{band[0]:.2f}, {band[1]:.2f}] for each seed; \"nearest\": no value of the "
              "knob landed inside it, the row shows the value nearest to it, with each seed's "
              f"{spec.metric.replace('_', ' ')}. State: the real numbers the model keeps "
              "per sequence after the study list, all layers (Backbone.state_size)."]
    return "\n".join(lines) + "\n"


def table_columns(spec: AtlasSpec, extrapolate: bool) -> dict[str, list[str]]:
    """The columns of atlas.csv and atlas.md as ``draw`` writes them (with ``extrapolate``: the 2L ones), known before
    any run is read, so that a command refuses to draw over a table it would lose columns of."""
    extrapolated = (spec.metric, "primacy_index", "early_minus_late") if extrapolate else ()
    measures = [f"{key}{se}" for key in (spec.metric, *INDEX_COLUMNS) for se in ("", "_se")]
    columns = list(dict.fromkeys(["row", "knob", "value", "in_band", "seeds", "seeds_in_band",
                                  f"{spec.metric}_seeds", "n_items", *measures, "state_floats",
                                  *(f"{key}_2L{se}" for key in extrapolated for se in ("", "_se"))]))
    blank = {**dict.fromkeys(columns, 0), "row": "", "in_band": True}  # a row of zeros: atlas_table's own header
    return {"atlas.md": markdown_columns(atlas_table([blank], spec, spec.band)), "atlas.csv": columns}


def _state_floats(config: Any, n_items: int) -> int | None:
    """``Backbone.state_size`` after the study list, of the backbone the run's config builds; None for a backbone
    that cannot say (no step)."""
    backbone = config.model.init_args.backbone
    module, _, name = str(backbone.class_path).rpartition(".")
    init = backbone.init_args.as_dict() if hasattr(backbone.init_args, "as_dict") else dict(backbone.init_args or {})
    try:
        return int(getattr(importlib.import_module(module), name)(**init).state_size(n_items))
    except UsageError:
        return None
