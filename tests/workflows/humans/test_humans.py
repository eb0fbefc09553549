"""Models beside people (`primacy humans`, `primacy reproduce humans`): a person's curves equal psifr's own, a group's
mean and standard error are over its members, distances and indices are what they say, every output is written,
and bad input (no psifr, a run of another task, another list length) is one line."""

import json
import sys
from types import SimpleNamespace

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from conftest import extra_module
from support.cli import refusal
from support.free_recall_results import free_recall_run

from primacy import figures
from primacy.analysis.behaviour import comparison
from primacy.analysis.behaviour.free_recall import FreeRecallCurves, free_recall_counts, recall_positions, summarize
from primacy.cli import main
from primacy.errors import UsageError
from primacy.workflows.humans import people
from primacy.workflows.paper.pages import FIGURES, draw

SUBJECTS = 10  # per dataset in the default run; psifr's curves of a subject do not depend on the others


@pytest.fixture(scope="module")
def fr():
    return extra_module("psifr.fr")


def first_people(fr, dataset: people.Dataset, n: int | None):
    raw = fr.sample_data(dataset.psifr_name)
    if n is not None:
        raw = raw[raw["subject"].isin(raw["subject"].unique()[:n])]
    return raw


def check_people_against_psifr(fr, name: str, n: int | None) -> None:
    dataset = people.DATASETS[name]
    raw = first_people(fr, dataset, n)
    persons = people.people(raw, dataset.list_length)
    merged = fr.merge_free_recall(raw)
    spc, pnr, crp = (f(merged).reset_index() for f in (fr.spc, fr.pnr, fr.lag_crp))
    pnr = pnr[pnr["output"] == 1]
    assert [p.subject for p in persons] == list(raw["subject"].unique())
    for person in persons:
        ours = summarize(free_recall_counts(recall_positions(person.study, person.recalls), dataset.list_length))
        for curve, table, column in ((ours.spc, spc, "recall"), (ours.pfr, pnr, "prob"), (ours.lag_crp, crp, "prob")):
            theirs = table[table["subject"] == person.subject][column].to_numpy(dtype=float)
            np.testing.assert_allclose(curve.numpy(), theirs, rtol=0, atol=1e-12)  # NaN where psifr has NaN


@pytest.mark.parametrize("name", sorted(people.DATASETS))
def test_each_persons_curves_equal_psifrs(fr, name):
    check_people_against_psifr(fr, name, SUBJECTS)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(people.DATASETS))
def test_every_persons_curves_equal_psifrs(fr, name):
    check_people_against_psifr(fr, name, None)


def test_the_datasets_are_what_the_docs_say(fr):
    for name, subjects, lists in (("Morton2013", 40, 48), ("peers", 126, 28)):
        dataset = people.DATASETS[name]
        raw = fr.sample_data(dataset.psifr_name)
        assert raw["subject"].nunique() == subjects
        assert raw[raw["trial_type"] == "study"].groupby("subject")["list"].nunique().eq(lists).all()
        assert f"{subjects} people, {lists} lists of {dataset.list_length} words" in dataset.reference


def curves(spc, pfr, lag_crp) -> FreeRecallCurves:
    n = len(spc)
    return FreeRecallCurves(torch.tensor(spc, dtype=torch.float64), torch.tensor(pfr, dtype=torch.float64),
                            torch.arange(-(n - 1), n), torch.tensor(lag_crp, dtype=torch.float64), 0.0, 0.0, 0.0)


NAN = float("nan")
# three members of a group with L = 2 (lags -1, 0, +1); the third never had lag -1 possible
MEMBERS = [curves([1.0, 0.5], [0.8, 0.2], [0.2, NAN, 0.6]),
           curves([0.6, 0.5], [0.6, 0.4], [0.4, NAN, 0.2]),
           curves([0.8, 0.2], [1.0, 0.0], [NAN, NAN, 0.4])]


def test_a_groups_mean_and_standard_error_are_over_its_members():
    group = comparison.group_curves(MEMBERS)
    assert group.members == 3
    np.testing.assert_allclose(group.mean["spc"], [0.8, 0.4])
    np.testing.assert_allclose(group.se["spc"], [0.2 / np.sqrt(3), np.sqrt(0.03) / np.sqrt(3)])  # sd 0.2, 0.173
    np.testing.assert_allclose(group.mean["lag_crp"], [0.3, NAN, 0.4])  # lag -1 over the two members that had it
    np.testing.assert_allclose(group.se["lag_crp"], [np.sqrt(0.02) / np.sqrt(2), NAN, 0.2 / np.sqrt(3)])
    np.testing.assert_allclose(group.at_lags("mean", np.array([-1, 1, 2])), [0.3, 0.4, NAN])  # lag 2 beyond L


def test_indices_and_distances_are_read_off_the_mean_curves():
    model = comparison.group_curves(MEMBERS)
    people_group = comparison.group_curves([curves([0.5, 0.5], [0.5, 0.5], [0.1, NAN, 0.5])])
    # L = 2: a quarter is 1 item, no middle, so primacy and recency are NaN; early - late = 0.8 - 0.4
    found = comparison.indices(model)
    assert found["early_minus_late"] == pytest.approx(0.4) and found["forward_asymmetry"] == pytest.approx(0.1)
    gaps = comparison.distances(model, people_group)
    assert gaps["rmse_spc"] == pytest.approx(np.sqrt((0.3**2 + 0.1**2) / 2))
    assert gaps["rmse_pfr"] == pytest.approx(np.sqrt((0.3**2 + 0.3**2) / 2))
    assert gaps["rmse_lag_crp"] == pytest.approx(np.sqrt((0.2**2 + 0.1**2) / 2))  # lags -1, +1 of COMPARED_LAGS
    assert gaps["forward_asymmetry_difference"] == pytest.approx(0.1 - 0.4)
    assert gaps["early_minus_late_difference"] == pytest.approx(0.4 - 0.0)
    with pytest.raises(UsageError, match="the model's lists have 2 items and the people's 3"):
        comparison.distances(model, comparison.group_curves([curves([0.5] * 3, [0.3] * 3, [0.1] * 5)]))


def test_a_model_keeps_its_colour_in_every_row_of_the_figure_also_where_another_is_missing():
    group = comparison.group_curves(MEMBERS)
    rows = [("A", group, {"S4D": group, "Transformer": group, "Mamba": group}),
            ("B", group, {"S4D": group, "Mamba": group})]  # a row without the Transformer, as a left-out cell
    fig = figures.humans.beside_people(rows)
    colours = [{line.get_label().split(",")[0]: line.get_color() for line in row.get_lines()}
               for row in fig.axes[::3]]
    plt.close(fig)
    assert colours[0] == {"people (A)": "k", "S4D": "tab:blue", "Transformer": "tab:orange", "Mamba": "tab:green"}
    assert colours[1] == {"people (B)": "k", "S4D": "tab:blue", "Mamba": "tab:green"}


def test_primacy_humans_writes_the_figure_the_curves_and_the_distances(fr, tmp_path, capsys):
    model = tmp_path / "s4d"
    for seed in range(2):
        free_recall_run(model, f"seed{seed}", 16, seed)
    out = tmp_path / "out"
    main(["humans", str(model), "--dataset", "peers", "--out", str(out)])
    assert "models beside people (peers)" in capsys.readouterr().out
    assert {p.name for p in out.iterdir()} == {"humans.png", "humans.pdf", "curves.csv", "humans.md", "summary.json"}
    summary = json.loads((out / "summary.json").read_text())["peers"]
    assert summary["groups"]["people"]["members"] == 126 and summary["groups"]["s4d"]["members"] == 2
    assert summary["groups"]["s4d"]["runs"] == [str(model / "seed0"), str(model / "seed1")]
    rows = (out / "curves.csv").read_text().splitlines()
    header = rows[0].split(",")
    table = [dict(zip(header, row.split(","))) for row in rows[1:]]
    spc = {(r["group"], int(r["x"])): float(r["mean"]) for r in table if r["curve"] == "spc"}
    merged = fr.merge_free_recall(fr.sample_data("peers_notask"))
    psifr_spc = fr.spc(merged).groupby("input")["recall"].mean().to_numpy()
    np.testing.assert_allclose([spc["people", i] for i in range(1, 17)], psifr_spc, rtol=0, atol=1e-12)
    seeds = [summarize(free_recall_counts(recall_positions(*_lists(model / f"seed{s}")), 16)).spc.numpy()
             for s in range(2)]
    np.testing.assert_allclose([spc["s4d", i] for i in range(1, 17)], np.mean(seeds, axis=0), rtol=0, atol=1e-12)
    distance = summary["distances"]["s4d"]["rmse_spc"]
    assert distance == pytest.approx(np.sqrt(np.mean((np.mean(seeds, axis=0) - psifr_spc) ** 2)), abs=1e-12)
    fit = summary["groups"]["people"]["cmr_fit"]  # the fitter models get (results.cmr_fit_entry), on the people's mean
    assert set(fit) == {"lags", "paper", "canonical"} and all(fit[v]["distance"] >= 0 for v in ("paper", "canonical"))
    table = [line.split(" | ") for line in (out / "humans.md").read_text().splitlines()[2:]]  # the table for docs
    people, s4d = table
    assert people[0] == "| **L = 16**, people (peers)" and people[1] == "126" and s4d[1] == "2"
    assert people[6] == f"{summary['groups']['people']['recency_index']:+.3f}".replace("-", "−")
    assert people[2].startswith(f"{spc['people', 1]:.3f} ± ") and people[-1] == "— |"
    assert s4d[-1] == f"{distance:.3f} / " + " / ".join(
        f"{summary['distances']['s4d'][f'rmse_{key}']:.3f}" for key in ("pfr", "lag_crp")) + " |"


def _lists(run):
    with np.load(run / "results" / "free_recall.npz") as arrays:
        return torch.from_numpy(arrays["study"]), torch.from_numpy(arrays["recalls"])


def test_bad_input_is_one_line(tmp_path, capsys):
    run24 = free_recall_run(tmp_path, "l24", 24, 0)
    out = str(tmp_path / "out")
    assert refusal(["humans", str(run24), "--dataset", "peers", "--out", out], capsys) == (
        f"primacy: error: run {run24} recalled lists of 24 items and peers's people lists of 16: train at L = 16 "
        "(configs/cpu/free-recall-*-L16.yaml)")
    verification = tmp_path / "verification"
    (verification / "results").mkdir(parents=True)
    (verification / "results" / "summary.json").write_text(json.dumps({"task": "verification", "n_items": 16}))
    assert refusal(["humans", str(verification), "--dataset", "peers", "--out", out], capsys) == (
        f"primacy: error: run {verification} is a verification run: primacy humans compares free-recall runs "
        "(FreeRecallTask)")
    assert refusal(["humans", str(tmp_path / "missing"), "--dataset", "peers", "--out", out], capsys) == (
        f"primacy: error: run {tmp_path / 'missing'} does not exist: give free-recall run directories")
    assert refusal(["humans", str(run24), str(run24), "--dataset", "Morton2013", "--labels", "a", "--out", out],
                   capsys) == "primacy: error: labels=['a'] names 1 models for 2 paths: give one label per path"
    assert refusal(["humans", *[str(run24)] * 10, "--dataset", "Morton2013", "--out", out], capsys) == (
        "primacy: error: runs: 10 models given; the figure draws at most 9, one colour each: compare fewer at a time")
    assert not (tmp_path / "out").exists(), "nothing is written before every input is checked"


def test_without_psifr_the_command_names_the_extra_and_nothing_else_needs_it(tmp_path, capsys, monkeypatch):
    run = free_recall_run(tmp_path, "l24", 24, 0)
    monkeypatch.setitem(sys.modules, "psifr", None)  # what `import psifr` meets when it is not installed
    monkeypatch.setitem(sys.modules, "psifr.fr", None)
    assert refusal(["humans", str(run), "--dataset", "Morton2013", "--out", str(tmp_path / "out")], capsys) == (
        "primacy: error: dataset=Morton2013 comes with psifr, which is not installed: pip install -e '.[humans]'")
    for module in ("primacy.workflows.humans.page", "primacy.workflows.humans.people", "primacy.workflows.paper.pages"):
        assert module in sys.modules  # imported above without psifr: only loading a dataset needs it


def test_reproduce_humans_draws_one_row_per_dataset_from_the_panels_runs(fr, tmp_path):
    spec = FIGURES["humans"]
    runs = []
    for panel in spec.panels:
        name = panel.config("cpu")
        n_items = 24 if name.endswith("L24") else 16
        for seed in range(2):
            run = free_recall_run(tmp_path / name, f"seed{seed}", n_items, seed)
            runs.append(SimpleNamespace(panel=name, dir=run))
    written = draw(spec, "cpu", tmp_path, runs)
    out = tmp_path / "humans"
    assert {p.name for p in written} == {"humans.png", "humans.pdf", "curves.csv", "humans.md", "summary.json"}
    summary = json.loads((out / "summary.json").read_text())
    assert sorted(summary) == ["Morton2013", "peers"]
    for dataset, n in (("Morton2013", 40), ("peers", 126)):
        groups = summary[dataset]["groups"]
        assert list(groups) == ["people", "S4D", "LSTM", "Transformer"]
        assert groups["people"]["members"] == n and all(groups[m]["members"] == 2 for m in ("S4D", "LSTM"))
        assert set(summary[dataset]["distances"]) == {"S4D", "LSTM", "Transformer"}
