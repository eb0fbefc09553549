"""`primacy reproduce`: a whole figure from one command, repeatable until complete, on the local launcher and through
submitit (its local executor: real subprocesses, the cluster's code path without the scheduler)."""

import csv
import dataclasses
import functools
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
import yaml
from conftest import ROOT, extra_module, fake_slurm

from primacy import figures
from primacy.analysis.behaviour.serial_position import summarize
from primacy.analysis.heads.probes import early_minus_late
from primacy.cli import main
from primacy.cli import reproduce as reproduce_command
from primacy.rundir import results
from primacy.testing import tiny_fit
from primacy.workflows import launchers
from primacy.workflows.induction.analyses import AblationSettings, analyze_checkpoints
from primacy.workflows.induction.sources import trained_checkpoints
from primacy.workflows.paper import pages
from primacy.workflows.paper.pages import FIGURES, draw, markdown_table
from primacy.workflows.paper.reproduce import plan
from primacy.workflows.runs import CONFIGS, Run
from primacy.workflows.tables import csv_rows, table_cell, unrounded

# The figure's own configs, cut to a few seconds per run (a narrower model on smaller batches).
TINY = ["--trainer.max_steps", "20", "--trainer.logger", "false", "--trainer.val_check_interval", "10",
        "--trainer.enable_model_summary", "false", "--data.init_args.num_test_sets", "4",
        "--data.init_args.num_val_sets", "2", "--results.formats", "[png]", "--data.init_args.batch_size", "8",
        "--model.init_args.backbone.init_args.d_model", "16"]
# A smaller model, for runs long enough to interrupt.
SMALL = ["--trainer.logger", "false", "--trainer.enable_model_summary", "false", "--data.init_args.n_items", "8",
         "--data.init_args.vocab_size", "64", "--data.init_args.batch_size", "8",
         "--data.init_args.num_test_sets", "4", "--data.init_args.num_val_sets", "2", "--results.formats", "[png]",
         "--model.init_args.backbone.init_args.d_model", "16", "--trainer.val_check_interval", "5",
         "--model.init_args.warmup_steps", "2"]


def logs(out: Path) -> set[Path]:
    return set(out.glob("*/seed*/logs/*.log"))


def step(run: Path) -> int:
    return torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)["global_step"]


def train_here(command: list[str]) -> None:
    """The runs a `primacy reproduce` command would launch, trained in this process instead (each launched run is a
    new Python: 5 s of imports), so that the command finds them done and only analyses and draws; launching is the
    sweep's test."""
    from primacy.cli.lightning import parse_run

    name, options = command[1], command[2:]
    valued = {"--seeds", "--out", "--jobs"}
    panels = options[options.index("--panels") + 1:options.index("--panels") + 2] if "--panels" in options else None
    overrides = [arg for i, arg in enumerate(options)
                 if not (arg in valued or arg == "--panels" or (i and options[i - 1] in (*valued, "--panels")))]
    seeds = int(options[options.index("--seeds") + 1])
    out = Path(options[options.index("--out") + 1])
    runs, _ = plan(FIGURES[name].select(panels), "cpu", seeds, out, overrides, parse_run)
    for run in runs:
        main(list(run.fit_args()))


def fake_run(run: Path, n_items: int, seed: int, accuracy: float, dt: np.ndarray | None) -> None:
    """A run's results as `primacy test` writes them (through the same writers), with every cell of the study x query
    matrix at ``accuracy`` except the last study item at query 0 (0 hits), and a Δt history (2 snapshots x channels)
    unless the backbone has none (LSTM)."""
    counts = torch.full((n_items, n_items), 4)
    hits = (counts * accuracy).round().long()
    hits[-1, 0] = 0
    states = {"hits": hits, "counts": counts, "distractor_hits": torch.full((n_items,), 3),
              "distractor_counts": torch.full((n_items,), 4)}
    settings = {"condition": "half", "n_items": n_items, "vocab_size": 64, "backbone": "S4Backbone",
                "backbone_args": {}, "data_args": {"n_items": n_items, "seed": seed}, "model_args": {}}
    results.write(run / "results", {**summarize(**states), **states}, settings)
    if dt is not None:
        results.write_dt_history(run / "results" / "dt_history.npz", np.array([0, 100]), dt, ["ssm"], [dt.shape[1]])


def pages_only(monkeypatch) -> None:
    """`reproduce` draws its pages, and builds each panel's own figures without drawing them (test_aggregate draws
    those; they were 4/5 of the fig3 page test's time)."""
    real_aggregate = pages.aggregate.aggregate

    def aggregate_undrawn(*args, **kwargs):
        with monkeypatch.context() as patch:
            patch.setattr(figures, "save", lambda fig, *_, **__: plt.close(fig) or [])
            return real_aggregate(*args, **kwargs)
    monkeypatch.setattr(pages.aggregate, "aggregate", aggregate_undrawn)


def test_the_fig3_page_and_table_from_every_panel(tmp_path, monkeypatch):
    """The page and table `reproduce fig3` draws once the runs are done, from results written for each panel (the
    next test runs a real sweep of two panels and draws Fig. 4 and 5 from it: eight runs would cost a minute)."""
    lengths = {panel.label: yaml.safe_load((CONFIGS / "cpu" / f"{panel.config('cpu')}.yaml").read_text())
               ["data"]["init_args"]["n_items"] for panel in FIGURES["fig3"].panels}
    assert list(lengths.values()) == [32, 32, 32, 32, 32, 16, 64, 32]  # Fig. 3 F and G: half and twice the list
    dt = {seed: np.array([[0.001, 0.01, 0.1, 0.05], [0.002, 0.02, 0.03, 0.01 * (seed + 1)]]) for seed in (0, 1)}
    runs, out = [], tmp_path / "out"
    for panel in FIGURES["fig3"].panels:
        name = panel.config("cpu")
        for seed, accuracy in ((0, 0.5), (1, 0.75)):
            run = Run(name, seed, out / name / f"seed{seed}", CONFIGS / "cpu" / f"{name}.yaml", ())
            fake_run(run.dir, lengths[panel.label], seed, accuracy, None if panel.label == "H" else dt[seed])
            runs.append(run)

    pages_only(monkeypatch)
    drawn = []  # the panels the page is drawn with: (letter, title, matrix, distractor)
    page = figures.accuracy.fig3_page
    monkeypatch.setattr(figures.accuracy, "fig3_page",
                        lambda panels, title: drawn.extend(panels) or page(panels, title))
    written = draw(FIGURES["fig3"], "cpu", out, runs)
    assert [letter for letter, *_ in drawn] == list("ABCDEFGH")
    assert all(name.endswith(f"L={lengths[letter]} · n=2") for letter, name, *_ in drawn), "n: the seeds averaged"
    assert {out / "fig3.png", out / "fig3.pdf", out / "fig3.csv"} <= set(written)
    assert all(path.is_file() for path in written)
    table = _csv(out / "fig3.csv")
    assert [row["panel"] for row in table] == list("ABCDEFGH")
    assert [int(row["n_items"]) for row in table] == list(lengths.values())
    assert all(row["seeds"] == "2" for row in table)
    for row in table:
        n = int(row["n_items"])
        per_seed = [json.loads((out / row["config"] / f"seed{s}" / "results" / "summary.json").read_text())
                    for s in (0, 1)]
        values = [summary["overall_accuracy"] for summary in per_seed]
        assert float(row["overall_accuracy"]) == pytest.approx(sum(values) / 2, abs=1e-4)
        assert float(row["overall_accuracy_se"]) == pytest.approx(abs(values[0] - values[1]) / 2, abs=1e-4)
        # the first quarter of study items: the same accuracy at every query but the missed cell (query 0 of the last
        # item is in the bottom-left block, not here): no decay
        assert float(row["early_query_decay"]) == 0.0
        # the last quarter of study items at the first quarter of queries: 0.625 everywhere but one cell at 0
        q = n // 4
        assert float(row["bottom_left"]) == pytest.approx(0.625 * (1 - 1 / q ** 2), abs=1e-4)
        assert (out / row["config"] / "mean" / "summary.json").is_file()
    pooled = np.concatenate([dt[0], dt[1]], axis=1)
    for row in table[:7]:
        assert float(row["dt_initial_q50"]) == pytest.approx(np.quantile(pooled[0], 0.5), abs=1e-5)
        assert float(row["dt_final_q50"]) == pytest.approx(np.quantile(pooled[1], 0.5), abs=1e-5)
        assert float(row["dt_final_below_0.03"]) == pytest.approx(np.mean(pooled[1] <= 0.03), abs=1e-4)
    assert table[7]["dt_final_q50"] == ""  # LSTM has no Δt
    for row in table[:7]:  # the median Δt of each seed, averaged over seeds
        medians = [np.median(dt[seed][1]) for seed in (0, 1)]
        assert float(row["dt_final_median"]) == pytest.approx(np.mean(medians), abs=1e-5)
        assert float(row["dt_final_median_se"]) == pytest.approx(abs(medians[0] - medians[1]) / 2, abs=1e-5)
    markdown = (out / "fig3.md").read_text().splitlines()
    assert len(markdown) == 2 + 8 + 2 and markdown[0].startswith("| panel | L | n | overall | early − late |")
    assert markdown[3].startswith(f"| B | 32 | 2 | {float(table[1]['overall_accuracy']):.3f} ± "
                                  f"{float(table[1]['overall_accuracy_se']):.3f} |")
    assert markdown[-1] == "† differs from panel B by more than 2 SE of the difference."


def test_draw_only_draws_the_runs_that_are_done_and_never_over_a_table_it_would_lose_columns_of(tmp_path, monkeypatch,
                                                                                             capsys):
    """--draw draws the panels whose runs are done (panel B's, results kept as published), lists the runs that are not
    and launches nothing; over a table with another column (by another version of primacy) it refuses, with or without
    --draw, and leaves it as it was; where nothing is done it refuses too."""
    monkeypatch.setattr(launchers, "run_local", lambda *args, **kwargs: pytest.fail("--draw launched runs"))
    pages_only(monkeypatch)
    monkeypatch.setattr(figures, "save", lambda fig, *_, **__: plt.close(fig) or [])  # the fig3 test saves the page
    out = tmp_path / "out"
    fake_run(out / "fig3b-hippo-legs-L32" / "seed0", 32, 0, 0.75, np.array([[0.001, 0.01], [0.002, 0.02]]))
    command = ["reproduce", "fig3", "--panels", "B", "H", "--seeds", "1", "--out", str(out)]
    main([*command, "--draw"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[:2] == [f"wrote {out / 'fig3.csv'}", f"wrote {out / 'fig3.md'}"]
    assert lines[2].split()[:2] == ["fig3h-lstm-L32/seed0", "missing"]
    assert lines[-1] == "drew 1 of 2 runs; leave out --draw to train the others"
    assert [row["panel"] for row in _csv(out / "fig3.csv")] == ["B"]

    table = out / "fig3.md"
    table.write_text(table.read_text().replace("| panel |", "| panel | note |", 1))
    drawn = {path: path.read_bytes() for path in (table, out / "fig3.csv")}
    for args in (["--draw"], []):
        with pytest.raises(SystemExit) as exit_info:
            main([*command, *args])
        err = capsys.readouterr().err.strip()
        assert exit_info.value.code == 2 and err == (
            f"primacy: error: {table} has the columns note, which this command would not write (drawing would lose "
            "them): give another --out, or move the table away to draw it anew"), err
        assert {path: path.read_bytes() for path in drawn} == drawn and not (out / "fig3h-lstm-L32").exists()

    with pytest.raises(SystemExit) as exit_info:
        main(["reproduce", "fig3", "--panels", "H", "--seeds", "1", "--out", str(tmp_path / "empty"), "--draw"])
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and err == (
        f"primacy: error: --draw: no run of fig3 is done in {tmp_path / 'empty'} (1 missing): leave out --draw to "
        "train them, or check --out, --scale and --panels"), err
    assert not (tmp_path / "empty").exists()


def test_panels_never_draw_the_figure_without_the_runs_of_the_panels_they_leave_out(tmp_path, monkeypatch, capsys):
    """A folder that holds the runs of panels --panels leaves out keeps its figure: --draw refuses in one line, and the
    command that trains the chosen panels ends without drawing, saying how to draw every panel."""
    monkeypatch.setattr(launchers, "run_local", lambda *args, **kwargs: pytest.fail("launched runs that were done"))
    pages_only(monkeypatch)
    monkeypatch.setattr(figures, "save", lambda fig, *_, **__: plt.close(fig) or [])
    out = tmp_path / "out"
    fake_run(out / "fig3b-hippo-legs-L32" / "seed0", 32, 0, 0.75, np.array([[0.001, 0.01], [0.002, 0.02]]))
    fake_run(out / "fig3h-lstm-L32" / "seed0", 32, 0, 0.7, None)
    command = ["reproduce", "fig3", "--seeds", "1", "--out", str(out)]
    main([*command, "--panels", "B", "H", "--draw"])
    drawn = {path: path.read_bytes() for path in (out / "fig3.md", out / "fig3.csv")}
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main([*command, "--panels", "B", "--draw"])
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and err == (
        f"primacy: error: --panels B: {out} also holds the runs of panel(s) H, and drawing without them would draw "
        "fig3 over theirs: leave out --panels to draw every panel that is done"), err
    main([*command, "--panels", "B"])
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"fig3: the runs of --panels are done; {out} also holds the runs of panel(s) H, so the figure is not drawn "
        f"without them: primacy reproduce fig3 --scale cpu --out {out} --draw draws every panel that is done")
    assert {path: path.read_bytes() for path in drawn} == drawn


def test_the_tasks_figure_is_every_task_quickstart_at_the_cpu_scale_only(tmp_path, capsys):
    """`primacy reproduce tasks` runs the quickstarts of reconstruction, recall and free recall for each baseline (the
    seeds behind docs/tasks.md's tables); they have no paper-scale configs, and --scale paper says so in one line."""
    command = ["reproduce", "tasks", "--seeds", "1", "--out", str(tmp_path / "out"), "--status"]
    main(command)
    runs = [line.split()[0] for line in capsys.readouterr().out.splitlines()[:-1]]
    assert runs == [f"quickstart-{task}{suffix}/seed0" for task in ("reconstruction", "recall", "free-recall")
                    for suffix in ("", "-lstm", "-transformer")]
    with pytest.raises(SystemExit) as exit_info:
        main([*command, "--scale", "paper"])
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and err == ("primacy: error: scale=paper: figure tasks has no paper-scale config "
                                                 "for panel reconstruction/S4D; its panels run at --scale cpu"), err


def test_the_markdown_table_marks_differences_beyond_two_standard_errors():
    def row(panel, mean, se):
        empty = {f"dt_{when}_{part}": None for when in ("initial", "final")
                 for part in ("q05", "q50", "q95", "below_0.03", "median", "median_se")}
        return {"panel": panel, "n_items": 32, "seeds": 3, "overall_accuracy": mean, "overall_accuracy_se": se,
                "early_minus_late": -0.004, "early_minus_late_se": None, "bottom_left": 0.3, "rest": 0.8, **empty}

    reference = row("B", 0.70, 0.01)
    rows = [reference, row("C", 0.73, 0.01), row("D", 0.72, 0.01)]  # 0.03 > 2 x 0.0141; 0.02 is not
    lines = markdown_table(rows, reference).splitlines()
    assert lines[2].split(" | ")[3:5] == ["0.700 ± 0.010", "−0.004"]
    assert lines[3].split(" | ")[3] == "0.730 ± 0.010 †" and lines[4].split(" | ")[3] == "0.720 ± 0.010"
    assert lines[2].split(" | ")[-3:] == ["—", "—", "— |"]  # no Δt
    # seeds that agree to rounding (the same value summed in another order) show no spread, not 19 decimals
    assert table_cell({"x": 0.05, "x_se": 4.9e-18}, "x", None) == "0.050 ± 0.000"
    assert table_cell({"x": 0.05, "x_se": 4.9e-5}, "x", None) == "0.050000 ± 0.000049"
    # at most 6 decimals (ROW_DECIMALS, what the CSV keeps): a 7th would be a written 0, not a measured digit
    assert table_cell({"x": 0.999997, "x_se": 0.000003}, "x", None) == "0.999997 ± 0.000003"
    # a row's numbers are rounded once, by the cell; its CSV keeps 6 decimals (csv_rows), which the cell never reads:
    # xLSTM's weight SE 0.00096474 was 0.000965 in the row and 0.00097 in the cell
    xlstm = {"x": unrounded(-0.00046696546), "x_se": unrounded(0.00096473518)}
    assert table_cell(xlstm, "x", None) == "−0.00047 ± 0.00096"
    assert csv_rows([xlstm]) == [{"x": -0.000467, "x_se": 0.000965}]
    assert table_cell(csv_rows([xlstm])[0], "x", None) == "−0.00047 ± 0.00097"  # what rounding twice wrote


def test_the_weights_page_measures_each_seeds_weights_by_study_position_once(tmp_path, monkeypatch):
    """`reproduce weights` on two tiny S4D verification runs: each seed's probe analysis in <run>/probes, the table's
    early-minus-late of the weights the mean of the seeds' (new probes, layer 0), the page drawn; a second draw
    reads the analyses back."""
    monkeypatch.setattr(figures, "FORMATS", ("png",))  # the fig3 page test has the PDFs
    pages_only(monkeypatch)
    runs = []
    for seed in (0, 1):
        run = Run("quickstart", seed, tmp_path / "out" / "quickstart" / f"seed{seed}", ROOT / "configs" /
                  "quickstart.yaml", ())
        tiny_fit(run.dir, seed=seed, backbone_settings={"d_model": 8, "d_state": 4},
                 data_settings={"num_test_sets": 3}, args=["--data.init_args.seed", str(seed)])
        runs.append(run)
    spec = FIGURES["weights"].select(["S4D"])
    draw(spec, "cpu", tmp_path / "out", runs)
    seeds = [json.loads((run.dir / "probes" / "summary.json").read_text()) for run in runs]
    assert all(summary["n_sets"] == 3 for summary in seeds)  # at most WEIGHT_SETS, as many as the run has
    table = _csv(tmp_path / "out" / "weights.csv")
    expected = np.mean([summary["study_weight_early_minus_late"][0]["new"] for summary in seeds])
    assert float(table[0]["weight_early_minus_late_L0"]) == pytest.approx(expected, abs=1e-4)
    assert table[0]["seeds"] == "2" and (tmp_path / "out" / "weights.png").is_file()
    # the share of channels tilted early (late): each channel's own early − late at >= 0.10 (<= -0.10), per seed
    shifts = [early_minus_late(np.load(run.dir / "probes" / "probes.npz")["study_weight"][0, :, 1]) for run in runs]
    for side, tilted in (("early", [s >= 0.10 for s in shifts]), ("late", [s <= -0.10 for s in shifts])):
        assert float(table[0][f"units_{side}_L0"]) == pytest.approx(np.mean([t.mean() for t in tilted]), abs=1e-6)
    assert "weight early − late, layer 0" in (tmp_path / "out" / "weights.md").read_text()
    # S4D's Δt is fixed: old and new probes take the same Δ (the control of Mamba's selection), drawn beside
    assert float(table[0]["dt_repeat_minus_new_L0"]) == 0.0 and (tmp_path / "out" / "weights_dt.png").is_file()
    assert "log10 Δ old − new probe, layer 0" in (tmp_path / "out" / "weights.md").read_text()
    before = [(run.dir / "probes" / "summary.json").stat().st_mtime_ns for run in runs]
    draw(spec, "cpu", tmp_path / "out", runs)
    assert [(run.dir / "probes" / "summary.json").stat().st_mtime_ns for run in runs] == before


def test_a_sweep_runs_once_reports_its_status_skips_finished_runs_and_finds_a_deleted_one_missing(tmp_path, capsys,
                                                                                          monkeypatch):
    monkeypatch.setattr(figures, "FORMATS", ("png",))  # what is tested is the sweep; the fig3 page test has the PDFs
    pages_only(monkeypatch)
    out = tmp_path / "fig4"
    sweep = ["reproduce", "fig4", "--out", str(out), "--panels", "4", "6", *SMALL]
    command = [*sweep, "--seeds", "1", "--jobs", "2", "--trainer.max_steps", "4"]
    # panel 6's run is trained here first, so the sweep skips it and launches panel 4's (one new Python, not two)
    train_here(["reproduce", "fig4", "--out", str(out), "--panels", "6", *SMALL, "--seeds", "1",
                "--trainer.max_steps", "4"])
    capsys.readouterr()
    main(command)
    assert capsys.readouterr().out.splitlines()[:2] == [
        "fig4: 1 of 2 runs need nothing; running 1 (1 missing)",
        "  fig3f-hippo-legs-L16/seed0: fit (log in " + str(out / "fig3f-hippo-legs-L16" / "seed0" / "logs") + "/)"]
    runs = [out / "fig3f-hippo-legs-L16" / "seed0", out / "fig4-hippo-legs-frozen-dt-L32" / "seed0"]
    for run in runs:
        assert (run / "results" / "summary.json").is_file(), run
        assert step(run) == 4
    assert all((out / name).is_file() for name in ("fig4.png", "fig5.png", "fig4.csv"))
    assert [(row["panel"], row["seeds"]) for row in _csv(out / "fig4.csv")] == [("4", "1"), ("6", "1")]
    with np.load(runs[1] / "results" / "dt_history.npz") as history:  # the paper's footnote: Δt stays at its init
        assert np.array_equal(history["dt"][0], history["dt"][-1])

    capsys.readouterr()
    main([*sweep, "--seeds", "2", "--status", "--trainer.max_steps", "4"])
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[:2] for line in lines[:-1]] == [
        ["fig3f-hippo-legs-L16/seed0", "done"], ["fig3f-hippo-legs-L16/seed1", "missing"],
        ["fig4-hippo-legs-frozen-dt-L32/seed0", "done"], ["fig4-hippo-legs-frozen-dt-L32/seed1", "missing"]]
    assert lines[-1] == "2 done, 2 missing"
    # another budget is another run (the schedule ends at max_steps): the runs are not resumed into it, nor taken
    main([*sweep, "--seeds", "1", "--status", "--trainer.max_steps", "8"])
    assert capsys.readouterr().out.count("failed   trained with trainer.max_steps=4 (its config.yaml), not 8") == 2

    before, drawn = logs(out), []  # the figure was drawn above; here only whether it is drawn again
    monkeypatch.setattr(reproduce_command, "draw", lambda spec, scale, out, runs: drawn.append(len(runs)) or [])
    main(command)  # everything is done: nothing trains, the figure is drawn again
    assert logs(out) == before and drawn == [2]
    assert "running" not in capsys.readouterr().out

    # a deleted run is missing again, so the next sweep trains it as the first one trained every missing run
    deleted = runs[0]
    for path in sorted(deleted.rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    main([*sweep, "--seeds", "1", "--status", "--trainer.max_steps", "4"])
    assert [line.split()[:2] for line in capsys.readouterr().out.splitlines()] == [
        ["fig3f-hippo-legs-L16/seed0", "missing"], ["fig4-hippo-legs-frozen-dt-L32/seed0", "done"], ["1", "done,"]]


def test_a_figure_file_reproduces_any_kind_of_result_with_its_table(tmp_path, capsys):
    """A figure of one's own: panels and their configs in a YAML file; each panel aggregated by its kind of result
    (the induction task's logged values here, which no paper figure of primacy draws) and one table of them all."""
    from primacy.cli.lightning import parse_run
    from primacy.testing import TINY_SETTINGS
    from primacy.workflows.paper.figure_files import read_figure
    from primacy.workflows.paper.reproduce import plan

    model = {"class_path": "LanguageModel", "init_args": {"warmup_steps": 2, "backbone": {
        "class_path": "TransformerBackbone", "init_args": {"d_model": 16, "n_layers": 1, "n_heads": 2}}}}
    trainer = {"max_steps": 4, "accelerator": "cpu", "devices": 1, "logger": False, "enable_progress_bar": False,
               "enable_model_summary": False, "val_check_interval": 4, "check_val_every_n_epoch": None,
               "num_sanity_val_steps": 0}
    for name, length in (("short", 16), ("long", 24)):
        data = {"class_path": "InductionTask", "init_args": {**TINY_SETTINGS["InductionTask"], "length": length}}
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump({"model": model, "data": data, "trainer": trainer}))
    figure = tmp_path / "lengths.yaml"
    figure.write_text(yaml.safe_dump({"title": "Induction by length", "reference": "S", "panels": [
        {"label": "S", "title": "16 tokens", "config": "short"}, {"label": "L", "title": "24 tokens", "config":
                                                                   {"cpu": "long", "paper": "long"}}]}))
    out = tmp_path / "out"
    runs, _ = plan(read_figure(figure), "cpu", 2, out, [], parse_run)
    for run in runs:  # trained here, in this process (a launcher's processes would take 20 s more to start)
        main(list(run.fit_args()))
    main(["reproduce", str(figure), "--seeds", "2", "--out", str(out)])  # every run done: aggregates and tabulates
    for panel in ("short", "long"):
        summary = json.loads((out / panel / "mean" / "summary.json").read_text())
        assert summary["result_kind"] == "LoggedResults" and summary["n_runs"] == 2
        seeds = [json.loads((out / panel / f"seed{s}" / "results" / "summary.json").read_text()) for s in (0, 1)]
        assert summary["repeat_accuracy"]["values"] == [s["repeat_accuracy"] for s in seeds]
        assert (out / panel / "mean" / "logged.png").is_file()
    rows = _csv(out / "lengths.csv")
    assert [(row["panel"], row["config"], row["seeds"], row["result_kind"]) for row in rows] == [
        ("S", "short", "2", "LoggedResults"), ("L", "long", "2", "LoggedResults")]
    table = (out / "lengths.md").read_text().splitlines()
    assert table[0].startswith("| panel | n | loss |") and len(table) == 6  # header, rule, 2 panels, blank, note
    assert float(rows[1]["repeat_accuracy"]) == pytest.approx(np.mean([json.loads((  # rounded to 6 digits
        out / "long" / f"seed{s}" / "results" / "summary.json").read_text())["repeat_accuracy"] for s in (0, 1)]),
                                                            abs=1e-6)

    capsys.readouterr()
    main(["reproduce", str(figure), "--seeds", "2", "--status", "--out", str(out)])
    assert capsys.readouterr().out.splitlines()[-1] == "4 done"


def test_a_figure_files_panel_can_be_composed_of_config_parts(tmp_path):
    """A panel's config may be a list of parts beside the figure file, each a --config in turn: its runs resolve to
    the config the parts spell together, in a folder named by the parts."""
    from primacy.cli.lightning import parse_run
    from primacy.errors import UsageError
    from primacy.testing import TINY_SETTINGS
    from primacy.workflows.paper.figure_files import read_figure
    from primacy.workflows.paper.reproduce import plan

    whole = {"model": {"class_path": "LanguageModel", "init_args": {"warmup_steps": 2, "backbone": {
                 "class_path": "TransformerBackbone", "init_args": {"d_model": 16, "n_layers": 1, "n_heads": 2}}}},
             "data": {"class_path": "InductionTask", "init_args": TINY_SETTINGS["InductionTask"]},
             "trainer": {"max_steps": 4, "accelerator": "cpu", "devices": 1, "logger": False}}
    (tmp_path / "whole.yaml").write_text(yaml.safe_dump(whole))
    (tmp_path / "parts").mkdir()
    for part in ("trainer", "model", "data"):
        (tmp_path / "parts" / f"{part}.yaml").write_text(yaml.safe_dump({part: whole[part]}))
    figure = tmp_path / "composed.yaml"
    figure.write_text(yaml.safe_dump({"panels": [
        {"label": "W", "config": "whole"},
        {"label": "P", "config": ["parts/trainer", "parts/model", "parts/data.yaml"]}]}))
    out = tmp_path / "out"
    runs, parsed = plan(read_figure(figure), "cpu", 1, out, [], parse_run)
    assert [run.dir for run in runs] == [out / "whole" / "seed0", out / "trainer+model+data" / "seed0"]
    assert runs[1].config == tuple(tmp_path / "parts" / f"{part}.yaml" for part in ("trainer", "model", "data"))
    whole_run, composed_run = (parsed[name] for name in ("whole", "trainer+model+data"))
    assert composed_run.model == whole_run.model and composed_run.data == whole_run.data
    assert ({**vars(composed_run.trainer), "default_root_dir": None}
            == {**vars(whole_run.trainer), "default_root_dir": None})  # each run writes in its own folder

    figure.write_text(yaml.safe_dump({"panels": [{"label": "P", "config": ["parts/trainer", "parts/nowhere"]}]}))
    with pytest.raises(UsageError, match=r"the config parts .*nowhere.yaml of panel P are missing"):
        plan(read_figure(figure), "cpu", 1, out, [], parse_run)


@pytest.mark.parametrize("content, message", [
    ("panels: []", "has no panels"),
    ("panels: [{label: A}]", "give each panel a label and a config"),
    ("panels: [{label: A, config: {cpu: a}}]", "give a config name, a list of config names (parts), or one"),
    ("panels: [{label: A, config: []}]", "give a config name, a list of config names (parts), or one"),
    ("panels: [{label: A, config: [x/a, b]}, {label: B, config: [y/a, b]}]", "would share the folder a+b"),
    ("panels: [{label: A, config: a}, {label: A, config: b}]", "has the panel labels ['A', 'A']"),
    ("reference: B\npanels: [{label: A, config: a}]", "has reference='B': give one of the labels ['A']"),
    ("panels: [{label: A, config: nowhere}]", "its config"),
    ("panels: [", "is not valid YAML"),
])
def test_a_bad_figure_file_is_one_line(content, message, tmp_path, capsys):
    figure = tmp_path / "mine.yaml"
    figure.write_text(content)
    with pytest.raises(SystemExit):
        main(["reproduce", str(figure), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # 18 s: two Transformer runs; analyze_probes over several runs is in test_probes, the page's other
# steps (aggregate, heatmaps, sweep) in the fig3 and sweep tests
def test_transformer_figure_measures_where_the_queries_look(tmp_path, monkeypatch):
    monkeypatch.setattr(figures, "FORMATS", ("png",))  # in this process: the page and the probes' figures
    out = tmp_path / "transformer"
    main(["reproduce", "transformer", "--seeds", "2", "--out", str(out), "--jobs", "2", *TINY])
    probes = out / "transformer-L32" / "mean" / "probes"
    summary = json.loads((probes / "summary.json").read_text())
    assert summary["seeds"] == 2 and summary["n_sets"] == 4  # every test set of both seeds
    assert len(summary["heads"]) == 2 * 4  # the config's layers x heads
    # seeds x sets x 2L trials x L/2 queries of each kind (condition "half")
    assert summary["old_probes"] == summary["new_probes"] == 2 * 4 * (2 * 32) * (32 // 2)
    assert (probes / "probes.png").is_file() and (out / "transformer.png").is_file()
    # heads are compared within a seed: each seed's strongest head, then their mean over seeds
    strongest = summary["strongest_heads"]
    assert [row["run"] for row in strongest] == ["seed0", "seed1"]
    gaps = [row["old"]["max_weight"] - row["new"]["max_weight"] for row in strongest]
    assert [row["old_minus_new"]["max_weight"] for row in strongest] == pytest.approx(gaps)
    mean = summary["strongest_head_mean"]["old_match_weight"]
    assert mean["n"] == 2 and mean["mean"] == pytest.approx(sum(r["old"]["match_weight"] for r in strongest) / 2)


def _csv(path: Path) -> list[dict]:
    with path.open() as f:
        return list(csv.DictReader(f))


# 15 s: the analyses of every checkpoint are tests/analysis/heads/test_icl.py's; the default run keeps a sweep's
# launching, status and skipping (below) and the fig3 page
@pytest.mark.slow
def test_induction_figure_analyses_every_checkpoint_once(tmp_path, capsys, monkeypatch):
    # the analyses at a tenth of their defaults' work: what is tested is which checkpoints they read and write
    monkeypatch.setattr(figures, "FORMATS", ("png",))
    settings = dataclasses.replace(pages.emergence_settings(), prompts=8)
    monkeypatch.setattr(pages, "emergence_settings", lambda: settings)
    monkeypatch.setattr(pages, "AblationSettings", functools.partial(AblationSettings, sequences=16, random=2))
    out = tmp_path / "induction"
    command = ["reproduce", "induction", "--seeds", "2", "--out", str(out), "--jobs", "2", "--trainer.max_steps", "4",
               "--checkpoint.every_n_train_steps", "2", "--trainer.logger", "false",
               "--trainer.val_check_interval", "4",
               "--trainer.enable_model_summary", "false", "--data.init_args.batch_size", "8",
               "--data.init_args.num_val_prompts", "8", "--data.init_args.num_test_prompts", "8"]
    train_here(command)
    main(command)
    panel = out / "induction-attn-2L"
    seeds = [_csv(panel / f"seed{seed}" / "icl" / "emergence.csv") for seed in (0, 1)]
    assert all([int(row["step"]) for row in table] == [2, 4] for table in seeds)
    for seed in (0, 1):  # every checkpoint's tables, the final one's figures
        steps = panel / f"seed{seed}" / "icl"
        assert (steps / "step2" / "heads.csv").is_file() and not list((steps / "step2").glob("*.png"))
        assert (steps / "step4" / "lag_crp_fits.png").is_file()
    mean = _csv(panel / "mean" / "emergence.csv")
    assert [(int(row["step"]), int(row["seeds"])) for row in mean] == [(2, 2), (4, 2)]
    for key in ("top_induction", "top_cmr_distance", "icl_score", "cmr_like_share"):
        assert float(mean[1][key]) == pytest.approx((float(seeds[0][1][key]) + float(seeds[1][1][key])) / 2), key
    table = _csv(out / "induction.csv")
    assert [(row["run"], row["final_step"]) for row in table] == [("seed0", "4"), ("seed1", "4")]
    for row, seed in zip(table, seeds):  # the table rounds to 4 decimals
        assert float(row["top_induction"]) == pytest.approx(float(seed[1]["top_induction"]), abs=1e-4)
        tested = json.loads((panel / row["run"] / "results" / "summary.json").read_text())["repeat_accuracy"]
        assert float(row["repeat_accuracy"]) == pytest.approx(tested, abs=1e-4)
        ablation = json.loads((panel / row["run"] / "ablation" / "ablation.json").read_text())
        assert ablation["checkpoint"].endswith("last.ckpt") and int(row["ablated_heads"]) == ablation["k"] == 1
        assert float(row["icl_intact"]) == pytest.approx(ablation["summary"]["intact"]["mean"], abs=1e-4)
    assert (out / "induction.png").stat().st_size > 0 and (panel / "mean" / "emergence.png").is_file()
    markdown = (out / "induction.md").read_text().splitlines()  # the seeds' mean ± SE
    icl = [float(row["icl_intact"]) for row in table]
    assert markdown[0].startswith("| panel | n | emerged at step |") and markdown[2].startswith("| I | 2 | ")
    cells = [cell.strip() for cell in markdown[2].split("|")[1:-1]]
    mean, se = (float(part.replace("−", "-")) for part in cells[markdown[0].split("|")[1:-1].index(" ICL intact ")]
                .split(" ± "))
    assert mean == pytest.approx(np.mean(icl), abs=1e-3) and se == pytest.approx(abs(icl[0] - icl[1]) / 2, abs=1e-3)

    analysed = {path: path.stat().st_mtime_ns
                for path in [*out.glob("*/seed*/icl/step*/heads.csv"), *out.glob("*/seed*/ablation/ablation.json")]}
    assert len(analysed) == 2 * 2 + 2
    before, drawn = logs(out), []
    capsys.readouterr()
    monkeypatch.setattr(figures, "save", lambda fig, stem, formats=None: plt.close(fig) or drawn.append(Path(stem).name)
                        or [])
    main(command)  # nothing trains and no checkpoint is analysed again; the page is drawn again (not its files here)
    assert logs(out) == before and "induction" in drawn
    assert {path: path.stat().st_mtime_ns for path in analysed} == analysed


# 10 s: a backbone's influence as heads is tests/analysis/heads/test_influence_heads.py's, in the default run
@pytest.mark.slow
def test_influence_figure_reads_a_backbone_without_attention_by_its_panels_units_per_head(tmp_path, monkeypatch):
    settings = dataclasses.replace(pages.emergence_settings(), prompts=8)
    monkeypatch.setattr(pages, "emergence_settings", lambda: settings)
    monkeypatch.setattr(pages, "AblationSettings", functools.partial(AblationSettings, sequences=16, random=2))
    monkeypatch.setattr(figures, "FORMATS", ("png",))  # the figures are test_induction_figure's; PDFs double them
    out = tmp_path / "influence"
    command = ["reproduce", "influence", "--panels", "S4D", "--seeds", "1", "--out", str(out),
               "--trainer.max_steps", "2", "--checkpoint.every_n_train_steps", "2", "--trainer.logger", "false",
               "--trainer.val_check_interval", "2", "--trainer.enable_model_summary", "false",
               "--data.init_args.batch_size", "8",
               "--data.init_args.num_val_prompts", "8", "--data.init_args.num_test_prompts", "8"]
    train_here(command)
    main(command)
    run = out / "induction-v64-s4d" / "seed0"
    summary = json.loads((run / "icl" / "step2" / "summary.json").read_text())
    assert (summary["unit"], summary["units_per_head"]) == ("channel", 16)
    assert len(_csv(run / "icl" / "step2" / "heads.csv")) == 64 // 16  # one layer, four heads of 16 channels
    ablation = json.loads((run / "ablation" / "ablation.json").read_text())
    assert ablation["units_per_head"] == 16 and ablation["k"] >= 1
    assert [row["panel"] for row in _csv(out / "influence.csv")] == ["S4D"]
    assert (run / "results" / "token_dt.npz").is_file()  # the config's TokenDtTracker

    assert (out / "induction-v64-s4d" / "mean" / "emergence.png").is_file() and (out / "influence.png").is_file()
    assert (out / "influence_dt.png").is_file()  # Δ on the first and the repeated tokens

    analysed = [run / "icl" / "step2" / "summary.json", run / "ablation" / "ablation.json"]
    before = [path.stat().st_mtime_ns for path in analysed]
    checkpoints = trained_checkpoints(run / "config.yaml", [run / "checkpoints" / "epoch=0-step=2.ckpt"], 16)
    analyze_checkpoints(checkpoints, run / "icl", dataclasses.replace(settings, formats=()), reuse=True)
    assert pages._ablation(run, 2, 16) == ablation  # analysed with the same units per head: read back
    assert [path.stat().st_mtime_ns for path in analysed] == before
    analyze_checkpoints([dataclasses.replace(checkpoints[0], group=64)], run / "icl",
                        dataclasses.replace(settings, formats=()), reuse=True)  # with other units: analysed again
    assert json.loads(analysed[0].read_text())["units_per_head"] == 64


def _wait_for(predicate, what: str, seconds: float = 120) -> None:
    deadline = time.time() + seconds
    while not predicate():
        if time.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def _progress(run: Path) -> bool:
    return any("step " in log.read_text() for log in (run / "logs").glob("*.log")) if (run / "logs").is_dir() else False


@pytest.mark.slow  # waits for a real run to start in a new Python (three launches, 30-40 s); the default tier keeps
# the same signal handling and resume of a run (test_resume) and a sweep's status, skips and redone runs (above)
def test_killed_reproduce_resumes_the_interrupted_run(tmp_path):
    out = tmp_path / "fig3"
    args = [sys.executable, "-m", "primacy", "reproduce", "fig3", "--seeds", "1", "--panels", "B", "--out", str(out),
            *SMALL, "--trainer.max_steps", "100000"]
    run = out / "fig3b-hippo-legs-L32" / "seed0"
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(lambda: _progress(run), "training to start")
    finally:
        process.send_signal(signal.SIGTERM)  # what `kill` or a scheduler sends
        _, err = process.communicate(timeout=120)
    assert process.returncode == 143, err
    stopped = step(run)
    assert 0 < stopped < 100000
    assert launchers.read_state(run)["exit_code"] == 143

    main(["reproduce", "fig3", "--seeds", "1", "--panels", "B", "--out", str(out), *SMALL,
          "--trainer.max_steps", str(stopped + 5)])
    assert step(run) == stopped + 5
    newest = max((run / "logs").glob("*.log"), key=lambda p: p.stat().st_mtime)
    assert f"Resuming the unfinished run in {run} from step {stopped}" in newest.read_text()
    assert (out / "fig3.png").is_file()


@pytest.mark.slow  # 20 s: submitit's own local executor; test_slurm_array_job_parameters checks what primacy hands it
def test_submitit_array_job_on_the_local_executor(tmp_path):
    extra_module("submitit")
    out = tmp_path / "fig3"
    command = ["reproduce", "fig3", "--seeds", "1", "--panels", "H", "--out", str(out), "--launcher", "slurm",
               "--slurm.cluster", "local", *TINY]
    main(command)
    runs = list(out.glob("*/seed*"))
    assert len(runs) == 1 and all(step(run) == 20 for run in runs)
    assert (out / "fig3.png").is_file()
    assert all(launchers.read_state(run)["job"] for run in runs)  # each task's log is named by its job id
    before = logs(out)
    main(command)
    assert logs(out) == before


@pytest.mark.slow  # waits out a 45 s time limit by design; the default tier keeps the array job (above) and the
# signal-to-checkpoint-to-resume path of a run (test_resume)
def test_submitit_timeout_requeues_and_resumes(tmp_path):
    """submitit's signal before the time limit (what SLURM sends before a timeout or preemption) stops the run with
    a checkpoint, requeues the task, and the requeued task resumes from that checkpoint."""
    submitit = extra_module("submitit")
    run = tmp_path / "run"
    # a budget the run cannot reach before the signal (about 20 steps a second here) and ends by itself after the test
    args = ("fit", "--config", str(ROOT / "configs" / "cpu" / "fig3b-hippo-legs-L32.yaml"), *SMALL,
            "--trainer.max_steps", "3000", "--trainer.default_root_dir", str(run))
    # submitit's local executor itself (the array test above goes through slurm.submit), for a limit shorter
    # than a minute: 45 s, signalled 20 s before it, so 25 s after each start (training starts after about 6 s on an
    # idle machine; a signal before it would stop the run without a checkpoint)
    executor = submitit.LocalExecutor(folder=tmp_path / "submitit")
    executor.update_parameters(timeout_min=0.75, signal_delay_s=20)
    job = executor.submit(launchers.RunJob(str(run), args))
    try:
        _wait_for(lambda: len(list((run / "logs").glob("*.log"))) == 2, "the requeued task", seconds=240)
        _wait_for(lambda: "Resuming the unfinished run" in _newest_log(run).read_text(), "the resume", seconds=120)
    finally:
        job.cancel(check=False)
        _stop(run)
    first, requeued = [log.read_text() for log in sorted((run / "logs").glob("*.log"), key=os.path.getmtime)][:2]
    assert "SIGTERM: stopping after this step with a checkpoint" in first
    stopped = int(re.search(r"Stopped at step (\d+) of 3000", first).group(1))
    assert stopped > 0
    assert f"Resuming the unfinished run in {run} from step {stopped}" in requeued, requeued[-2000:]


def _stop(run: Path, seconds: float = 30) -> None:
    """Ends the run's process (the pid in its state file) if cancelling its job left it, or a task requeued just
    then, running: SIGTERM, so it saves and exits."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        state = launchers.read_state(run)
        if not launchers.is_alive(state):
            time.sleep(1)  # a requeued task may be starting
            if not launchers.is_alive(launchers.read_state(run)):
                return
            continue
        try:
            os.kill(int(state["pid"]), signal.SIGTERM)
        except ProcessLookupError:
            pass
        time.sleep(0.5)


def _newest_log(run: Path) -> Path:
    return max((run / "logs").glob("*.log"), key=os.path.getmtime)


def test_a_fit_requeued_after_its_training_ended_tests_its_checkpoint_instead(tmp_path):
    """SLURM requeues a job preempted during its run's test (after the last step's checkpoint): the same fit again
    would be refused as finished, so the requeued job tests the checkpoint; an unfinished run, a new one or another
    command starts as given."""
    run = tmp_path / "run"
    fit = ("fit", "--config", "some.yaml", "--trainer.default_root_dir", str(run))
    job = launchers.RunJob(str(run), fit)
    assert job.args_now() == fit  # nothing there yet
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump({"trainer": {"max_steps": 40}}))
    for step, expected in ((39, fit), (40, ("test", "--config", str(run / "config.yaml"), "--ckpt_path",
                                            str(run / "checkpoints" / "last.ckpt"), "--trainer.default_root_dir",
                                            str(run)))):
        torch.save({"state_dict": {}, "global_step": step, "hyper_parameters": {}}, run / "checkpoints" / "last.ckpt")
        assert job.args_now() == expected, step
    assert launchers.RunJob(str(run), ("cmr_fit", "--out", str(run))).args_now() == ("cmr_fit", "--out", str(run))
    (run / "checkpoints" / "last.ckpt").write_bytes(b"")  # damaged: the fit itself refuses it in one line
    assert job.args_now() == fit


def test_the_local_launcher_skips_a_run_taken_since_the_plan(tmp_path):
    """Two `primacy reproduce` at once on one directory: a run the other one has started by the time its turn comes is
    not started again."""
    events = []
    # `primacy --help`: a command that ends with 0 in 0.2 s (`primacy models` imports Lightning: 7 s)
    jobs = [launchers.RunJob(str(tmp_path / name), ("--help",)) for name in ("taken", "free")]
    codes = launchers.run_local(jobs, 1, lambda job, event: events.append((Path(job.run_dir).name, event)),
                                still_needed=lambda job: Path(job.run_dir).name == "free")
    assert events == [("taken", "skip"), ("free", "start"), ("free", "end")]
    assert codes == {str(tmp_path / "free"): 0}
    assert launchers.read_state(tmp_path / "free")["exit_code"] == 0 and not (tmp_path / "taken").exists()


def test_a_running_state_with_an_old_heartbeat_is_not_alive_even_if_its_pid_is():
    """A state file committed or copied while its run trained, read on a machine of the same name where its process
    id now belongs to another process (here: this one): the old heartbeat says the run is not running."""
    state = {"state": "running", "pid": os.getpid(), "host": socket.gethostname(), "updated": time.time()}
    assert launchers.is_alive(state)
    assert not launchers.is_alive({**state, "updated": time.time() - launchers.STALE_SECONDS - 1})
    assert not launchers.is_alive({**state, "state": "exited"})


def test_slurm_array_job_parameters(tmp_path, monkeypatch, capsys):
    """The sbatch script submitit writes for `--launcher slurm` (a fake sbatch captures it), for two panels."""
    extra_module("submitit")
    bin_dir, captured = fake_slurm(tmp_path, monkeypatch, 4242)
    out = tmp_path / "fig3"
    main(["reproduce", "fig3", "--scale", "paper", "--seeds", "2", "--panels", "A", "B", "--out", str(out),
          "--launcher", "slurm",
          "--slurm.partition", "gpu", "--slurm.time", "2880", "--slurm.array_parallelism", "4",
          "--slurm.account", "lab", "--trainer.devices", "2", "--trainer.strategy", "ddp"])
    script = captured.read_text()
    for line in ("#SBATCH --array=0-3%4", "#SBATCH --partition=gpu", "#SBATCH --time=2880",
                 "#SBATCH --ntasks-per-node=2", "#SBATCH --gpus-per-node=2", "#SBATCH --account=lab",
                 "#SBATCH --signal=USR2@90", "#SBATCH --nodes=1", "#SBATCH --job-name=primacy-fig3"):
        assert line in script, line
    assert "submitted 4 runs as job 4242" in capsys.readouterr().out
    main(["reproduce", "fig3", "--scale", "paper", "--seeds", "2", "--panels", "A", "B", "--out", str(out), "--status",
          "--trainer.devices", "2", "--trainer.strategy", "ddp"])
    assert capsys.readouterr().out.splitlines()[-1] == "4 queued"
    # SLURM (a fake sacct) says the first task was cancelled before it started: that run is missing again
    (bin_dir / "sacct").write_text('#!/bin/sh\nprintf "JobID|State|NodeList\\n4242_0|CANCELLED by 0|None\\n'
                                   '4242_[1-3]|PENDING|None\\n"\n')
    (bin_dir / "sacct").chmod(0o755)
    main(["reproduce", "fig3", "--scale", "paper", "--seeds", "2", "--panels", "A", "B", "--out", str(out), "--status",
          "--trainer.devices", "2", "--trainer.strategy", "ddp"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["fig3a-s4-legs-L128/seed0", "missing", "job", "4242_0", "ended", "CANCELLED", "before",
                                "the", "run", "started"]
    assert lines[1].split() == ["fig3a-s4-legs-L128/seed1", "queued", "job", "4242_1", "PENDING"]
    assert lines[-1] == "3 queued, 1 missing"


def test_slurm_launcher_without_slurm_is_one_line(tmp_path, monkeypatch, capsys):
    extra_module("submitit")
    monkeypatch.setenv("PATH", str(tmp_path))  # no srun, no sbatch
    with pytest.raises(SystemExit) as exit_info:
        main(["reproduce", "fig3", "--seeds", "1", "--panels", "B", "--out", str(tmp_path / "out"),
              "--launcher", "slurm"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "launcher=slurm needs a SLURM cluster" in err


@pytest.mark.parametrize("args, message", [
    (["fig9"], "figure=fig9 is not one of primacy's figures"),
    (["missing.yaml"], "figure=missing.yaml is neither one of primacy's figures nor a figure file (YAML) that exists"),
    (["fig3", "--seeds", "0"], "seeds=0 is invalid"),
    (["fig3", "--panels", "Z"], "panels=['Z'] are not panels of fig3"),
    (["fig3", "--trainer.default_root_dir", "x"], "--trainer.default_root_dir is set by primacy reproduce"),
    (["fig3", "--seed_everything=3"], "--seed_everything is set by primacy reproduce"),
    (["fig3", "--trainer.max_stepz", "3"], "did you mean --trainer.max_steps"),
    (["fig3", "--jobs", "0"], "jobs=0 is invalid"),
    (["fig3", "--slurm.partition", "gpu"], "--slurm.partition is for --launcher slurm"),
    (["fig3", "--wait"], "--wait is for --launcher slurm"),
    (["fig3", "--launcher", "slurm", "--jobs", "4"], "jobs=4 is for --launcher local"),
    (["fig3", "--launcher", "slurm", "--slurm.time", "0"], "slurm.time=0 is invalid"),
    (["fig3", "--draw", "--status"], "--draw and --status are two modes"),
    (["fig3", "--draw", "--jobs", "2"], "--draw launches nothing: leave out --launcher and --jobs"),
])
def test_bad_reproduce_arguments_are_one_line(args, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["reproduce", *args, "--out", str(tmp_path / "out")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err
    assert not (tmp_path / "out").exists()


def test_the_local_launcher_queues_the_jobs_a_finished_one_makes_possible(tmp_path):
    """A search's next run starts as soon as the run it depends on ends, while others still run; the jobs it adds
    report and return their exit codes like the first ones."""
    events = []
    first, slow = (launchers.RunJob(str(tmp_path / name), ("--help",)) for name in ("first", "slow"))
    follow = launchers.RunJob(str(tmp_path / "next"), ("--help",))
    codes = launchers.run_local([first, slow], 2, lambda job, event: events.append((Path(job.run_dir).name, event)),
                                more=lambda job: [follow] if Path(job.run_dir).name == "first" else [])
    assert events.index(("first", "end")) < events.index(("next", "start"))
    assert codes == {str(tmp_path / name): 0 for name in ("first", "slow", "next")}
    assert launchers.read_state(tmp_path / "next")["exit_code"] == 0


def test_the_jobs_a_finished_one_makes_possible_start_before_the_ones_still_waiting(tmp_path):
    """A search's next step (and a model's test at 2L) goes to the front: one slot, a queue of three, the first run's
    follow-ups start next, in their order."""
    events = []
    first, waiting = launchers.RunJob(str(tmp_path / "first"), ("--help",)), [
        launchers.RunJob(str(tmp_path / name), ("--help",)) for name in ("a", "b")]
    more = [launchers.RunJob(str(tmp_path / name), ("--help",)) for name in ("next", "test")]
    launchers.run_local([first, *waiting], 1, lambda job, event: events.append((Path(job.run_dir).name, event)),
                        more=lambda job: more if Path(job.run_dir).name == "first" else [])
    assert [name for name, event in events if event == "start"] == ["first", "next", "test", "a", "b"]
