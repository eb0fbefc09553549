"""Models beside people: free-recall runs and a human dataset (psifr's, or a user's file in psifr's long format)
through the same analyses (``primacy humans``, and ``primacy reproduce humans``, which trains the models first).

Each person's curves come from their own lists, each seed's from its test lists, through the same counting code
(``primacy.analysis.behaviour.free_recall``); a group's curves are the mean and standard error over its members
(``primacy.analysis.behaviour.comparison``). Written to OUT: humans.png/.pdf (recall probability, first recall and
lag-CRP, people in black), curves.csv (every curve of every group: mean, se, n by position or lag) and summary.json
(each group's indices and CMR fit of its mean lag-CRP, each model's distances to the people) and humans.md (the table
docs/humans.md holds: ``markdown``). With --fit, CMR is also
fitted by likelihood to every person and every seed alike (``cmr_fits``): fits.csv, parameters.png/.pdf,
summary.json's likelihood_fit, whose ``grid`` sets each group's BIC beside that of its lag-CRP grid cell, and fits.md
(the two tables of them docs/humans.md holds: ``fits_markdown``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from primacy import figures, files
from primacy.analysis.behaviour.cmr.fits import CMRFit, fit_free_recall
from primacy.analysis.behaviour.cmr.fitting import LikelihoodFit
from primacy.analysis.behaviour.comparison import COMPARED_LAGS, GroupCurves, distances, group_curves, indices
from primacy.analysis.behaviour.free_recall import FreeRecallCurves, free_recall_counts, recall_positions, summarize
from primacy.errors import UsageError
from primacy.rundir import kinds, results
from primacy.rundir.kinds import FreeRecallResults
from primacy.rundir.layout import SUMMARY, RunDir
from primacy.workflows.humans import cmr_fits
from primacy.workflows.humans import people as human_data
from primacy.workflows.tables import markdown_header, markdown_row

PEOPLE = "people"


@dataclass(frozen=True)
class Comparison:
    dataset: human_data.Dataset
    people: GroupCurves
    models: dict[str, GroupCurves]  # by label
    runs: dict[str, list[Path]]  # each model's run directories
    subjects: tuple[Any, ...] = ()  # the people's subject ids, in order

    def summary(self) -> dict[str, Any]:
        groups = {PEOPLE: self.people, **self.models}
        return {
            "dataset": self.dataset.name, "reference": self.dataset.reference, "list_length": self.dataset.list_length,
            "groups": {label: {"members": group.members, **indices(group),
                               "cmr_fit": results.cmr_fit_entry(group.mean["lag_crp"], group.lags),
                               **({"runs": [str(r) for r in self.runs[label]]} if label in self.runs else {})}
                       for label, group in groups.items()},
            "distances": {label: distances(model, self.people) for label, model in self.models.items()},
        }


def person_curves(persons: list[human_data.Person]) -> GroupCurves:
    """``persons``, each through ``free_recall_counts`` of their own lists."""
    return group_curves(person_members(persons))


def person_members(persons: list[human_data.Person]) -> list[FreeRecallCurves]:
    """Each person's curves, from their own lists."""
    return [summarize(free_recall_counts(recall_positions(person.study, person.recalls), person.study.shape[1]))
            for person in persons]


def run_curves(run_dirs: list[Path], dataset: human_data.Dataset) -> GroupCurves:
    """One member per free-recall run (its test lists), after checking each is one and has the dataset's lists."""
    return group_curves(run_members(run_dirs, dataset))


def run_members(run_dirs: list[Path], dataset: human_data.Dataset) -> list[FreeRecallCurves]:
    """Each free-recall run's curves (its test lists), after checking it is one and has the dataset's lists."""
    members = []
    for run in map(RunDir, run_dirs):
        kind = kinds.for_run(run)
        if not isinstance(kind, FreeRecallResults):
            raise UsageError(f"run {run.path} is {_task(run)}: primacy humans compares free-recall runs "
                             "(FreeRecallTask)")
        loaded = kind.read(run)
        n_items = len(loaded["serial_position_curve"])
        if n_items != dataset.list_length:
            raise UsageError(f"run {run.path} recalled lists of {n_items} items and {dataset.name}'s people lists of "
                             f"{dataset.list_length}: train at L = {dataset.list_length} (configs/cpu/"
                             f"free-recall-*-L{dataset.list_length}.yaml)")
        members.append(FreeRecallCurves(
            *(torch.from_numpy(loaded[key]) for key in ("serial_position_curve", "first_recall_curve", "lag_crp_lags",
                                                        "lag_crp")),
            loaded["intrusion_rate"], loaded["repetition_rate"], loaded["mean_recalled"]))
    return members


def _task(run: RunDir) -> str:
    """How a run that is not a free-recall one is named in an error: by its task, if its summary says."""
    try:
        task = json.loads(run.summary.read_text()).get("task") or "verification"
    except (OSError, ValueError, AttributeError):
        return "not a tested free-recall run"
    return f"a {task} run"


def compare(models: dict[str, list[Path]], dataset: str | human_data.Dataset,
            persons: list[human_data.Person] | None = None) -> Comparison:
    """``models`` (label -> run directories, one per seed; none: the people alone) beside the people of ``dataset``:
    psifr's dataset of that name, or a Dataset read from a file (``people.from_file``) with its ``persons``."""
    info = human_data.dataset(dataset) if isinstance(dataset, str) else dataset
    curves = {label: run_curves(dirs, info) for label, dirs in models.items()}  # every run checked before psifr
    persons = human_data.load(info.name) if persons is None else persons
    return Comparison(info, person_curves(persons), curves, models, tuple(p.subject for p in persons))


def write(comparisons: list[Comparison], out: Path, title: str = "", fitted: FitResults | None = None) -> list[Path]:
    """humans.png/.pdf (one row per comparison), curves.csv, humans.md and summary.json (one entry per dataset) in
    ``out``;
    with ``fitted`` (the likelihood fits of the one comparison's groups) also fits.csv, parameters.png/.pdf, fits.md
    and summary.json's ``likelihood_fit``."""
    out.mkdir(parents=True, exist_ok=True)
    rows = [row for comparison in comparisons for row in _curve_rows(comparison)]
    written = figures.save(figures.humans.beside_people(
        [(c.dataset.name, c.people, c.models) for c in comparisons], title), out / "humans")
    written.append(files.write_csv(out / "curves.csv", rows))
    summary = {c.dataset.name: c.summary() for c in comparisons}
    written.append(files.write_text(out / "humans.md", markdown(comparisons, summary)))
    if fitted is not None:
        (comparison,) = comparisons
        fit_summary = cmr_fits.fit_summary(fitted.fits, fitted.free)
        summary[comparison.dataset.name]["likelihood_fit"] = {"free": fitted.free, "settings": fitted.settings,
                                                              "groups": fit_summary, "grid": fitted.grid}
        written.append(files.write_csv(out / "fits.csv", cmr_fits.fit_rows(fitted.fits)))
        written.append(files.write_text(out / "fits.md", fits_markdown(comparison, fit_summary, fitted)))
        groups = {label: (np.array([[fit.parameters[name] for name in fitted.free] for fit in members.values()]),
                          {name: (entry["ci_low"], entry["ci_high"])
                           for name, entry in fit_summary[label]["parameters"].items()})
                  for label, members in fitted.fits.items()}
        written += figures.save(figures.humans.fitted_parameters(
            groups, fitted.free, f"CMR fitted by likelihood, {comparison.dataset.reference}"), out / "parameters")
    written.append(files.write_json(out / SUMMARY, summary))
    return written


@dataclass(frozen=True)
class FitResults:
    """The likelihood fits of a comparison's groups (people first), by participant, what they were fitted with, and
    each group's BIC beside that of its lag-CRP grid cell (``cmr_fits.grid_comparison``; None where the group's
    lag-CRP has no grid fit)."""

    fits: dict[str, dict[str, LikelihoodFit]]
    free: list[str]
    settings: dict[str, Any]
    grid: dict[str, dict[str, Any] | None]


def grid_cells(comparison: Comparison) -> dict[str, CMRFit | None]:
    """Each group's cell of the canonical lag-CRP grid (people first): the fit of its mean lag-CRP that summary.json's
    ``cmr_fit`` reports, or None where there is none."""
    groups = {PEOPLE: comparison.people, **comparison.models}
    return {label: fit_free_recall(group.mean["lag_crp"], group.lags)["canonical"] for label, group in groups.items()}


def fit_groups(comparison: Comparison, out: Path, fitting: cmr_fits.FitSettings = cmr_fits.FitSettings(),
               folder: str = "fits") -> list[cmr_fits.FitGroup]:
    """The participants of a comparison as fit groups: the people (from their dataset or file), then each model's
    seeds; each group's fits in OUT/<folder>/<label>, fitted with ``fitting`` (whose ``lists`` caps the seeds' lists
    only: the people are fitted on all of theirs)."""
    dataset = comparison.dataset
    source = ("--data", str(dataset.path)) if dataset.path else ("--dataset", dataset.name)
    names = tuple(str(subject) for subject in comparison.subjects)
    groups = [cmr_fits.FitGroup(PEOPLE, source, names, out / folder / PEOPLE, replace(fitting, lists=None))]
    for label, dirs in comparison.runs.items():
        where = out / folder / cmr_fits.file_name(label).removesuffix(".json")
        groups.append(cmr_fits.FitGroup(label, ("--runs", *map(str, dirs)), tuple(d.name for d in dirs), where,
                                        fitting))
    return groups


def grid_groups(comparison: Comparison, out: Path, fitting: cmr_fits.FitSettings,
                cells: dict[str, CMRFit | None]) -> list[cmr_fits.FitGroup]:
    """The groups that have a lag-CRP grid cell (``cells``: ``grid_cells``), each fitted at that cell
    (``cmr_fits.grid_cell_spec``; otherwise as ``fit_groups`` fits it) in OUT/grid-fits/<label>."""
    return [replace(group, settings=replace(group.settings, spec=cmr_fits.grid_cell_spec(cells[group.label])))
            for group in fit_groups(comparison, out, fitting, "grid-fits") if cells[group.label] is not None]


def fit_results(groups: list[cmr_fits.FitGroup], grid_groups: list[cmr_fits.FitGroup],
                cells: dict[str, CMRFit | None]) -> FitResults:
    """The groups' fits and their grid cells' fits, read from their files (``cmr_fits.gather``)."""
    fits, at_cells = cmr_fits.gather(groups), cmr_fits.gather(grid_groups)
    grid = {label: None if label not in at_cells else cmr_fits.grid_comparison(fits[label], at_cells[label],
                                                                                 cells[label])
            for label in fits}
    settings = groups[-1].settings  # a model's, if any: with its cap on lists
    return FitResults(fits, list(settings.spec.names), settings.as_dict(), grid)


TABLE_HEADER = ("group", "n", "recall probability, first / middle / last", "first recall of item 1 / item L",
                "lag-CRP −1 / +1", "primacy", "recency", "forward asymmetry", "CMR fit",
                "RMSE recall / first recall / lag-CRP")
RMSE_CURVES = ("spc", "pfr", "lag_crp")  # comparison.distances' rmse_<curve>, in the table's order


def markdown(comparisons: list[Comparison], summary: dict[str, dict[str, Any]]) -> str:
    """The table of the comparisons for docs: a row per group of each dataset, the people first. Curves are the
    mean ± SE over the group's members (people, or a model's seeds) at the first and the last position (recall
    probability and first recall) and at lags −1 and +1; "middle" is the range of the mean recall probability over
    the middle half of the positions. The indices are those of the group's mean curves (no SE), the CMR fit is the
    paper grid's fit of its mean lag-CRP (distance; β_enc, β_rec, γ_FT), RMSE each model's distance to the people;
    ``summary``: each comparison's ``summary()`` by dataset, as ``write`` has them (its CMR fits are not made twice)."""
    lines = markdown_header(TABLE_HEADER)
    for comparison in comparisons:
        ours = summary[comparison.dataset.name]
        for label, group in {PEOPLE: comparison.people, **comparison.models}.items():
            entry, far = ours["groups"][label], ours["distances"].get(label)
            quarter = group.n_items // 4
            middle = group.mean["spc"][quarter:group.n_items - quarter]
            span = "-".join(dict.fromkeys(f"{x:.2f}" for x in (middle.min(), middle.max())))
            lags = np.array([-1, 1])
            lag = zip(group.at_lags("mean", lags), group.at_lags("se", lags))
            fit = entry["cmr_fit"].get("paper")
            cells = [f"**L = {group.n_items}**, people ({comparison.dataset.name})" if label == PEOPLE else label,
                     str(group.members),
                     f"{_pm(group, 'spc', 0)} / {span} / {_pm(group, 'spc', -1)}",
                     f"{_pm(group, 'pfr', 0)} / {_pm(group, 'pfr', -1)}",
                     " / ".join(_plus_minus(m, s) for m, s in lag),
                     *(_signed(entry[key]) for key in ("primacy_index", "recency_index", "forward_asymmetry")),
                     "—" if fit is None else (f"{fit['distance']:.3f}; {fit['beta_enc']:.2f}, {fit['beta_rec']:.2f}, "
                                             f"{fit['gamma_ft']:.2f}"),
                     "—" if far is None else " / ".join(f"{far[f'rmse_{key}']:.3f}" for key in RMSE_CURVES)]
            lines.append(markdown_row(cells))
    return "\n".join(lines) + "\n"


def fits_markdown(comparison: Comparison, fit_summary: dict[str, Any], fitted: FitResults) -> str:
    """The likelihood fits' two tables for docs. First, each free parameter's mean over a group's members (people,
    then each model's seeds), its SD and the bootstrap 95% interval of the mean [low, high], and each group's summed
    log-likelihood, events and BIC. Then each group's BIC at its lag-CRP grid cell beside its own fits' (the rows of
    ``summary.json``'s ``likelihood_fit.grid``; groups without a grid cell are left out)."""
    name, n_items = comparison.dataset.name, comparison.people.n_items
    labels = list(fit_summary)
    title = {label: f"{name} people" if label == PEOPLE else label for label in labels}
    header = ["parameter", *(f"{title[label]} (n = {fit_summary[label]['members']})" for label in labels)]
    lines = markdown_header(header)
    for parameter in fitted.free:
        cells = []
        for label in labels:
            entry = fit_summary[label]["parameters"][parameter]
            sd = "" if entry["sd"] is None else f", SD {entry['sd']:.3f}"
            cells.append(f"{entry['mean']:.3f}{sd} [{entry['ci_low']:.3f}, {entry['ci_high']:.3f}]")
        lines.append(markdown_row([parameter, *cells]))
    totals = [f"{_number(g['log_likelihood'])}, {g['n']:,}, {_number(g['bic'])}" for g in map(fit_summary.get, labels)]
    lines.append(markdown_row(["summed log-likelihood, n events, BIC", *totals]))
    header = ["group", "grid cell (β_enc, β_rec, γ_FT)", "log-likelihood at the cell / fitted",
              "BIC at the cell / fitted", "ΔBIC", "members better fitted"]
    lines += ["", *markdown_header(header)]
    for label, grid in fitted.grid.items():
        if grid is None:
            continue
        cell = ", ".join(f"{grid['cell'][key]:.2f}" for key in cmr_fits.GRID_CELL)
        lines.append(markdown_row([
            title[label] if label == PEOPLE else f"{label}, L = {n_items}", cell,
            f"{_number(grid['log_likelihood'])} / {_number(grid['likelihood_log_likelihood'])}",
            f"{_number(grid['bic'])} / {_number(grid['likelihood_bic'])}",
            _number(grid["delta_bic"], signed=True), f"{grid['members_better']} of {grid['members']}"]))
    return "\n".join(lines) + "\n"


def _number(x: float, signed: bool = False) -> str:
    """A log-likelihood or BIC as the docs write it: thousands separated, one decimal, a true minus sign."""
    return (f"{x:+,.1f}" if signed else f"{x:,.1f}").replace("-", "−")


def _pm(group: GroupCurves, curve: str, index: int) -> str:
    return _plus_minus(group.mean[curve][index], group.se[curve][index])


def _plus_minus(mean: float, se: float) -> str:
    """mean ± SE to 3 decimals; a mean and SE of exactly 0 (a position no member ever chose) as 0.000."""
    return "0.000" if mean == 0 and se == 0 else f"{mean:.3f} ± {se:.3f}"


def _signed(x: float) -> str:
    return f"{x:+.3f}".replace("-", "−")


def _curve_rows(comparison: Comparison) -> list[dict[str, Any]]:
    rows = []
    for label, group in {PEOPLE: comparison.people, **comparison.models}.items():
        base = {"dataset": comparison.dataset.name, "group": label, "members": group.members}
        for key in ("spc", "pfr"):
            rows += [{**base, "curve": key, "x": i + 1, "mean": files.plain(float(m)), "se": files.plain(float(s))}
                     for i, (m, s) in enumerate(zip(group.mean[key], group.se[key]))]
        rows += [{**base, "curve": "lag_crp", "x": int(lag), "mean": files.plain(float(m)),
                  "se": files.plain(float(s))}
                 for lag, m, s in zip(COMPARED_LAGS, group.at_lags("mean"), group.at_lags("se"))]
    return rows


def run_groups(paths: list[Path], labels: list[str] | None = None) -> dict[str, list[Path]]:
    """Command-line paths as models: a run directory is one seed; a directory of run directories (seed0, seed1, ...,
    as `primacy reproduce` writes) is one model with a seed each. Labels: ``labels``, else each path's name."""
    if labels is not None and len(labels) != len(paths):
        raise UsageError(f"labels={labels} names {len(labels)} models for {len(paths)} paths: give one label per path")
    if len(paths) > len(figures.humans.MODEL_COLORS):
        most = len(figures.humans.MODEL_COLORS)
        raise UsageError(f"runs: {len(paths)} models given; the figure draws at most {most}, one colour each: "
                         "compare fewer at a time")
    groups = {}
    for i, path in enumerate(paths):
        if not path.is_dir():
            raise UsageError(f"run {path} does not exist: give free-recall run directories")
        seeds = [path] if _tested(path) else sorted(p for p in path.iterdir() if _tested(p))
        if not seeds:
            raise UsageError(f"run {path} has no results/ and no run directories with results/ inside: give runs that "
                             "`primacy fit` tested")
        label = labels[i] if labels else path.name
        if label in groups or label == PEOPLE:
            raise UsageError(f"label {label!r} is used twice (or is {PEOPLE!r}): give --labels")
        groups[label] = seeds
    return groups


def _tested(path: Path) -> bool:
    """Whether ``path`` is a run directory with results (rather than a directory of runs)."""
    return RunDir(path).results.is_dir()
