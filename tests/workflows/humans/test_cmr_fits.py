"""CMR fitted by likelihood to participants (`primacy cmr_fit`, `primacy humans --fit`): one file per participant,
written as its fit ends, so a stopped fit resumes with the participants not yet written; a file of other settings
is refused, never mixed in; people and model seeds go through the same code, and humans --fit gathers them into a
table, a figure and summary.json with bootstrap intervals."""

import csv
import json
import math
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from support.cli import refusal
from support.free_recall_results import free_recall_run
from support.people import lists, write

from primacy.analysis.behaviour.cmr.fitting import count_events
from primacy.analysis.behaviour.cmr.likelihood import cmr_log_likelihood
from primacy.analysis.behaviour.free_recall import long_format_rows, recall_positions
from primacy.cli import main
from primacy.workflows.humans import cmr_fits, people

QUICK = ["--max_generations", "2", "--no_polish"]  # a real search cut short: these tests check the bookkeeping


def fit_files(out):
    return sorted(path.name for path in out.glob("*.json"))


def test_cmr_fit_writes_each_participant_as_it_ends_and_resumes(three_people, tmp_path, capsys):
    path, _ = three_people
    out = tmp_path / "fits"
    main(["cmr_fit", "--data", str(path), "--out", str(out), "--only", "bo", *QUICK])
    assert fit_files(out) == ["bo.json"]
    written = (out / "bo.json").stat().st_mtime_ns
    capsys.readouterr()
    main(["cmr_fit", "--data", str(path), "--out", str(out), *QUICK])  # as after an interruption: the rest only
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0].strip() for line in lines[:-1]] == ["ann", "cy"] and lines[-1].startswith("3 partic")
    assert fit_files(out) == ["ann.json", "bo.json", "cy.json"] and (out / "bo.json").stat().st_mtime_ns == written
    persons = {p.subject: p for p in people.read_people(path)}
    for name in ("ann", "bo", "cy"):
        content = json.loads((out / f"{name}.json").read_text())
        fit = content["fit"]
        assert content["participant"] == name and content["list_length"] == 5 and content["n_lists"] == 6
        assert content["settings"]["seed"] == 0 and content["settings"]["optimiser"]["maxiter"] == 2
        person = persons[name]
        positions = recall_positions(person.study, person.recalls).numpy()
        assert fit["log_likelihood"] == pytest.approx(cmr_log_likelihood(fit["parameters"], positions, 5), abs=1e-9)
        correct = {(b, int(p)) for b, row in enumerate(positions) for p in row if p >= 0}
        assert fit["n"] == len(correct) + len(positions), "each correct recall (repeats dropped) and each stop"


def test_a_fit_under_other_settings_or_a_damaged_one_is_refused_in_one_line(three_people, tmp_path, capsys):
    path, _ = three_people
    out = tmp_path / "fits"
    main(["cmr_fit", "--data", str(path), "--out", str(out), "--only", "ann", *QUICK])
    assert refusal(["cmr_fit", "--data", str(path), "--out", str(out), "--seed", "1", *QUICK], capsys) == (
        f"primacy: error: {out / 'ann.json'} was fitted under other settings (seed 0 there, 1 now): give another "
        "--out, or delete it to fit again")
    (out / "ann.json").write_text("{")
    assert refusal(["cmr_fit", "--data", str(path), "--out", str(out), *QUICK], capsys).startswith(
        f"primacy: error: {out / 'ann.json'} is damaged (JSONDecodeError: ")
    assert refusal(["cmr_fit", "--data", str(path), "--out", str(out), "--only", "dee"], capsys) == (
        "primacy: error: only=dee is not a participant of these data (e.g. ann, bo, cy)")
    assert refusal(["cmr_fit", "--data", str(path), "--out", str(out), "--max_generations", "0"], capsys) == (
        "primacy: error: max_generations=0 is invalid: it must be at least 1")
    assert refusal(["cmr_fit", "--data", str(path), "--out", str(out), "--spec", str(tmp_path / "no.json")],
                   capsys).startswith(f"primacy: error: spec={tmp_path / 'no.json'} cannot be read (FileNotFoundError")
    (tmp_path / "spec.json").write_text(json.dumps({"free": {"T": [0.01, 1]}, "fixed": {"Afc": 0, "Acf": 0}}))
    assert refusal(["cmr_fit", "--data", str(path), "--out", str(out), "--spec", str(tmp_path / "spec.json")],
                   capsys) == ("primacy: error: FitSpec: B_enc is missing: give it in one of free (bounds), fixed (a "
                               "value) and dependent (an expression)")
    assert fit_files(out) == ["ann.json"]


def test_cmr_fit_fits_the_parameters_a_spec_file_frees(three_people, tmp_path):
    path, _ = three_people
    spec = cmr_fits.FitSpec(free={"B_rec": (0.0, 1.0), "X2": (0.0, 5.0)}, dependent={"Dfc": "1 - Lfc"},
                            fixed={"Afc": 0.0, "Acf": 0.0, "B_enc": 0.5, "B_start": 0.1, "Lfc": 0.3, "Lcf": 0.6,
                                   "Dcf": 0.4, "P1": 1.0, "P2": 1.0, "T": 0.2, "X1": 0.05})
    (tmp_path / "spec.json").write_text(json.dumps(spec.to_dict()))
    out = tmp_path / "fits"
    main(["cmr_fit", "--data", str(path), "--out", str(out), "--only", "bo", "--spec", str(tmp_path / "spec.json"),
          *QUICK])
    content = json.loads((out / "bo.json").read_text())
    assert content["settings"]["spec"] == spec.to_dict() and content["fit"]["free"] == ["B_rec", "X2"]
    assert content["fit"]["parameters"]["B_enc"] == 0.5 and content["fit"]["parameters"]["Dfc"] == pytest.approx(0.7)


@pytest.fixture
def eight_item_people(tmp_path):
    """Three people's lists of 8 items (all lags of the grid fit, -5..5, possible), as a file in psifr's format."""
    rows = [row for seed, name in enumerate(["ann", "bo", "cy"])
            for row in long_format_rows(*lists(seed, n_lists=12, n_items=8), name)]
    path = tmp_path / "eight.csv"
    write(path, rows)
    return path


def test_humans_fit_fits_people_and_seeds_alike_and_sets_bic_beside_the_grid_cell(eight_item_people, tmp_path,
                                                                                   capsys):
    path = eight_item_people
    model = tmp_path / "model"
    for seed in range(2):
        free_recall_run(model, f"seed{seed}", 8, seed)
    out = tmp_path / "out"
    # each seed fitted on its first 10 test lists of 40; the people on all 12 of theirs
    args = ["humans", str(model), "--data", str(path), "--out", str(out), "--fit", "--fit_max_generations", "2",
            "--fit_no_polish", "--fit_lists", "10"]
    main([*args, "--status"])
    status = capsys.readouterr().out.splitlines()
    assert status == ["fits/people/0       missing  0 of 3 fitted", "fits/model/0        missing  0 of 2 fitted",
                      "grid-fits/people/0  missing  0 of 3 fitted", "grid-fits/model/0   missing  0 of 2 fitted",
                      "4 missing"]
    # the people's and the model's own fits, as a stopped humans --fit would have left them: the rest is launched
    main(["cmr_fit", "--data", str(path), "--out", str(out / "fits" / "people"), *QUICK])
    main(["cmr_fit", "--runs", str(model / "seed0"), str(model / "seed1"), "--out", str(out / "fits" / "model"),
          "--lists", "10", *QUICK])
    seed0 = cmr_fits.run_participants([model / "seed0"])[0]
    written = json.loads((out / "fits" / "model" / "seed0.json").read_text())
    assert written["n_lists"] == 10 and written["settings"]["lists"] == 10
    assert written["fit"]["n"] == count_events(seed0.positions[:10], 8)
    assert json.loads((out / "fits" / "people" / "ann.json").read_text())["n_lists"] == 12
    capsys.readouterr()
    main([*args, "--jobs", "2"])
    printed = capsys.readouterr().out
    assert "2 of 4 jobs need nothing; running 2 (5 participants at most)" in printed, printed
    assert "fits.csv, fits.md, parameters.png" in printed
    assert {p.name for p in out.iterdir()} >= {"fits.csv", "fits.md", "parameters.png", "parameters.pdf", "fits",
                                               "grid-fits", "summary.json"}
    with (out / "fits.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [(r["group"], r["participant"]) for r in rows] == [("people", s) for s in ("ann", "bo", "cy")] + [
        ("model", "seed0"), ("model", "seed1")]
    for row in rows:
        assert float(row["bic"]) == pytest.approx(int(row["k"]) * math.log(int(row["n"]))
                                                  - 2 * float(row["log_likelihood"]))
    summary = json.loads((out / "summary.json").read_text())["eight"]
    fit = summary["likelihood_fit"]
    assert fit["free"] == ["B_enc", "B_start", "B_rec", "Lfc", "Lcf", "P1", "P2", "T", "X1", "X2"]
    people_fit = fit["groups"]["people"]
    b_enc = np.array([float(r["B_enc"]) for r in rows[:3]])
    assert people_fit["members"] == 3 and people_fit["parameters"]["B_enc"]["mean"] == pytest.approx(b_enc.mean())
    low, high = people_fit["parameters"]["B_enc"]["ci_low"], people_fit["parameters"]["B_enc"]["ci_high"]
    assert b_enc.min() - 1e-12 <= low <= b_enc.mean() <= high <= b_enc.max() + 1e-12
    assert fit["groups"]["model"]["bic"] == pytest.approx(sum(float(r["bic"]) for r in rows[3:]))

    for label, members in (("people", ("ann", "bo", "cy")), ("model", ("seed0", "seed1"))):
        # each member fitted again at its group's cell of the lag-CRP grid, scored by the same likelihood
        cell = summary["groups"][label]["cmr_fit"]["canonical"]
        grid = fit["grid"][label]
        assert grid["cell"] == {name: cell[name] for name in ("beta_enc", "beta_rec", "gamma_ft")}
        at_cell = [json.loads((out / "grid-fits" / label / f"{name}.json").read_text())["fit"] for name in members]
        own = [r for r in rows if r["group"] == label]
        for one in at_cell:
            parameters = one["parameters"]
            assert (parameters["B_enc"], parameters["B_rec"], parameters["Lfc"]) == (
                cell["beta_enc"], cell["beta_rec"], cell["gamma_ft"])
            assert (parameters["Lcf"], parameters["Dcf"], parameters["P1"], parameters["T"]) == (1, 0, 0, 0.2)
            assert one["free"] == ["B_start", "X1", "X2"] and one["k"] == 3
        n = sum(one["n"] for one in at_cell)
        assert n == grid["n"] == sum(int(r["n"]) for r in own)
        assert grid["bic"] == pytest.approx(sum(one["bic"] for one in at_cell) + 3 * math.log(n))
        assert grid["likelihood_bic"] == pytest.approx(fit["groups"][label]["bic"])
        assert grid["delta_bic"] == pytest.approx(grid["bic"] - grid["likelihood_bic"])
        assert grid["members_better"] == sum(float(r["bic"]) < one["bic"] for r, one in zip(own, at_cell))
    # fits.md: the tables docs/humans.md holds, read off summary.json (a parameter's mean, SD and interval; the BICs)
    parameters, _, grid_table = (out / "fits.md").read_text().strip().partition("\n\n")
    header, _, *by_parameter, totals = [line.strip("| ").split(" | ") for line in parameters.splitlines()]
    assert header == ["parameter", "eight people (n = 3)", "model (n = 2)"]
    assert [row[0] for row in by_parameter] == fit["free"]
    entry = people_fit["parameters"]["B_enc"]
    assert by_parameter[0][1] == (f"{entry['mean']:.3f}, SD {entry['sd']:.3f} "
                                  f"[{entry['ci_low']:.3f}, {entry['ci_high']:.3f}]")
    assert totals[2] == (f"{fit['groups']['model']['log_likelihood']:,.1f}, {fit['groups']['model']['n']:,}, "
                         f"{fit['groups']['model']['bic']:,.1f}").replace("-", "−")
    grid_rows = [line.strip("| ").split(" | ") for line in grid_table.splitlines()[2:]]
    assert [row[0] for row in grid_rows] == ["eight people", "model, L = 8"]
    assert grid_rows[1][4] == f"{fit['grid']['model']['delta_bic']:+,.1f}".replace("-", "−")
    assert grid_rows[1][5] == f"{fit['grid']['model']['members_better']} of 2"
    main([*args, "--status"])  # the same command again would read every fit back and launch nothing
    assert capsys.readouterr().out.splitlines()[-1] == "4 done"


def test_the_fit_options_need_fit(three_people, tmp_path, capsys):
    path, _ = three_people
    for extra in (["--jobs", "2"], ["--status"], ["--fit_seed", "3"]):
        flag = extra[0]
        assert refusal(["humans", "--data", str(path), "--out", str(tmp_path / "out"), *extra], capsys) == (
            f"primacy: error: {flag} is for --fit: add --fit, or leave it out")


def test_humans_fit_asks_slurm_for_one_cpu_and_no_gpu_per_job(capsys):
    with pytest.raises(SystemExit):
        main(["humans", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "GPUs per process (default 0)" in text and "CPUs per process (default 1)" in text


def test_participant_names_become_file_names():
    assert cmr_fits.file_name("LTP 093/b") == "LTP_093_b.json"
    assert cmr_fits.file_name("seed0") == "seed0.json"


def test_recovery_simulates_each_fitted_participant_and_fits_it_again(three_people, tmp_path, capsys):
    path, _ = three_people
    fits, recovered = tmp_path / "fits", tmp_path / "recovered"
    main(["cmr_fit", "--data", str(path), "--out", str(fits), *QUICK])
    main(["cmr_fit", "--recover", str(fits), "--out", str(recovered), *QUICK])
    assert capsys.readouterr().out.splitlines()[-1].startswith("recovery over 3 simulated participants, Pearson's r: ")
    assert fit_files(recovered) == ["ann.json", "bo.json", "cy.json", "recovery.json"]
    for name in ("ann", "bo", "cy"):
        simulated = json.loads((recovered / f"{name}.json").read_text())
        assert (simulated["n_lists"], simulated["list_length"]) == (6, 5)  # as the person it was simulated from
    with (recovered / "recovery.csv").open() as f:
        rows = {row["participant"]: row for row in csv.DictReader(f)}
    for name in ("ann", "bo", "cy"):
        truth = json.loads((fits / f"{name}.json").read_text())["fit"]["parameters"]
        fitted = json.loads((recovered / f"{name}.json").read_text())["fit"]["parameters"]
        assert float(rows[name]["true_B_enc"]) == pytest.approx(truth["B_enc"], abs=1e-12)
        assert float(rows[name]["fitted_T"]) == pytest.approx(fitted["T"], abs=1e-12)
    found = json.loads((recovered / "recovery.json").read_text())
    true = np.array([float(rows[n]["true_X2"]) for n in ("ann", "bo", "cy")])
    fitted = np.array([float(rows[n]["fitted_X2"]) for n in ("ann", "bo", "cy")])
    assert found["n"] == 3 and found["r"]["X2"] == pytest.approx(np.corrcoef(true, fitted)[0, 1], abs=1e-9)
    # how many lists recovery needs: the same people simulated with 9 lists each
    main(["cmr_fit", "--recover", str(fits), "--out", str(tmp_path / "nine"), "--lists", "9", *QUICK])
    assert {json.loads((tmp_path / "nine" / f"{name}.json").read_text())["n_lists"] for name in ("ann", "bo")} == {9}


@pytest.mark.slow  # 13 s: a new Python stopped by a signal; the default run keeps a fit's resume after it ended early
# (test_cmr_fit_writes_each_participant_as_it_ends_and_resumes)
def test_a_fit_stopped_by_sigterm_keeps_its_finished_participants_and_resumes(tmp_path):
    """SLURM sends SIGTERM before it preempts a job: the participant in progress is abandoned, whole files stay,
    the exit code says stopped (143), and the same command fits the others."""
    rows = [row for seed, name in enumerate(["ann", "bo", "cy"])
            for row in long_format_rows(*lists(seed, n_lists=30, n_items=8), name)]
    data, out = tmp_path / "people.csv", tmp_path / "fits"
    write(data, rows)
    command = [sys.executable, "-m", "primacy", "cmr_fit", "--data", str(data), "--out", str(out), "--no_polish",
               "--max_generations", "30"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not (out / "ann.json").exists() and time.time() < deadline and process.poll() is None:
        time.sleep(0.02)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 143, err
    assert err.strip().splitlines()[-1] == (f"primacy cmr_fit: stopped; the participants fitted so far are in {out}: "
                                            "run the same command again to fit the others")
    assert fit_files(out) == ["ann.json"] and not list(out.glob("*.tmp*"))
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and [line.split(":")[0].strip() for line in done.stdout.splitlines()[:-1]] == [
        "bo", "cy"]
