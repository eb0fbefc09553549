"""`primacy reproduce recall-like-people`: the phenomena of one member are what hand-made recall sequences give, the
table's directions follow the one rule (>= 2 SE) against people's and the literature's, and the command plans the
grid's runs from their composed configs, says where each stands, resumes a stopped one, and scores and draws the grid
(tiny runs, in the default tier) with a row per cell and a column per phenomenon."""

import csv
import json
import math
import signal

import pytest
import torch
from conftest import ROOT, extra_module

from primacy import figures, registry
from primacy.analysis.behaviour.free_recall import FreeRecallCurves, free_recall_counts, recall_positions, summarize
from primacy.analysis.behaviour.phenomena import first_recall_chance, phenomena
from primacy.analysis.evidence import Estimate, word
from primacy.cli import main
from primacy.testing.runs import NO_FIGURES, QUIET
from primacy.workflows.paper import phenomena as page
from primacy.workflows.paper.pages import FIGURES


def scores(study, recalls):
    study, recalls = torch.tensor(study), torch.tensor(recalls)
    return phenomena(summarize(free_recall_counts(recall_positions(study, recalls), study.shape[1])))


def test_a_recall_that_starts_at_the_end_has_recency_and_starts_from_the_last_items():
    # L = 4 (q = 1). List 1 recalls positions 3, 0, 1; list 2 positions 3, 2, 0. Recall probability 1, .5, .5, 1;
    # both start with the last item; transitions -3, +1 (list 1) and -1, -2 (list 2): lag +1 was possible once and
    # taken once, lag -1 possible three times (from 3 twice, from 2 once) and taken once.
    found = scores([[10, 11, 12, 13]] * 2, [[13, 10, 11, -1], [13, 12, 10, -1]])
    assert found == pytest.approx({"recency_index": 0.5, "primacy_index": 0.5, "first_recall_last": 1.0,
                                   "forward_asymmetry": 1 - 1 / 3}, abs=1e-12)


def test_intrusions_before_the_first_recall_are_skipped_and_a_list_without_recall_has_no_start():
    # L = 8, q = 2: the first correct outputs are positions 0 and 7 (an intrusion, 99, before the second): one of two
    # lists starts among the last two items
    found = scores([list(range(8))] * 2, [[0, 1, 2, -1], [99, 7, 6, -1]])
    assert found["first_recall_last"] == pytest.approx(0.5, abs=1e-12)
    # lag +1 taken at both of its chances (0 -> 1 -> 2), lag -1 at its one (7 -> 6): 1 - 1
    assert found["forward_asymmetry"] == pytest.approx(0.0, abs=1e-12)
    nothing = scores([[0, 1, 2, 3]], [[99, 98, -1, -1]])  # only intrusions: no first recall, no transition
    assert math.isnan(nothing["first_recall_last"]) and math.isnan(nothing["forward_asymmetry"])
    assert first_recall_chance(24) == 0.25 and first_recall_chance(8) == 0.25


def test_the_docstrings_example():
    lags = torch.arange(-3, 4)
    crp = torch.tensor([0.0, 0.0, 0.2, float("nan"), 0.6, 0.0, 0.0], dtype=torch.float64)
    curves = FreeRecallCurves(torch.tensor([1.0, 0.5, 0.5, 1.0], dtype=torch.float64),
                              torch.tensor([0.0, 0.0, 0.0, 1.0], dtype=torch.float64), lags, crp, 0.0, 0.0, 3.0)
    assert phenomena(curves) == pytest.approx({"recency_index": 0.5, "primacy_index": 0.5, "first_recall_last": 1.0,
                                               "forward_asymmetry": 0.4}, abs=1e-12)


def estimate(mean, se, n=3):
    return Estimate(mean, se, n)


def test_directions_follow_the_one_rule_against_people_and_the_literature():
    people = {"recency_index": estimate(0.23, 0.02, 40), "primacy_index": estimate(0.03, 0.02, 40),
              "first_recall_last": estimate(0.95, 0.01, 40), "forward_asymmetry": estimate(0.0, 0.01, 40)}
    cell = {"recency_index": estimate(0.05, 0.025), "primacy_index": estimate(-0.1, 0.01),
            "first_recall_last": estimate(0.27, 0.01), "forward_asymmetry": estimate(0.3, 0.2)}
    groups = {("S4D", "reward", "immediate"): cell,
              ("S4D", "reward", "delayed"): {**cell, "recency_index": estimate(0.0, 0.01)},
              ("S4D", "reward", "continual"): {**cell, "recency_index": estimate(0.02, 0.015)}}
    rows = page.table_rows(people, groups, {key: "config" for key in groups})
    assert [(r["model"], r["condition"]) for r in rows] == [("people", "immediate"), ("S4D", "immediate"),
                                                             ("S4D", "delayed"), ("S4D", "continual")]
    human, immediate, delayed, continual = rows
    assert human["recency_index_direction"] == "positive" and human["primacy_index_direction"] == "neither"
    assert human["recency_index_matches"] is None  # people are the reference, not checked against themselves
    # exactly 2 SE is an effect; the first recall is read against its chance, 0.25: 0.27 ± 0.01 is 2 SE above it
    assert immediate["recency_index_direction"] == "positive" and immediate["recency_index_matches"] is True
    assert immediate["primacy_index_direction"] == "negative" and immediate["primacy_index_matches"] is False
    assert immediate["first_recall_last_direction"] == "positive" and immediate["first_recall_last_matches"] is True
    assert immediate["forward_asymmetry_direction"] == "neither" and immediate["forward_asymmetry_matches"] is True
    assert immediate["delay_loss"] is None and immediate["delay_loss_matches"] is None
    # delayed: no recency, as Glanzer & Cunitz; its loss 0.0 - 0.05 with SE hypot(0.01, 0.025) = 0.0269: 1.86 SE
    assert delayed["recency_index_matches"] is True and delayed["primacy_index_expected"] is None
    assert delayed["delay_loss"] == pytest.approx(-0.05) and delayed["delay_loss_se"] == pytest.approx(
        math.hypot(0.01, 0.025))
    assert delayed["delay_loss_direction"] == "neither" and delayed["delay_loss_matches"] is False
    # continual: 0.02 ± 0.015 is no recency, and its return over delayed (0.02 ± 0.018) is none: both differ
    assert continual["recency_index_direction"] == "neither" and continual["recency_index_matches"] is False
    assert continual["continual_return_direction"] == "neither" and continual["continual_return_matches"] is False
    assert continual["continual_return_n"] == 3
    table = page.markdown(rows, {("Mamba", "reward", "delayed"): "not installed"}, ["primacy humans ..."])
    lines = table.splitlines()
    assert lines[0].count("|") == 4 + len(page.COLUMNS) + 1 and len([x for x in lines if x.startswith("| S4D")]) == 3
    assert "+0.050 ± 0.025 (+ ✓)" in lines[3] and "−0.100 ± 0.010 (− ✗)" in lines[3]
    assert "- Mamba/reward/delayed: not installed" in table and "Glanzer & Cunitz (1966)" in table
    # what reproduces what, read off the marks: recency in the immediate and delayed rows, not the continual one
    assert "- recency: S4D/reward/immediate, S4D/reward/delayed (2 of 3 rows checked)" in lines
    assert "- recency, delayed − immediate: none (0 of 1 rows checked)" in lines
    assert "- every phenomenon its row is checked on: none (0 of 3 rows)" in lines
    alike = {**cell, "primacy_index": estimate(0.0, 0.01)}  # no primacy, as these people (0.03 ± 0.02)
    rows = page.table_rows(people, {("S4D", "reward", "immediate"): alike}, {("S4D", "reward", "immediate"): "c"})
    assert "- every phenomenon its row is checked on: S4D/reward/immediate (1 of 1 rows)" in page.reproduced(rows)
    one_seed = {key: Estimate(value.mean, None, 1) for key, value in alike.items()}
    rows = page.table_rows(people, {("S4D", "reward", "immediate"): one_seed}, {("S4D", "reward", "immediate"): "c"})
    assert page.reproduced(rows) == ["No row is checked against people yet: a row needs an SE, so at least two seeds."]


def test_the_grid_is_every_backbone_objective_and_condition_at_the_cpu_scale_only():
    spec = FIGURES["recall-like-people"]
    assert len(spec.panels) == 36 - len(page.LEFT_OUT)
    assert {panel.config("paper") for panel in spec.panels} == {""}
    assert {panel.requires for panel in spec.panels} == {"", "MambaBackbone"}


def test_without_the_mamba_plugin_its_panels_are_left_out_saying_so(tmp_path, capsys, monkeypatch):
    names = registry.names
    monkeypatch.setattr(registry, "names", lambda kind="backbone": [n for n in names(kind) if n != "MambaBackbone"])
    main(["reproduce", "recall-like-people", "--panels", "S4D/reward/delayed", "--status", "--seeds", "1", "--out",
          str(tmp_path / "out")])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("recall-like-people: leaving out 6 panels (Mamba/order-agnostic/immediate, ")
    assert "backbone MambaBackbone is not installed; install primacy-mamba" in lines[0]
    assert lines[1].split() == ["recall-like-people-s4d-reward-delayed-L24/seed0", "missing"]


def test_the_paper_scale_is_refused_in_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["reproduce", "recall-like-people", "--scale", "paper", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "figure recall-like-people has no paper-scale config for panel" in err[0], err
    assert not (tmp_path / "out").exists()


# The grid's own configs (composed from their parts), cut to under a second a run: three steps of a narrow model on a
# few lists, without figures of its own (the page's figure is drawn).
TINY = [*QUIET, *NO_FIGURES, "--trainer.max_steps", "3", "--trainer.val_check_interval", "3",
        "--data.init_args.num_test_sets", "4", "--data.init_args.num_val_sets", "1", "--data.init_args.batch_size", "2",
        "--data.init_args.num_held_out", "8", "--model.init_args.warmup_steps", "1",
        "--model.init_args.backbone.init_args.d_model", "4"]


def test_the_command_resumes_a_stopped_run_then_scores_and_draws_the_table_and_figure(tmp_path, capsys, monkeypatch):
    """Two cells x two seeds, trained in this process as the command would launch them (a launched run pays its
    imports again; launching is tests/workflows/paper/test_reproduce.py's), one of them stopped at step 2 of 3:
    --status says so, it resumes, and the command, finding every run done, trains nothing and writes the table (a row
    per cell after the people, a column per phenomenon, each verdict the rule's) and the figure."""
    extra_module("psifr.fr")
    monkeypatch.setattr(figures, "FORMATS", ("png",))
    from primacy.workflows.paper.reproduce import plan

    out = tmp_path / "out"
    panels = ["DeltaNet/order-agnostic/immediate", "DeltaNet/order-agnostic/delayed"]
    command = ["reproduce", "recall-like-people", "--panels", *panels, "--seeds", "2", "--out", str(out), *TINY]
    runs, _ = plan(FIGURES["recall-like-people"].select(panels), "cpu", 2, out, TINY, lambda args: args)  # unparsed
    *trained, stopped = runs
    for run in trained:
        main(list(run.fit_args()))
    stop = {"class_path": "signals.SignalAt", "init_args": {"step": 2, "signum": int(signal.SIGINT)}}
    with pytest.raises(SystemExit):  # Ctrl-C at step 2
        main([*stopped.fit_args(), f"--trainer.callbacks+={json.dumps(stop)}"])
    capsys.readouterr()
    main([*command, "--status"])
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[:2] for line in lines[:-1]] == [[run.label, "done"] for run in trained] + [
        [stopped.label, "stopped"]]
    assert "at step 2 of 3: resumes" in lines[-2] and lines[-1] == "3 done, 1 stopped"

    main(list(stopped.fit_args()))  # what the command runs for it: the run resumes from its checkpoint to the end
    assert torch.load(stopped.dir / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 3
    capsys.readouterr()
    main(command)  # every run done: nothing is trained (nor said to be), the page is written
    printed = capsys.readouterr().out
    assert "running" not in printed and f"wrote {out / 'recall-like-people.md'}" in printed
    with open(out / "recall-like-people.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(r["model"], r["objective"], r["condition"], r["config"]) for r in rows] == [
        ("people", "", "immediate", "Morton2013"),
        ("DeltaNet", "order-agnostic", "immediate", "recall-like-people-deltanet-agnostic-immediate-L24"),
        ("DeltaNet", "order-agnostic", "delayed", "recall-like-people-deltanet-agnostic-delayed-L24")]
    assert rows[0]["recency_index_n"] == "40" and rows[1]["recency_index_n"] == rows[2]["recency_index_n"] == "2"
    assert rows[0]["recency_index_direction"] == "positive"  # Morton2013's people: recency +0.23
    people, immediate, delayed = rows
    assert float(delayed["delay_loss"]) == pytest.approx(float(delayed["recency_index"]) - float(
        immediate["recency_index"]), abs=1e-9)
    assert not immediate["delay_loss"] and delayed["recency_index_expected"] == "neither"
    assert immediate["recency_index_expected"] == people["recency_index_direction"]
    for row in (immediate, delayed):  # every verdict is the rule applied to the row's own mean and SE
        for key in page.COLUMNS:
            if not row[key]:
                continue
            tested = Estimate(float(row[key]) - (0.25 if key == "first_recall_last" else 0), float(row[f"{key}_se"]),
                              int(row[f"{key}_n"]))
            assert row[f"{key}_direction"] == word(tested), (row["condition"], key)
            if row[f"{key}_expected"]:
                assert row[f"{key}_matches"] == str(word(tested) == row[f"{key}_expected"]), key
    table = (out / "recall-like-people.md").read_text().splitlines()
    headers = " | ".join(page.HEADERS[key] for key in page.COLUMNS)
    assert table[0] == f"| model | objective | condition | n | {headers} |"
    assert [line.split(" | ")[:3] for line in table if line.startswith("| ")][1:] == [
        ["| people (Morton2013)", "—", "immediate"], ["| DeltaNet", "order-agnostic", "immediate"],
        ["| DeltaNet", "order-agnostic", "delayed"]]
    assert (out / "recall-like-people.png").is_file()
    assert any(line.startswith("primacy humans ") and "--fit" in line for line in table)
    absent = "- DeltaNet/reward/immediate: no run of it is done in this folder (still training, or --panels left it"
    assert any(line.startswith(absent) for line in table)  # not said to be uninstalled (it was, mid-grid)


def test_a_cell_without_a_row_says_whether_its_backbone_is_missing_or_its_runs_are_not_done(monkeypatch):
    names = registry.names
    monkeypatch.setattr(registry, "names", lambda kind="backbone": [*names(kind), "MambaBackbone"])
    assert page._absent(("Mamba", "reward", "delayed")).startswith("no run of it is done")  # the plugin is installed
    monkeypatch.setattr(registry, "names", lambda kind="backbone": [n for n in names(kind) if n != "MambaBackbone"])
    assert page._absent(("Mamba", "reward", "delayed")) == "not run here: its backbone (MambaBackbone) is not installed"
    assert page._absent(("S4D", "reward", "delayed")).startswith("no run of it is done")


def test_the_cmr_fits_are_read_back_from_the_folders_the_page_names(tmp_path):
    """The page's CMR table reads each `primacy humans --fit` summary in the folder its command names (here a real
    one: the kept fit of humans-cpu's models beside Morton2013's people): the people once, then every fitted cell,
    with the fit's own log-likelihood per recall, ΔBIC against the grid cell and mean parameters; unfitted cells and
    absent folders are left out."""
    kept = json.loads((ROOT / "results" / "humans-fit-Morton2013" / "summary.json").read_text())
    folder = tmp_path / "cmr-order-agnostic-immediate"
    folder.mkdir()
    (folder / "summary.json").write_text(json.dumps(kept))
    cells = [("S4D", "order-agnostic", "immediate"), ("Mamba", "order-agnostic", "immediate"),
             ("LSTM", "reward", "immediate")]  # Mamba not in the fit; the reward folder absent
    rows = page.cmr_rows(tmp_path, cells)
    assert [(r["model"], r["objective"], r["condition"]) for r in rows] == [
        ("people", "", "immediate"), ("S4D", "order-agnostic", "immediate")]
    fit = kept["Morton2013"]["likelihood_fit"]
    people, s4d = rows
    assert people["members"] == 40 and s4d["members"] == 3
    assert s4d["log_likelihood_per_recall"] == fit["groups"]["S4D"]["log_likelihood"] / fit["groups"]["S4D"]["n"]
    assert s4d["delta_bic"] == fit["grid"]["S4D"]["delta_bic"] and s4d["members_better"] == 3
    assert s4d["B_rec"] == fit["groups"]["S4D"]["parameters"]["B_rec"]["mean"]
    table = page.cmr_markdown(rows)
    assert table[2].startswith("| model | objective | condition | n | log-likelihood per recall |")
    assert table[-1].startswith("| S4D | order-agnostic | immediate | 3 | −0.962 | +4,238.2 (3 of 3) |")
    assert page.cmr_rows(tmp_path / "nothing", cells) == []
