"""``primacy reproduce recall-like-people`` (issue 71): which ingredient (backbone, objective, delay) gives which
phenomenon of human free recall. Six backbones x two objectives (the order-agnostic loss, reward) x three conditions
(immediate, delayed and continual-distractor free recall) at L = 24, Morton2013's list length; each seed scored on
the phenomena (``primacy.analysis.behaviour.phenomena``) from its test lists, as each of Morton2013's people is from
theirs; a row's value is the mean over its seeds ± SE, and a cell says whether its direction (by
``primacy.analysis.evidence``'s one rule, >= 2 SE) matches the people's. People's data have the immediate condition
only: the delay's effects are checked in direction against the literature (``LITERATURE``). Written:
recall-like-people.md (the table, the directions it checks against, the cells left out and why, the commands that
fit CMR to each seed, and the fits' table once they are made), recall-like-people.csv (every number of the table),
recall-like-people-cmr.csv (the fits', where there are fits) and recall-like-people.png/.pdf (each objective and
condition's curves beside Morton2013's)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from primacy import figures, files, registry
from primacy.analysis.behaviour.comparison import group_curves
from primacy.analysis.behaviour.phenomena import PHENOMENA, first_recall_chance, phenomena
from primacy.analysis.evidence import Estimate, Word, word
from primacy.rundir.layout import SUMMARY
from primacy.workflows.humans import page
from primacy.workflows.humans import people as human_data
from primacy.workflows.paper.spec import FigureSpec, Panel
from primacy.workflows.tables import markdown_header, markdown_row

NAME, LAYOUT, DATASET, N_ITEMS = "recall-like-people", "phenomena", "Morton2013", 24
# label, config part, the registered backbone it needs when a plugin brings it
MODELS = (("S4D", "s4d", ""), ("LSTM", "lstm", ""), ("Transformer", "transformer", ""),
          ("Mamba", "mamba", "MambaBackbone"), ("DeltaNet", "deltanet", ""), ("Seq2seq", "seq2seq", ""))
OBJECTIVES = (("order-agnostic", "agnostic"), ("reward", "reward"))
CONDITIONS = ("immediate", "delayed", "continual")
PARTS = "parts/recall-like-people"  # the grid's config parts, under configs/
BY_CONDITION = ("lstm",)  # backbone parts with a setting per condition (the LSTM's chrono span, the whole sequence)
# Cells of the grid that are not run, and why (docs/humans.md, "Which ingredient makes recall human-like").
LEFT_OUT: dict[tuple[str, str, str], str] = {
    ("Transformer", "reward", "continual"): "not affordable at the CPU scale: 100 steps took 333 s on one thread (2 "
    "busy cores, 2026-12-02), so its 6,000 steps would take about 5.5 h a seed",
}
DELAY, RETURN = "delay_loss", "continual_return"  # recency, delayed - immediate; continual - delayed
COLUMNS = (*PHENOMENA, DELAY, RETURN)
HEADERS = {"recency_index": "recency", "primacy_index": "primacy",
           "first_recall_last": "first recall from the last 6 (chance 0.25)", "forward_asymmetry": "lag-CRP +1 − −1",
           DELAY: "recency, delayed − immediate", RETURN: "recency, continual − delayed"}
LITERATURE = {
    "Glanzer & Cunitz (1966)": "a filled delay before recall removes recency and leaves the earlier positions: no "
                               "recency in delayed recall, and less than in immediate recall",
    "Bjork & Whitten (1974)": "distractors after every item as well (continual distractor) bring recency back: recency "
                              "in continual-distractor recall, and more than in delayed recall",
}
EXPECTED = {  # the literature's directions for the conditions people's data do not have
    "delayed": {"recency_index": "neither", DELAY: "negative"},
    "continual": {"recency_index": "positive", RETURN: "positive"},
}
MARKS = {"positive": "+", "negative": "−", "neither": "0"}


def config_name(model: str, objective: str, condition: str) -> str:
    """A cell's config name (its runs' folder), from its model's part, its objective's and its condition."""
    return f"{NAME}-{model}-{objective}-{condition}-L{N_ITEMS}"


def config_parts(model: str, objective: str, condition: str) -> tuple[str, ...]:
    """The files under configs/ that compose a cell's config, in order (later ones win): the CPU trainer, the grid's
    task, the condition, the backbone with its own training (and its setting for the condition), then the objective,
    whose reward part sets the budget every backbone gets by reward."""
    backbone = [f"{PARTS}/backbone/{model}.yaml"] + [f"{PARTS}/backbone/{model}-{condition}.yaml"] * (
        model in BY_CONDITION)
    return ("parts/trainer/cpu.yaml", f"{PARTS}/task.yaml", f"{PARTS}/condition/{condition}.yaml", *backbone,
            f"{PARTS}/objective/{objective}.yaml")


def cells() -> dict[str, tuple[str, ...]]:
    """Every cell of the grid, those in ``LEFT_OUT`` included: its config name and the parts that compose it."""
    return {config_name(part, short, condition): config_parts(part, short, condition)
            for _, part, _ in MODELS for _, short in OBJECTIVES for condition in CONDITIONS}


def figure() -> FigureSpec:
    """The grid as a figure of ``primacy reproduce``: a panel per cell not in ``LEFT_OUT``, CPU scale only, each
    composed from its parts (``config_parts``)."""
    panels = tuple(Panel(f"{label}/{objective}/{condition}", f"{label}, {objective}, {condition} recall",
                         (config_name(part, short, condition), ""), requires=needs,
                         parts=(config_parts(part, short, condition), ()))
                   for label, part, needs in MODELS for objective, short in OBJECTIVES for condition in CONDITIONS
                   if (label, objective, condition) not in LEFT_OUT)
    return FigureSpec(NAME, "Free recall: which backbone, objective and delay recall like people", panels, LAYOUT)


def cell_of(panel: Panel) -> tuple[str, str, str]:
    model, objective, condition = panel.label.split("/")
    return model, objective, condition


def _tested(key: str, estimate: Estimate) -> Estimate:
    """What the direction of ``key`` is read from: first recall from the end against its chance, the rest against 0."""
    offset = first_recall_chance(N_ITEMS) if key == "first_recall_last" else 0.0
    return Estimate(estimate.mean - offset, estimate.se, estimate.n)


def estimates(members: list[Any]) -> dict[str, Estimate]:
    """Mean ± SE over members (curves) of each phenomenon, from each member's own value."""
    values = [phenomena(member) for member in members]
    return {key: Estimate.of([v[key] for v in values]) for key in PHENOMENA}


def table_rows(people: dict[str, Estimate], groups: dict[tuple[str, str, str], dict[str, Estimate]],
               configs: dict[tuple[str, str, str], str]) -> list[dict[str, Any]]:
    """The table's rows: the people first, then each cell of ``groups`` (model, objective, condition) in the grid's
    order; each column's value, SE, n, its direction by the rule (``word``), the direction expected (the people's
    for the immediate condition, the literature's for the others) and whether they match."""
    rows = [_row(("people", "", "immediate"), DATASET, people, {})]
    immediate = {key: word(_tested(key, people[key])) for key in PHENOMENA}
    for (model, objective, condition), found in groups.items():
        found = dict(found)
        earlier = {"delayed": ("immediate", DELAY), "continual": ("delayed", RETURN)}.get(condition)
        if earlier and (model, objective, earlier[0]) in groups:
            before = groups[model, objective, earlier[0]]["recency_index"]
            found[earlier[1]] = found["recency_index"].minus(before)
        expected = immediate if condition == "immediate" else EXPECTED[condition]
        rows.append(_row((model, objective, condition), configs[model, objective, condition], found, expected))
    return rows


def _row(cell: tuple[str, str, str], config: str, found: dict[str, Estimate],
         expected: dict[str, Word | None]) -> dict[str, Any]:
    row: dict[str, Any] = dict(zip(("model", "objective", "condition"), cell), config=config)
    for key in COLUMNS:
        estimate = found.get(key)
        said = None if estimate is None else word(_tested(key, estimate))
        wanted = expected.get(key)
        row.update({key: None if estimate is None else estimate.mean, f"{key}_se": None if estimate is None else
                    estimate.se, f"{key}_n": None if estimate is None else estimate.n, f"{key}_direction": said,
                    f"{key}_expected": wanted,
                    f"{key}_matches": None if wanted is None or said is None else said == wanted})
    return row


def markdown(rows: list[dict[str, Any]], left_out: dict[tuple[str, str, str], str], fit_commands: list[str],
             cmr: list[dict[str, Any]] | None = None) -> str:
    """The table for docs: a cell is mean ± SE, its direction (+, −, 0: by the >= 2 SE rule) and, where a direction
    is expected, ✓ (matches) or ✗; n in its own column (a difference's n is the smaller of its two rows'); then the
    CMR fits' table (``cmr_rows``) where there are fits."""
    header = ["model", "objective", "condition", "n", *(HEADERS[key] for key in COLUMNS)]
    lines = markdown_header(header)
    for row in rows:
        cells = [row["model"] if row["model"] != "people" else f"people ({row['config']})", row["objective"] or "—",
                 row["condition"], str(row["recency_index_n"])]
        lines.append(markdown_row(cells + [_cell(row, key) for key in COLUMNS]))
    chance = first_recall_chance(N_ITEMS)
    lines += ["", f"Mean ± SE over seeds (people: over persons); n seeds per row. A direction is +, − or 0 by the one "
              f"rule (|mean| >= 2 SE, else 0; first recall against its chance {chance:.2f}, the rest against 0). ✓: "
              "the direction people show (immediate rows: Morton2013's people by the same rule) or the literature "
              "reports (delayed and continual rows); ✗: another; no mark: no direction is expected.", ""]
    lines += [f"- {source}: {finding}." for source, finding in LITERATURE.items()]
    lines += ["", *reproduced(rows)]
    if left_out:
        lines += ["", "Cells without a row:"] + [f"- {'/'.join(cell)}: {why}" for cell, why in left_out.items()]
    lines += ["", "CMR fitted by likelihood to each seed beside the people, with ΔBIC against the lag-CRP grid "
              "(`primacy humans --fit`; one command per objective and condition, six models each):", "", "```bash",
              *fit_commands, "```"]
    if cmr:
        lines += ["", *cmr_markdown(cmr)]
    return "\n".join(lines) + "\n"


FITTED = ("B_enc", "B_start", "B_rec", "T")  # CMR's parameters the page shows: context drift at study, at the start
# of recall and during it, and the choice's temperature (every one is in the fits' summary.json)


def cmr_rows(out: Path, cells: list[tuple[str, str, str]]) -> list[dict[str, Any]]:
    """CMR fitted by likelihood, read back from the folders ``fit_commands`` names (OUT/cmr-OBJECTIVE-CONDITION, each
    `primacy humans --fit`'s summary.json) where they exist: the people once, then each of ``cells`` that was fitted:
    its members, the log-likelihood per recall event, ΔBIC of the lag-CRP grid's cell over the likelihood fit (> 0:
    the fit explains the recalls better) with how many members it fits better, and the mean fitted parameters."""
    rows: list[dict[str, Any]] = []
    for objective, _ in OBJECTIVES:
        for condition in CONDITIONS:
            summary = out / f"cmr-{objective}-{condition}" / SUMMARY
            if not summary.is_file():
                continue
            fit = json.loads(summary.read_text())[DATASET]["likelihood_fit"]
            labels = ["people"] * (not rows) + [model for model, o, c in cells if (o, c) == (objective, condition)]
            for label in (label for label in labels if label in fit["groups"]):
                group, grid = fit["groups"][label], fit["grid"][label]
                rows.append({"model": label, "objective": "" if label == "people" else objective,
                             "condition": "immediate" if label == "people" else condition,
                             "members": group["members"], "log_likelihood_per_recall": group["log_likelihood"] /
                             group["n"], "delta_bic": grid["delta_bic"], "members_better": grid["members_better"],
                             **{name: group["parameters"][name]["mean"] for name in FITTED}})
    return rows


def cmr_markdown(rows: list[dict[str, Any]]) -> list[str]:
    """The fits as a table: one line per fitted group."""
    header = ["model", "objective", "condition", "n", "log-likelihood per recall",
              "ΔBIC, grid cell − likelihood fit (members better)", *(f"mean {name}" for name in FITTED)]
    lines = ["CMR by likelihood (the fits above that exist):", "", *markdown_header(header)]
    for row in rows:
        name = f"people ({DATASET})" if row["model"] == "people" else row["model"]
        cells = [name, row["objective"] or "—", row["condition"], str(row["members"]),
                 f"{row['log_likelihood_per_recall']:.3f}".replace("-", "−"),
                 f"{row['delta_bic']:+,.1f} ({row['members_better']} of {row['members']})".replace("-", "−"),
                 *(f"{row[key]:.3f}" for key in FITTED)]
        lines.append(markdown_row(cells))
    return lines


def reproduced(rows: list[dict[str, Any]]) -> list[str]:
    """Which rows show each phenomenon as people (or the literature) do, read off the table's ✓ and ✗: a list item
    per column, "none" where every row checked differs, and the rows that match on every column they are checked
    on. Rows without an SE (one seed) are checked on nothing."""
    def name(row: dict[str, Any]) -> str:
        return f"{row['model']}/{row['objective']}/{row['condition']}"

    models = rows[1:]  # the people are the reference
    if not any(row[f"{key}_matches"] is not None for row in models for key in COLUMNS):
        return ["No row is checked against people yet: a row needs an SE, so at least two seeds."]
    lines = ["Which rows show each phenomenon as people do (✓ above; a row is checked where it has an SE and a "
             "direction is expected):", ""]
    for key in COLUMNS:
        checked = [row for row in models if row[f"{key}_matches"] is not None]
        if not checked:
            continue
        hits = [name(row) for row in checked if row[f"{key}_matches"]]
        lines.append(f"- {HEADERS[key]}: {', '.join(hits) if hits else 'none'} ({len(hits)} of {len(checked)} "
                     "rows checked)")
    every = [name(row) for row in models if any(row[f"{key}_matches"] is not None for key in COLUMNS)
             and all(row[f"{key}_matches"] is not False for key in COLUMNS)]
    checked_rows = sum(any(row[f"{key}_matches"] is not None for key in COLUMNS) for row in models)
    lines.append(f"- every phenomenon its row is checked on: {', '.join(every) if every else 'none'} ({len(every)} "
                 f"of {checked_rows} rows)")
    return lines


def _cell(row: dict[str, Any], key: str) -> str:
    if row[key] is None:
        return "—"
    se = "no SE" if row[f"{key}_se"] is None else f"{row[f'{key}_se']:.3f}"
    text = f"{row[key]:+.3f} ± {se}".replace("-", "−")
    mark = MARKS.get(row[f"{key}_direction"], "")
    match = {True: " ✓", False: " ✗", None: ""}[row[f"{key}_matches"]]
    return f"{text} ({mark}{match})" if mark else text


def fit_commands(groups: dict[tuple[str, str, str], list[Path]], out: Path) -> list[str]:
    """`primacy humans --fit` over each objective and condition's models (at most six: the figure's colours), each
    into OUT/cmr-OBJECTIVE-CONDITION; the people's fits, the same in every one, can be copied from the first."""
    commands = []
    for objective, _ in OBJECTIVES:
        for condition in CONDITIONS:
            chosen = {model: dirs for (model, o, c), dirs in groups.items() if (o, c) == (objective, condition)}
            if not chosen:
                continue
            folders = [str(dirs[0].parent) for dirs in chosen.values()]  # <out>/<config>: its seeds
            commands.append(f"primacy humans {' '.join(folders)} --labels {' '.join(chosen)} --dataset {DATASET} "
                            f"--fit --fit_lists 48 --out {out / f'cmr-{objective}-{condition}'}")
    return commands


def draw(spec: FigureSpec, scale: str, out: Path, runs: list[Any]) -> list[Path]:
    """The table (.md, .csv) and the figure of the finished runs (each with ``panel``, its config name, and
    ``dir``) beside Morton2013's people, in ``out``."""
    info = human_data.dataset(DATASET)
    dirs = {cell_of(p): [run.dir for run in runs if run.panel == p.config(scale)] for p in spec.panels}
    members = {cell: page.run_members(found, info) for cell, found in dirs.items()}  # every run checked before psifr
    persons = page.person_members(human_data.load(DATASET))
    groups = {cell: estimates(found) for cell, found in members.items()}
    configs = {cell_of(p): p.config(scale) for p in spec.panels}
    rows = table_rows(estimates(persons), groups, configs)
    left_out = {**LEFT_OUT, **{cell: _absent(cell) for cell in _grid() if cell not in LEFT_OUT and cell not in groups}}
    people = group_curves(persons)
    curves = [(f"{DATASET}, immediate", people, {model: group_curves(found) for (model, o, c), found in members.items()
                                                 if (o, c) == (objective, condition)})
              for objective, _ in OBJECTIVES for condition in CONDITIONS]
    titles = [f"{objective}, {condition} recall" for objective, _ in OBJECTIVES for condition in CONDITIONS]
    shown = [(row, title) for row, title in zip(curves, titles) if row[2]]
    n_seeds = max(len(found) for found in dirs.values())
    fig = figures.humans.beside_people([row for row, _ in shown], f"{spec.title} · {scale} scale · {n_seeds} "
                                       f"seed{'s' * (n_seeds > 1)} per cell", row_titles=[t for _, t in shown])
    cmr = cmr_rows(out, list(groups))
    written = [*figures.save(fig, out / NAME), files.write_csv(out / f"{NAME}.csv", rows)]
    if cmr:
        written.append(files.write_csv(out / f"{NAME}-cmr.csv", cmr))
    return [*written, files.write_text(out / f"{NAME}.md", markdown(rows, left_out, fit_commands(dirs, out), cmr))]


def _absent(cell: tuple[str, str, str]) -> str:
    """Why a cell of the grid that is not left out has no row: its backbone missing here, or no run of it done."""
    needs = next(needs for label, _, needs in MODELS if label == cell[0])
    if needs and needs not in registry.names():
        return f"not run here: its backbone ({needs}) is not installed"
    return "no run of it is done in this folder (still training, or --panels left it out)"


def _grid() -> list[tuple[str, str, str]]:
    return [(label, objective, condition) for label, _, _ in MODELS for objective, _ in OBJECTIVES
            for condition in CONDITIONS]
