"""The figures `primacy reproduce` makes: which config draws each panel at each scale, and how a finished set of runs
becomes the figure (each panel's `primacy aggregate`, or for induction the analysis of every checkpoint; the page in
the paper's layout, and a table of its numbers)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np

from primacy import figures, files
from primacy.analysis.behaviour.cmr.grid import CMRGrid
from primacy.analysis.behaviour.comparison import mean_and_se
from primacy.analysis.behaviour.serial_position import quarter
from primacy.analysis.heads.emergence import across_seeds, emergence_step, measures
from primacy.analysis.heads.probes import early_minus_late
from primacy.errors import UsageError
from primacy.rundir import results
from primacy.rundir.kinds import StudyQueryResults
from primacy.rundir.layout import HeadsDir, ProbesDir, RunDir
from primacy.workflows import aggregate
from primacy.workflows.humans import page, people
from primacy.workflows.induction.analyses import (
    AblationSettings,
    ICLSettings,
    ablate_checkpoint,
    analyze_checkpoints,
    kept_analyses,
    ranked_heads,
    write_emergence,
)
from primacy.workflows.induction.probes import ProbeRun, analyze_probes
from primacy.workflows.induction.sources import TrainedCheckpoint, trained_checkpoints
from primacy.workflows.paper import phenomena
from primacy.workflows.paper.selection import PanelDt, panel_dt
from primacy.workflows.paper.spec import AGGREGATES, FigureSpec, Panel, _panel
from primacy.workflows.runs import SCALES
from primacy.workflows.tables import (
    DT_QUANTILES,
    SMALL_DT,
    csv_rows,
    emergence_table,
    markdown_table,
    unrounded,
    weights_table,
)

B = ("fig3b-hippo-legs-L32", "fig3b-hippo-legs-L128")
E = ("fig3e-hippo-legs-dt1-L32", "fig3e-hippo-legs-dt1-L128")
F = ("fig3f-hippo-legs-L16", "fig3f-hippo-legs-L64")
G = ("fig3g-hippo-legs-L64", "fig3g-hippo-legs-L256")
FIGURES = {
    "fig3": FigureSpec("fig3", "Fig. 3: accuracy by study and query position", (
        _panel("A", "S4, all trained, LegS", "fig3a-s4-legs-L32", "fig3a-s4-legs-L128"),
        _panel("B", "HiPPO-LegS (A, B frozen)", *B),
        _panel("C", "HiPPO-LagT", "fig3c-hippo-lagt-L32", "fig3c-hippo-lagt-L128"),
        _panel("D", "HiPPO-FouT", "fig3d-hippo-fout-L32", "fig3d-hippo-fout-L128"),
        _panel("E", "HiPPO-LegS, Δt init [0.001, 1]", *E),
        _panel("F", "HiPPO-LegS, short list", *F),
        _panel("G", "HiPPO-LegS, long list", *G),
        _panel("H", "LSTM", "fig3h-lstm-L32", "fig3h-lstm-L128"),
    ), "heatmaps", reference="B"),
    "fig4": FigureSpec("fig4", "Fig. 4: Δt over training (HiPPO-LegS)", (
        _panel("1", "Δt init [0.001, 0.1]", *B),
        _panel("2", "Δt init [0.001, 1]", *E),
        _panel("3", "Δt init [0.0001, 0.01]", "fig4-hippo-legs-dtsmall-L32", "fig4-hippo-legs-dtsmall-L128"),
        _panel("4", "short list", *F),
        _panel("5", "long list", *G),
        _panel("6", "Δt frozen (footnote)", "fig4-hippo-legs-frozen-dt-L32", "fig4-hippo-legs-frozen-dt-L128"),
    ), "dt", reference="1"),
    "backbones": FigureSpec("backbones", "Memory verification by backbone (Fig. 3 and the text)", (
        _panel("S4D", "frozen LegS", "quickstart", "verification-s4d-legs-L128"),
        _panel("LSTM", "one layer", "fig3h-lstm-L32", "fig3h-lstm-L128"),
        _panel("Transformer", "two layers", "transformer-L32", "transformer-L128"),
        _panel("Mamba", "plugin", "quickstart-mamba", "mamba-L128"),
        _panel("xLSTM", "plugin, m + s", "quickstart-xlstm", "xlstm-L128"),
    ), "heatmaps", reference="S4D"),
    "humans": FigureSpec("humans", "Free recall, models beside people", tuple(
        _panel(f"{label} L{n}", f"{title}, L = {n}", f"free-recall-{config}-L{n}", f"free-recall-{config}-L{n}")
        for n in (24, 16)
        for label, title, config in (("S4D", "S4D, HiPPO-LegS", "s4d-legs"), ("LSTM", "LSTM", "lstm"),
                                     ("Transformer", "Transformer", "transformer"))), "humans"),
    "hybrids": FigureSpec("hybrids", "Free recall: S4D, and hybrids with a window of 2 or 8 recent positions, "
                                    "beside people", tuple(
        _panel(f"{label} L{n}", f"{title}, L = {n}", f"free-recall-hybrid-{config}-L{n}",
               f"free-recall-hybrid-{config}-L{n}")
        for n in (24, 16)
        for label, title, config in (("S4D-alone", "the hybrid's S4D layer alone", "ssm"),
                                     ("S4D+window-2", "S4D, then attention over 2 positions", "w2"),
                                     ("S4D+window-8", "S4D, then attention over 8 positions", "w8"))), "humans"),
    "tasks": FigureSpec("tasks", "The task quickstarts by backbone: delayed reconstruction, associative recall and "
                              "free recall", tuple(
        _panel(f"{task}/{backbone}", "", f"quickstart-{task}{suffix}", "")  # CPU-scale configs only
        for task in ("reconstruction", "recall", "free-recall")
        for backbone, suffix in (("S4D", ""), ("LSTM", "-lstm"), ("Transformer", "-transformer"))), AGGREGATES),
    "transformer": FigureSpec("transformer", "Appendix: the Transformer at the ceiling", (
        _panel("T", "Transformer", "transformer-L32", "transformer-L128"),
    ), "probes"),
    "weights": FigureSpec("weights", "Where the queries' weights fall on memory verification: heads, units and "
                          "kernels by study position", (
        _panel("S4D", "channels, convolution kernel", "quickstart", "verification-s4d-legs-L128"),
        _panel("Transformer", "attention heads", "transformer-L32", "transformer-L128"),
        _panel("Mamba", "inner channels, selective scan", "quickstart-mamba", "mamba-L128"),
        _panel("xLSTM", "mLSTM heads", "quickstart-xlstm", "xlstm-L128"),
    ), "weights", reference="S4D"),
    "induction": FigureSpec("induction", "Induction heads and CMR over training (Ji-An et al. 2024, Fig. 7)", (
        _panel("I", "Transformer trained on repeated random tokens", "induction-attn-2L", "induction-4L"),
    ), "emergence"),
    # Units per head: as many heads per layer as the Transformer's (4 at cpu scale, 8 at paper scale). At both scales
    # the task's vocabulary is 64 (induction-v64-*), which the attention-free models learn at CPU scale.
    "influence": FigureSpec("influence", "Induction without attention: heads, channels and kernels over training", (
        _panel("Transformer", "attention heads", "induction-v64-attn-2L", "induction-v64-attn-4L"),
        _panel("Mamba", "inner channels, selective scan", "induction-v64-mamba-2L", "induction-v64-mamba-4L", (32, 64)),
        _panel("xLSTM", "mLSTM heads", "induction-v64-xlstm-2L", "induction-v64-xlstm-4L"),
        _panel("S4D", "channels, convolution kernel", "induction-v64-s4d", "induction-v64-s4d", (16, 32)),
    ), "emergence"),
    phenomena.NAME: phenomena.figure(),  # backbones x objectives x delays beside people (issue 71)
}


def draw(spec: FigureSpec, scale: str, out: Path, runs: list[Any]) -> list[Path]:
    """Aggregates each panel's runs into ``out/<panel>/mean`` and draws the figure and its table in ``out``; returns
    the files written. ``runs`` have ``panel`` (config name) and ``dir``."""
    if spec.layout == "emergence":
        return _draw_emergence(spec, scale, out, runs)
    if spec.layout == "humans":
        return _draw_humans(spec, scale, out, runs)
    if spec.layout == "weights":
        return _draw_weights(spec, scale, out, runs)
    if spec.layout == phenomena.LAYOUT:
        return phenomena.draw(spec, scale, out, runs)
    panels = []
    for panel in spec.panels:
        name = panel.config(scale)
        dirs = [run.dir for run in runs if run.panel == name]
        summary = aggregate.aggregate(dirs, out / name / "mean")
        matrix, distractor = StudyQueryResults().mean_matrix(out / name / "mean")  # written just now by aggregate
        histories = [results.read_dt_history(RunDir(d).dt_history) for d in dirs if RunDir(d).dt_history.is_file()]
        panels.append(PanelResult(panel, name, dirs, summary, matrix, distractor, histories))
    title = f"{spec.title} · {scale} scale · {len(panels[0].dirs)} seed{'s' * (len(panels[0].dirs) > 1)}"
    written = []
    for stem, build in _PAGES[spec.layout]:
        written += figures.save(build(panels, title), out / (stem or spec.name))
    if spec.layout == "probes":
        written += [path for panel in panels for path in _probes(panel, ProbesDir.inside(out / panel.name / "mean"))]
    rows = [panel.row() for panel in panels]
    reference = next((row for row in rows if row["panel"] == spec.reference), None)
    return [*written, files.write_csv(out / f"{spec.name}.csv", csv_rows(rows)),
            files.write_text(out / f"{spec.name}.md", markdown_table(rows, reference))]


@dataclass
class PanelResult:
    panel: Panel
    name: str
    dirs: list[Path]
    summary: dict[str, Any]  # the aggregate's summary.json
    matrix: np.ndarray  # L L, mean over seeds
    distractor: np.ndarray  # L
    histories: list[dict[str, np.ndarray]]  # one dt_history per seed; [] when the backbone has no Δt

    def row(self) -> dict[str, Any]:
        """The panel's line of the figure's table: mean over seeds of the headline numbers, the bottom-left block
        (the last quarter of the study items queried in the first quarter of the probes: the paper's worst cells)
        and Δt quantiles over every channel of every seed, before and after training."""
        n = self.matrix.shape[0]
        q = quarter(n)
        row = {"panel": self.panel.label, "config": self.name, "seeds": len(self.dirs), "n_items": n}
        for key in ("overall_accuracy", "early_minus_late", "primacy_index", "recency_index", "early_query_decay"):
            row[key] = unrounded(self.summary[key]["mean"])
            row[f"{key}_se"] = unrounded(self.summary[key]["se"])
        row["bottom_left"] = unrounded(float(np.nanmean(self.matrix[n - q:, :q])))
        row["rest"] = unrounded(float(np.nanmean(np.delete(self.matrix[:, :q], np.s_[n - q:], axis=0))))
        for when, index in (("initial", 0), ("final", -1)):
            dt = np.concatenate([h["dt"][index] for h in self.histories]) if self.histories else None
            for quantile in DT_QUANTILES:
                value = None if dt is None else unrounded(np.quantile(dt, quantile))
                row[f"dt_{when}_q{round(quantile * 100):02d}"] = value
            row[f"dt_{when}_below_{SMALL_DT}"] = None if dt is None else unrounded(float(np.mean(dt <= SMALL_DT)))
            medians = [float(np.median(h["dt"][index])) for h in self.histories]  # one per seed
            mean, se = mean_and_se(np.array(medians)[:, None]) if medians else ([None], [None])
            row[f"dt_{when}_median"], row[f"dt_{when}_median_se"] = unrounded(mean[0]), unrounded(se[0])
        return row


def _panel_title(p: PanelResult) -> str:
    """A panel's title on the page: what it is, its list length and how many seeds its numbers average."""
    return f"{p.panel.title} · L={p.matrix.shape[0]} · n={len(p.dirs)}"


def _heatmaps(panels: list[PanelResult], title: str) -> plt.Figure:
    """The panels' mean heatmaps, their marginal curves with standard-error bands over seeds."""
    curves = ("serial_position_curve", "query_position_curve")
    return figures.accuracy.fig3_page([(p.panel.label, _panel_title(p), p.matrix, p.distractor,
                                        tuple(p.summary[curve]["se"] for curve in curves)) for p in panels], title)


def _dt_columns(panels: list[PanelResult], title: str) -> plt.Figure:
    return figures.dt.fig4_page([(f"{p.panel.label}  {_panel_title(p)}", p.histories) for p in panels], title)


def _dt_seeds(panels: list[PanelResult], title: str) -> plt.Figure:
    histories = [h for p in panels for h in p.histories]
    names = [f"{p.panel.label} · seed {d.name.removeprefix('seed')}" for p in panels for d in p.dirs]
    return figures.dt.dt_histograms(histories, names, cols=max(len(p.histories) for p in panels))


def _probes(panel: PanelResult, out: ProbesDir) -> list[Path]:
    """`primacy analyze probes` over every seed of a Transformer panel (``analyze_probes``)."""
    analyze_probes([ProbeRun(RunDir(run).config, RunDir(run).last_checkpoint, run.name) for run in panel.dirs],
                   out.path)
    return [out.table, out.arrays, out.summary, *(out.figure.with_suffix(f".{ext}") for ext in ("png", "pdf"))]


_PAGES: dict[str, list[tuple[str | None, Callable]]] = {
    "heatmaps": [(None, _heatmaps)],
    "dt": [(None, _dt_columns), ("fig5", _dt_seeds)],
    "probes": [(None, _heatmaps)],
}


def emergence_settings() -> ICLSettings:
    """How `reproduce induction` analyses each checkpoint: `analyze icl`'s defaults, figures as PNG only."""
    return ICLSettings(n_items=None, prompts=64, seed=0, grid=CMRGrid.paper(), alignment="peak", top=4,
                       formats=("png",))


def _draw_humans(spec: FigureSpec, scale: str, out: Path, runs: list[Any]) -> list[Path]:
    """Each panel's seeds as one model, beside the people whose lists have its length; one row per dataset."""
    models: dict[str, dict[str, list[Path]]] = {}  # dataset -> model label -> its seeds' run directories
    for panel in spec.panels:
        dirs = [run.dir for run in runs if run.panel == panel.config(scale)]
        n_items = json.loads(RunDir(dirs[0]).summary.read_text())["n_items"]
        dataset = people.dataset_for_length(n_items).name
        models.setdefault(dataset, {})[panel.label.split()[0]] = dirs  # "S4D L24" -> "S4D" within its row
    comparisons = [page.compare(groups, dataset) for dataset, groups in models.items()]
    n_seeds = len(runs) // len(spec.panels)
    title = f"{spec.title} · {scale} scale · {n_seeds} seed{'s' * (n_seeds > 1)} per model"
    return page.write(comparisons, out / spec.name, title)


def _draw_emergence(spec: FigureSpec, scale: str, out: Path, runs: list[Any]) -> list[Path]:
    """`analyze icl` of every numbered checkpoint of every run (into <run>/icl/step<N>, reusing what is done; figures
    for the final one only), each panel's emergence over seeds (<panel>/mean/emergence.csv and figure), the page of
    every panel, the table of each run's final checkpoint and emergence step, and its mean ± SE per panel (.md)."""
    settings = emergence_settings()
    written, table, models, dts = [], [], [], []
    for panel in spec.panels:
        name, group = panel.config(scale), panel.groups[SCALES.index(scale)]
        seeds = {}
        for run in (run for run in runs if run.panel == name):
            files_of = RunDir(run.dir)
            if files_of.kept_as_results:  # results/'s runs: their analyses are kept, their checkpoints are not
                seeds[run.dir.name] = rows = kept_analyses(files_of.icl.path, settings, group)
            else:
                ckpts = trained_checkpoints(files_of.config, files_of.numbered_checkpoints(), group)
                print(f"  {name}/{run.dir.name}: analysing {len(ckpts)} checkpoints", flush=True)
                seeds[run.dir.name] = rows = analyze_checkpoints(ckpts, files_of.icl.path, settings, reuse=True,
                                                                 report=lambda line: None, draw="final")
            ablation = _ablation(run.dir, rows[-1]["step"], group)
            tested = json.loads(files_of.summary.read_text()).get("repeat_accuracy")  # the run's test, on its prompts
            table.append({"panel": panel.label, "config": name, "run": run.dir.name,
                          "repeat_accuracy": unrounded(tested), **_final(rows, ablation)})
        mean = across_seeds(list(seeds.values()))
        label = f"{panel.label}  {panel.title} · {len(seeds)} seed{'s' * (len(seeds) > 1)}"
        write_emergence(mean, out / name / "mean", figures.FORMATS, seeds, label)
        mean_dir = HeadsDir(out / name / "mean")
        written += [mean_dir.emergence, *(mean_dir.emergence_figure.with_suffix(f".{ext}") for ext in figures.FORMATS)]
        models.append((mean, seeds, label))
        selection = panel_dt(label, [run.dir for run in runs if run.panel == name])  # Δ on the [BOS] r r prompts
        dts += [selection] if selection is not None else []
    written += figures.save(figures.heads.emergence_page(models, f"{spec.title} · {scale} scale"), out / spec.name)
    if dts:  # the repeat starts after [BOS] and the n tokens of r
        written += _draw_dt_by_role(dts, (dts[0].new[0].shape[1] - 1) // 2 + 1, "repeat",
                                    f"Δ on the first and the repeated tokens · {scale} scale", out / f"{spec.name}_dt")
    return [*written, files.write_csv(out / f"{spec.name}.csv", csv_rows(table)),
            files.write_text(out / f"{spec.name}.md", emergence_table(table))]


WEIGHT_SETS, WEIGHT_BATCH = 16, 8  # at most these test sets (2L trials each) per run's probe analysis, 8 trials a pass
UNIT_SHIFT = 0.10  # a head or channel whose weight's early − late is at least this (or at most minus this) is tilted


def _draw_weights(spec: FigureSpec, scale: str, out: Path, runs: list[Any]) -> list[Path]:
    """Each panel's aggregate (its serial-position curve), `analyze probes` of each seed's last checkpoint (into
    <run>/probes, reused when newer than the checkpoint), and the page: accuracy and the share of the queries'
    weight on the study items by study position (new probes: the positional part, not the match), one column per
    panel, with a table of the early-minus-late quarter of both and Δt after training, mean ± SE over seeds. The CSV
    adds, per layer, the share of heads (channels) whose own early − late is ≥ ``UNIT_SHIFT`` (units_early) or
    ≤ −``UNIT_SHIFT`` (units_late): a flat mean can hide early and late units that cancel."""
    written, table, columns, dts = [], [], [], []
    for panel in spec.panels:
        name = panel.config(scale)
        dirs = [run.dir for run in runs if run.panel == name]
        summary = aggregate.aggregate(dirs, out / name / "mean")
        by_unit = [_study_weights(d) for d in dirs]  # each layers heads L: new probes
        profiles = np.stack([np.nanmean(w, axis=1) for w in by_unit])  # seeds layers L, mean over heads
        histories = [results.read_dt_history(RunDir(d).dt_history) for d in dirs if RunDir(d).dt_history.is_file()]
        weights_mean, weights_se = mean_and_se(early_minus_late(profiles))  # layers each
        row = {"panel": panel.label, "config": name, "seeds": len(dirs), "n_items": profiles.shape[-1],
               "early_minus_late": unrounded(summary["early_minus_late"]["mean"]),
               "early_minus_late_se": unrounded(summary["early_minus_late"]["se"])}
        for layer, (mean, se) in enumerate(zip(weights_mean, weights_se)):
            row[f"weight_early_minus_late_L{layer}"], row[f"weight_early_minus_late_L{layer}_se"] = unrounded(mean), \
                unrounded(se)
        shifts = np.stack([early_minus_late(w) for w in by_unit])  # seeds layers heads
        for side, tilted in (("early", shifts >= UNIT_SHIFT), ("late", shifts <= -UNIT_SHIFT)):
            for layer, (mean, se) in enumerate(zip(*mean_and_se(tilted.mean(axis=-1)))):
                row[f"units_{side}_L{layer}"], row[f"units_{side}_L{layer}_se"] = unrounded(mean), unrounded(se)
        medians = np.array([[float(np.median(h["dt"][-1]))] for h in histories])  # seeds 1
        dt_mean, dt_se = mean_and_se(medians) if len(medians) else ([None], [None])
        row["dt_final_median"], row["dt_final_median_se"] = unrounded(dt_mean[0]), unrounded(dt_se[0])
        label = f"{panel.label}  {panel.title} · n={len(dirs)}"
        selection = panel_dt(label, dirs)  # Δ on old and new probes, for a backbone with a Δt
        if selection is not None:
            row.update({key: unrounded(value) for key, value in selection.row().items()})
            dts.append(selection)
        table.append(row)
        curve = summary["serial_position_curve"]
        columns.append((label, np.array(curve["mean"], dtype=float), np.array(curve["se"], dtype=float),
                        *mean_and_se(profiles)))
    title = f"{spec.title} · {scale} scale"
    written += figures.save(figures.heads.study_weights(columns, title), out / spec.name)
    if dts:
        written += _draw_dt_by_role(dts, table[0]["n_items"], "probes", f"Δ on old and new probes · {scale} scale",
                                    out / f"{spec.name}_dt")
    return [*written, files.write_csv(out / f"{spec.name}.csv", csv_rows(table)),
            files.write_text(out / f"{spec.name}.md", weights_table(table))]


def _draw_dt_by_role(panels: list[PanelDt], boundary: int, boundary_label: str, title: str, stem: Path) -> list[Path]:
    columns = [(p.label, p.layers, *p.new, *p.repeat) for p in panels]
    return figures.save(figures.dt.dt_by_role(columns, boundary, boundary_label, title), stem)


def _study_weights(run: Path) -> np.ndarray:
    """(layers, heads, L): the share of the queries' weight on each study position at new probes, from
    `analyze probes` of the run's last checkpoint (made now unless a newer one is in <run>/probes)."""
    files_of = RunDir(run)
    out, checkpoint = files_of.probes, files_of.last_checkpoint
    if files_of.kept_as_results and not out.arrays.is_file():
        raise UsageError(f"{run} was kept without checkpoints and without its probe analysis ({out.arrays}): it "
                         "cannot be analysed again")
    if not files_of.kept_as_results and not (out.summary.is_file()
                                             and out.summary.stat().st_mtime >= checkpoint.stat().st_mtime):
        analyze_probes([ProbeRun(files_of.config, checkpoint, run.name)], out.path, batch_size=WEIGHT_BATCH,
                       formats=("png",), at_most=WEIGHT_SETS)
    with np.load(out.arrays) as arrays:
        return arrays["study_weight"][:, :, 1]  # layers heads L


def _ablation(run: Path, step: int, group: int = 1) -> dict[str, Any]:
    """`analyze ablation` of a run's final checkpoint, its most CMR-like heads by the final analysis (Ji-An et al.
    Fig. 8; ``group`` units to a head), into <run>/ablation; an ablation newer than that analysis is read back."""
    heads, out = RunDir(run).icl.step(step).heads, RunDir(run).ablation
    done = out.result
    kept = RunDir(run).kept_as_results  # no checkpoint to ablate again: its ablation is read back, whatever its time
    if done.is_file() and (kept or done.stat().st_mtime >= heads.stat().st_mtime):
        content = json.loads(done.read_text())
        if content.get("units_per_head", 1) == group:
            return content
    if kept:
        raise UsageError(f"{run} was kept without checkpoints and without an ablation of {group} units to a head "
                         f"({done}): it cannot be ablated again")
    source = TrainedCheckpoint(RunDir(run).config, RunDir(run).last_checkpoint, step, group)
    return ablate_checkpoint(source, ranked_heads(heads, "cmr_distance"), out.path, AblationSettings(formats=("png",)))


def _final(rows: list[dict[str, Any]], ablation: dict[str, Any]) -> dict[str, Any]:
    """A run's line of the induction table: its last checkpoint's measures, the step its induction head emerged, and
    the ICL score intact, with its most CMR-like heads ablated and with as many random heads ablated (the mean of the
    draws, its SE over draws, and the first draw alone, the authors' single draw)."""
    last, summary = rows[-1], ablation["summary"]
    draws = ablation.get("random_draws", {})  # an ablation.json from before 2026-11-26 has none
    return {"final_step": last["step"], "emerged_at_step": emergence_step(rows), "best_head": last["best_head"],
            "best_induction": unrounded(last["best_induction"]),
            **{key: unrounded(last[key]) for key in measures(last)},
            "ablated_heads": ablation["k"], **{f"icl_{name}": unrounded(summary[name]["mean"]) for name in summary},
            "icl_random_draws_se": unrounded(draws.get("se")),
            "p_top_vs_random": unrounded(ablation["comparisons"]["top_minus_random"]["p_value"])}
