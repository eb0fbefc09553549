"""primacy atlas: the search into the accuracy band, its replay from the run directories, the seeds and the tests at
2L, the table and figure, the atlas files (primacy's and one's own) and their one-line errors."""

import csv
import dataclasses
import json
import os
import re
import shutil
import time

import matplotlib.pyplot as plt
import numpy as np
import pytest
import yaml
from conftest import extra_module, fake_slurm

from primacy import figures, registry
from primacy.cli import main
from primacy.cli.lightning import parse_run
from primacy.errors import UsageError
from primacy.testing import NO_FIGURES, tiny_settings
from primacy.workflows import launchers, tables
from primacy.workflows.atlas import planner as atlas
from primacy.workflows.atlas.knob_search import search, seeds_accuracy
from primacy.workflows.atlas.planner import Planner, RowState, draw, extrapolation_of, slowest_first
from primacy.workflows.atlas.spec import ATLASES, read_atlas
from primacy.workflows.runs import Status

QUIET = {"max_steps": 4, "val_check_interval": 4, "check_val_every_n_epoch": None, "accelerator": "cpu", "devices": 1,
         "logger": False, "enable_progress_bar": False, "enable_model_summary": False, "num_sanity_val_steps": 0}


def write_atlas(folder, rows, band=(0.0, 1.0), task="VerificationTask", model="SequenceModel"):
    """A tiny atlas in ``folder`` (of verification by default): its task config and the atlas file."""
    task = {"seed_everything": 0, "trainer": QUIET,
            "model": {"class_path": f"primacy.models.lists.{model}", "init_args": {"warmup_steps": 2,
                                                                                  "backbone": "S4DBackbone"}},
            "data": {"class_path": task, "init_args": tiny_settings(task)}}
    (folder / "task.yaml").write_text(yaml.safe_dump(task))
    path = folder / "tiny.yaml"
    path.write_text(yaml.safe_dump({"title": "Tiny", "band": list(band), "config": "task", "rows": rows}))
    return path


S4D_ROW = {"label": "S4D", "backbone": {"class_path": "S4DBackbone", "init_args": {"d_model": 8, "d_state": 4}},
           "knob": "data.init_args.n_items", "values": [2, 4, 6]}


@pytest.mark.parametrize("accuracy,tried,chosen,in_band", [
    ({}, [3], None, False),  # nothing measured: the middle value's pilot first
    ({3: 0.75}, [3], 3, True),  # inside the band at once
    ({3: 0.95}, [3, 5], None, False),  # too easy: a harder value next
    ({3: 0.95, 5: 0.60, 4: 0.72}, [3, 5, 4], 4, True),
    ({3: 0.40, 1: 0.90, 2: 0.85}, [3, 1, 2], 2, False),  # none inside: the nearest tried value
    ({3: 0.99, 5: 0.99, 6: 0.99}, [3, 5, 6], 6, False),  # too easy everywhere: the hardest
])
def test_the_search_bisects_from_the_middle_towards_the_band(accuracy, tried, chosen, in_band):
    found = search(tuple(range(7)), accuracy, (0.70, 0.80))
    assert [index for index, _ in found.tried] == tried
    assert found.chosen == chosen and found.in_band == in_band
    assert found.next == (None if chosen is not None else tried[-1])


def test_values_added_to_an_atlas_file_reuse_the_pilots_that_exist():
    """Two values added at the easy end move the middle; the pilots measured before still place the values they
    rule out, so the next pilot is one they do not: a row searched at 24 and 12, then given 4 and 6, goes on at 6."""
    values = (4, 6, 8, 12, 16, 24, 32, 48, 64, 96)
    found = search(values, {5: 0.601, 3: 0.648}, (0.70, 0.80))  # 24 and 12 below the band, so 16 is too
    assert found.next == 1 and found.tried == [(3, 0.648), (1, None)]
    found = search(values, {5: 0.601, 3: 0.648, 1: 0.75}, (0.70, 0.80))
    assert found.chosen == 1 and found.in_band
    # pilots against the order (an easier value below the band, a harder one above it) place nothing between them
    assert search(values, {2: 0.6, 6: 0.9}, (0.70, 0.80)).next == 4


def test_pilots_off_the_path_narrow_the_bisection_before_a_pilot_is_trained():
    """Values added at the hard end move the middle to L 32, which L 24 (above the band) does not place; the
    bisection then goes on among the values harder than 24, not from 32: L 64 next. Pilots on both sides leave the
    values between them; with none left, the nearest tried value is chosen."""
    values = (8, 12, 16, 24, 32, 48, 64, 96, 128, 192)
    found = search(values, {3: 0.983}, (0.70, 0.80))
    assert found.tried == [(3, 0.983), (6, None)] and found.next == 6
    found = search(values, {3: 0.964, 5: 0.881, 6: 0.839}, (0.70, 0.80))  # the hardest above the band bounds it
    assert found.tried == [(6, 0.839), (8, None)] and found.next == 8
    found = search(values, {5: 0.849, 7: 0.565}, (0.70, 0.80))
    assert found.tried == [(5, 0.849), (7, 0.565), (6, None)]
    found = search(values, {5: 0.849, 6: 0.565}, (0.70, 0.80))
    assert found.next is None and found.chosen == 5 and not found.in_band


def test_the_planner_places_values_by_pilots_off_the_searchs_path(tmp_path, monkeypatch):
    """A pilot measured before values were added (L 4, below the band) still counts: the new middle value, L 5, which
    it places below the band too, is not trained; the bisection goes on among the easier values, L 2 next."""
    spec = read_atlas(write_atlas(tmp_path, [{**S4D_ROW, "values": [2, 3, 4, 5, 6, 7, 8]}], band=(0.7, 0.8)))
    out = tmp_path / "out"
    (out / "S4D" / "n_items=4" / "seed0").mkdir(parents=True)
    monkeypatch.setattr(f"{Planner.__module__}.measured", lambda run, state, metric: 0.6 if run.value == 4 else None)
    monkeypatch.setattr(Planner, "status", lambda self, run: Status("done" if run.value == 4 else "missing"))
    [state] = Planner(spec, "cpu", 1, out, [], parse_run).rows()
    assert state.search.tried == [(2, 0.6), (0, None)] and state.search.next == 0


def test_a_values_accuracy_is_its_seeds_mean_while_all_are_inside_the_band_else_the_farthest_outside():
    band = (0.70, 0.80)
    assert seeds_accuracy([0.72], band) == 0.72
    assert seeds_accuracy([0.72, 0.78, 0.75], band) == pytest.approx(0.75)
    assert seeds_accuracy([0.784, 0.818, 0.768], band) == 0.818  # mean 0.790 is inside, seed 1 is not
    assert seeds_accuracy([0.69, 0.72, 0.83], band) == 0.83  # both sides: the farther decides
    assert seeds_accuracy([0.65, 0.72, 0.83], band) == 0.65


def test_the_table_gives_each_seeds_accuracy_where_a_row_settled_nearest_the_band(tmp_path):
    """A mean of 0.890 and 0.084 (one seed learned MQAR, one did not) describes neither seed: a row outside the band
    shows them; a row inside it (every seed inside) does not need to."""
    spec = read_atlas(write_atlas(tmp_path, [S4D_ROW]))
    common = {"knob": "n_items", "n_items": 4, "seeds": 2, "state_floats": 32,
              **{key: 0.1 for key in ("overall_accuracy", *atlas.INDEX_COLUMNS)},
              **{f"{key}_se": 0.01 for key in ("overall_accuracy", *atlas.INDEX_COLUMNS)}}
    rows = [{**common, "row": "inside", "value": 4, "in_band": True, "seeds_in_band": 2,
             "overall_accuracy_seeds": "0.750 0.760"},
            {**common, "row": "outside", "value": 2, "in_band": False, "seeds_in_band": 0,
             "overall_accuracy_seeds": "0.890 0.084"}]
    table = atlas.atlas_table(rows, spec, (0.70, 0.80)).splitlines()
    assert table[2].startswith("| inside | n_items = 4 | 4 | 2/2 | ")
    assert table[3].startswith("| outside | n_items = 2 | 4 | 0/2 (nearest: 0.890, 0.084) | ")


def test_a_row_settled_at_an_end_of_its_list_says_which_values_would_let_it_go_on(tmp_path):
    [row] = read_atlas(write_atlas(tmp_path, [S4D_ROW])).rows
    values, band = (2, 3, 6), (0.70, 0.80)
    for accuracy, chosen, hint in [({0: 0.49, 1: 0.33}, 0, "the easiest value of the list, below it; add easier"),
                                   ({2: 0.95, 1: 0.99}, 2, "the hardest value of the list, above it; add harder"),
                                   ({0: 0.83, 1: 0.60}, 0, None), ({1: 0.82, 2: 0.55}, 1, None)]:
        found = search(values, accuracy, band)
        assert found.chosen == chosen and not found.in_band
        line = RowState(row, found, {}, [], accuracy).line(values, band)
        assert line.endswith(f"; chose {values[chosen]} (nearest to the band" + (f": {hint} ones to go on)" if hint
                                                                                   else ")")), line


def test_the_search_goes_on_where_a_seed_leaves_the_band(tmp_path, monkeypatch):
    """A pilot inside the band chooses its value; when a seed finishes below the band, the search goes on among the
    easier values, and the seeds already trained stay among the row's runs (their time counts)."""
    spec = read_atlas(write_atlas(tmp_path, [S4D_ROW], band=(0.7, 0.8)))
    out = tmp_path / "out"
    metrics = {0: 0.72, 1: 0.78, 2: 0.69}  # seed -> accuracy at n_items 4, the middle value
    finished = {0, 1}
    for seed in metrics:
        (out / "S4D" / "n_items=4" / f"seed{seed}").mkdir(parents=True)
    monkeypatch.setattr(f"{Planner.__module__}.measured",
                        lambda run, state, metric: metrics[run.seed] if state.state == "done" else None)
    monkeypatch.setattr(Planner, "status", lambda self, run: Status(
        "done" if run.value == 4 and run.seed in finished and not run.test else "missing"))
    [state] = Planner(spec, "cpu", 3, out, [], parse_run).rows()
    assert state.search.chosen == 1 and state.search.tried == [(1, pytest.approx(0.75))]  # seeds 0 and 1's mean
    assert [run.label for run, status in state.runs.items() if status.state == "missing"] == ["S4D/n_items=4/seed2"]
    finished.add(2)  # seed 2 (0.69) leaves the band, though the mean (0.73) does not: n_items 2 next
    [state] = Planner(spec, "cpu", 3, out, [], parse_run).rows()
    assert state.search.tried == [(1, pytest.approx(0.69)), (0, None)] and state.search.next == 0
    assert [run.label for run in state.runs] == [f"S4D/n_items=4/seed{seed}" for seed in range(3)] + [
        "S4D/n_items=2/seed0"]


def test_a_search_stops_after_logarithmically_many_pilots():
    values = tuple(range(64))
    for edge in (0, 17, 40, 63):  # accuracy falls past ``edge``: the band is crossed between two neighbours
        accuracy = {i: 0.95 if i <= edge else 0.5 for i in values}
        found = search(values, accuracy, (0.70, 0.80))
        assert len(found.tried) <= 7 and not found.in_band
        assert found.chosen in (edge, edge + 1)


def test_the_planner_trains_the_pilot_then_the_seeds_then_tests_at_2L_and_draws(tmp_path, monkeypatch, capsys):
    """Replayed from the files at each step (the runs here run in-process, as the launcher's subprocesses would):
    the middle value's pilot is seed 0 of the chosen value; the table's numbers are the seeds' own."""
    monkeypatch.setattr(figures, "FORMATS", ("png",))
    path = write_atlas(tmp_path, [S4D_ROW])
    spec = read_atlas(path)
    out = tmp_path / "out"
    planner = Planner(spec, "cpu", 2, out, NO_FIGURES, parse_run, extrapolate=True)  # the atlas draws its own
    [state] = planner.rows()
    assert [run.label for run in state.todo] == ["S4D/n_items=4/seed0"] and state.seeds == []
    main(list(planner.status(state.todo[0]).args))
    [state] = planner.rows()
    assert state.search.chosen == 1 and state.search.in_band
    assert [run.label for run in state.todo] == ["S4D/n_items=4/seed1", "S4D/n_items=4/seed0/extrapolate"]
    for run in state.todo:
        main(list(planner.status(run).args))
    [state] = planner.rows()
    assert [run.label for run in state.todo] == ["S4D/n_items=4/seed1/extrapolate"]
    main(list(planner.status(state.todo[0]).args))
    [state] = planner.rows()
    assert state.done and not state.todo

    written = draw(planner, [state])
    assert {path.name for path in written} == {"atlas.csv", "atlas.md", "atlas.png"}
    [row] = csv.DictReader((out / "atlas.csv").open())
    seeds = [json.loads((out / "S4D" / "n_items=4" / f"seed{s}" / "results" / "summary.json").read_text())
             for s in (0, 1)]
    tests = [json.loads((out / "S4D" / "n_items=4" / f"seed{s}" / "extrapolate" / "results" / "summary.json")
                        .read_text()) for s in (0, 1)]
    assert [t["n_items"] for t in tests] == [8, 8]
    for key in ("overall_accuracy", "primacy_index", "early_query_decay"):
        assert float(row[key]) == pytest.approx(np.mean([s[key] for s in seeds]), abs=1e-6), key
    assert float(row["overall_accuracy_2L"]) == pytest.approx(np.mean([t["overall_accuracy"] for t in tests]),
                                                              abs=1e-6)
    assert row["value"] == "4" and row["seeds_in_band"] == "2" and row["in_band"] == "True"
    assert int(row["state_floats"]) == 8 * 4, "S4D keeps D·N reals (N/2 complex pairs per channel)"
    table = (out / "atlas.md").read_text().splitlines()
    assert table[2].startswith("| S4D | n_items = 4 | 4 | 2/2 | ")

    _copied_runs_stay_tested(tmp_path, spec, out)

    # kept as results only, as docs/atlas.md's runs are published: still done, nothing to run, the same table
    chosen = out / "S4D" / "n_items=4"
    for seed in (0, 1):
        shutil.rmtree(chosen / f"seed{seed}" / "checkpoints")
    [state] = planner.rows()
    assert state.done and not state.todo and len(state.extrapolated) == 2
    kept = {status.detail for run, status in state.runs.items() if not run.test}
    assert kept == {"results kept, checkpoints removed"}
    draw(planner, [state])
    assert (out / "atlas.md").read_text().splitlines() == table
    written = {name: tables.columns_of(out / name) for name in ("atlas.md", "atlas.csv")}
    assert written == atlas.table_columns(spec, True), "what the command checks before it draws is what draw writes"
    _draw_only_and_refuse_to_lose_columns(tmp_path, path, out, table, monkeypatch, capsys)
    shutil.rmtree(chosen / "seed1" / "extrapolate")  # a test at 2L never made: nothing is left to make it from
    [state] = planner.rows()
    test = state.runs[next(run for run in state.runs if run.label == "S4D/n_items=4/seed1/extrapolate")]
    assert state.done and test.state == "failed" and test.detail.startswith("no model to test") and not test.args


def _copied_runs_stay_tested(tmp_path, spec, out) -> None:
    """A run is tested by its summary's record of the model it scored, not by file times: a copy whose summaries are
    older than its checkpoints (as `cp -r` may leave them) is done, nothing to test again; a summary of another
    model's test (here a model of step 1) is not, and its test is due again."""
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    for summary in copy.rglob("summary.json"):
        os.utime(summary, (0, 0))
    planner = Planner(spec, "cpu", 2, copy, NO_FIGURES, parse_run, extrapolate=True)
    [state] = planner.rows()
    assert state.done and not state.todo, [(run.label, s.state, s.detail) for run, s in state.runs.items()]
    seeds = copy / "S4D" / "n_items=4"
    for summary in (seeds / "seed0" / "extrapolate" / "results" / "summary.json", seeds / "seed1" / "results" /
                    "summary.json"):
        summary.write_text(json.dumps({**json.loads(summary.read_text()), "trained_steps": 1}))
    [state] = planner.rows()
    assert {run.label: (s.state, s.detail) for run, s in state.runs.items() if s.state != "done"} == {
        "S4D/n_items=4/seed0/extrapolate": ("missing", "test at L = 8"),
        "S4D/n_items=4/seed1": ("stopped", "trained (4 steps), not tested")}
    assert [run.label for run in state.todo] == ["S4D/n_items=4/seed1", "S4D/n_items=4/seed0/extrapolate"]


def _draw_only_and_refuse_to_lose_columns(tmp_path, path, out, table, monkeypatch, capsys):
    """The command over the finished atlas: --draw draws it again and launches nothing, and draws the rows that are
    done beside a line for one that is not; without --extrapolate (a table without the 2L columns) it is refused, and
    the table drawn with them is left as it was. The figures are built, not saved (the draws above save them)."""
    monkeypatch.setattr(launchers, "run_local", lambda *args, **kwargs: pytest.fail("--draw launched runs"))
    monkeypatch.setattr(figures, "save", lambda fig, *_, **__: plt.close(fig) or [])
    command = ["atlas", str(path), "--seeds", "2", "--out", str(out), *NO_FIGURES]
    capsys.readouterr()
    main([*command, "--extrapolate", "--draw"])
    assert capsys.readouterr().out.splitlines() == [f"wrote {out / 'atlas.csv'}", f"wrote {out / 'atlas.md'}"]
    assert (out / "atlas.md").read_text().splitlines() == table
    drawn = {name: (out / name).read_bytes() for name in ("atlas.md", "atlas.csv", "atlas.png")}
    for args in ([], ["--draw"]):
        with pytest.raises(SystemExit) as exit_info:
            main([*command, *args])
        err = capsys.readouterr().err.strip()
        assert exit_info.value.code == 2 and err == (
            f"primacy: error: {out / 'atlas.md'} has the columns overall accuracy 2L, primacy index 2L, early minus "
            "late 2L, which this command would not write (drawing would lose them): add --extrapolate, as the table "
            "was drawn with it, or give another --out"), err
        assert {name: (out / name).read_bytes() for name in drawn} == drawn
    (tmp_path / "two").mkdir()
    two = write_atlas(tmp_path / "two", [S4D_ROW, {**S4D_ROW, "label": "Wider"}])  # a row not trained yet
    main(["atlas", str(two), "--seeds", "2", "--out", str(out), "--extrapolate", "--draw", *NO_FIGURES])
    assert capsys.readouterr().out.splitlines()[-2:] == ["  not drawn (1 missing): Wider: n_items 4: …; searching",
                                                        "drew 1 of 2 rows; leave out --draw to train the others"]
    assert [row["row"] for row in csv.DictReader((out / "atlas.csv").open())] == ["S4D"]


def test_draw_only_refuses_where_nothing_is_done(tmp_path, capsys):
    path = write_atlas(tmp_path, [S4D_ROW])
    with pytest.raises(SystemExit) as exit_info:
        main(["atlas", str(path), "--out", str(tmp_path / "out"), "--draw"])
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and err == (
        f"primacy: error: --draw: no row of atlas tiny is done in {tmp_path / 'out'} (1 missing): leave out --draw to "
        "train them, or check --out, --scale and --seeds"), err
    assert not (tmp_path / "out").exists()


def test_primacy_atlas_searches_launches_the_seeds_as_the_pilot_ends_and_draws(tmp_path, capsys, monkeypatch):
    """The command end to end on a 1-row atlas: the pilot runs in a process of its own, seed 1 starts when it ends
    (the search's next step, while the launcher's other slot is free), then the table and figure; --status after."""
    monkeypatch.setattr(figures, "FORMATS", ("png",))
    path = write_atlas(tmp_path, [S4D_ROW])
    out = tmp_path / "out"
    command = ["atlas", str(path), "--seeds", "2", "--jobs", "2", "--out", str(out), *NO_FIGURES]
    main(command)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "atlas tiny: running 1 runs now, more as the searches go on"
    assert lines[1].startswith("  S4D/n_items=4/seed0: fit") and lines[3].startswith("  S4D/n_items=4/seed1: fit")
    assert (out / "atlas.md").is_file() and (out / "atlas.png").is_file()
    assert (out / "S4D" / "n_items=4" / "mean" / "summary.json").is_file()
    main([*command, "--status"])
    status = capsys.readouterr().out.splitlines()
    assert re.fullmatch(r"S4D: n_items 4: \S+; chose 4 \(\d+ min of runs; to go: nothing\)", status[0])
    assert status[-3] == "2 done"
    assert re.fullmatch(r"\d+ min of runs so far \(wall time of each launch, summed over runs\)", status[-2])
    assert status[-1] == "to go: nothing"


def test_the_time_spent_on_a_run_is_its_launches_summed(tmp_path):
    """Each launch of a run, from the time in its log's name to the log's last write; another rank's log and a log
    the launcher did not name are not counted."""
    logs = tmp_path / "run" / "logs"
    logs.mkdir(parents=True)
    for name, seconds in [("20261127-060000", 90), ("20261127-070000-12345", 30), ("20261127-070000-rank1", 500),
                          ("notes", 500)]:
        log = logs / f"{name}.log"
        log.write_text("")
        start = time.mktime(time.strptime("20261127-060000" if name == "notes" else name[:15], "%Y%m%d-%H%M%S"))
        os.utime(log, (start + seconds, start + seconds))
    assert launchers.run_seconds(tmp_path / "run") == pytest.approx(120)
    assert launchers.run_seconds(tmp_path / "never-launched") == 0


def test_the_state_file_sums_the_seconds_of_every_launch_without_the_logs(tmp_path):
    """A run's wall time survives its logs (runs kept as results only, docs/atlas.md): each launch adds its seconds
    to the sum its state file holds, and run_seconds reads that sum."""
    run = tmp_path / "run"
    job = launchers.RunJob(str(run), ("--help",))  # `primacy --help`: ends with 0 in a fraction of a second
    assert job() == 0
    first = launchers.read_state(run)["seconds"]
    launchers.write_state(run, **{**launchers.read_state(run), "seconds": first + 1000})  # as if it had run longer
    assert job() == 0
    for log in (run / "logs").glob("*.log"):
        log.unlink()
    assert 1000 + first < launchers.run_seconds(run) < 1000 + first + 60  # the second launch added its own


def test_the_slowest_rows_start_first_and_rows_not_yet_timed_before_them(tmp_path):
    """The rows' runs are queued by the mean wall time of their finished runs, longest first, after the rows with
    none finished; a run still going or a test at 2L does not time its row."""
    rows = [dataclasses.replace(read_atlas(write_atlas(tmp_path, [S4D_ROW])).rows[0], label=label)
            for label in ("fast", "slow", "new", "running")]
    states = []
    for row, seconds, state in zip(rows, (60, 600, None, 900), ("done", "done", "missing", "running")):
        run = atlas.AtlasRun(row.label, 0, tmp_path / row.label, tmp_path / "task.yaml", (), row=row.label, value=4)
        if seconds is not None:
            (run.dir / "logs").mkdir(parents=True)
            log = run.dir / "logs" / "20261127-060000.log"
            log.write_text("")
            start = time.mktime(time.strptime("20261127-060000", launchers.LOG_TIME))
            os.utime(log, (start + seconds, start + seconds))
        test = dataclasses.replace(run, dir=tmp_path / "slow", test=True)  # a test's time is not a run's
        states.append(RowState(row, search((2, 4, 6), {1: 0.5}, (0.0, 1.0)), {run: Status(state), test: Status("done")},
                               [run]))
    assert [state.row.label for state in slowest_first(states)] == ["new", "running", "slow", "fast"]


@pytest.mark.parametrize("scale", ["cpu", pytest.param("paper", marks=pytest.mark.slow)])  # 7 s each
def test_primacys_atlases_parse_every_row_at_both_scales(scale):
    """Every row of the verification atlas is a valid run at each scale (plugins' rows included), its knob a setting
    of that run at its hardest value; the other atlases have the same backbones, so one row per knob of each is
    parsed with its task (a parse costs 0.2 s)."""
    names = sorted(path.stem for path in ATLASES.glob("*.yaml"))
    assert {"verification", "mqar", "selective_copying"} <= set(names)
    backbones = [row.backbone for row in read_atlas("verification").rows]
    for name in names:
        spec = read_atlas(name)
        assert len(spec.rows) >= 10, f"{name}: the atlas compares at least 10 architectures"
        rows = spec.rows if name == "verification" else list({row.knob: row for row in spec.rows}.values())
        if name != "verification":
            assert [row.backbone for row in spec.rows] == backbones, name
        planner = Planner(spec, scale, 1, ATLASES / "unused", [], parse_run)
        for row in rows:
            value = row.scale_values(scale)[-1]  # the hardest: the longest list, the narrowest model
            config = planner.configs[planner.run(row, value, 0).panel]
            section, _, key = row.knob.rpartition(".")
            assert config[section][key] == value, (name, row.label, scale)
            backbone = config.model.init_args.backbone
            assert registry.import_class(backbone.class_path).__name__ == row.backbone["class_path"], row.label
            if scale == "paper" and row.knob_name != "d_model":  # the atlas's args: the paper's width
                assert backbone.init_args.d_model == 256, (name, row.label)


@pytest.mark.parametrize("content,message", [
    ({"rows": []}, "has no rows"),
    ({"config": "task", "rows": [{"label": "A", "knob": "data.init_args.n_items"}]}, "give each row a label, a knob"),
    ({"config": "task", "band": [0.8, 0.7], "rows": [S4D_ROW]}, "band=[0.8, 0.7]"),
    ({"config": "task", "rows": [S4D_ROW, S4D_ROW]}, "give each row its own"),
    ({"config": "task", "rows": [{**S4D_ROW, "values": {"cpu": [2]}}]}, "one per scale (cpu, paper)"),
    ({"config": "task", "rows": [{**S4D_ROW, "args": ["--trainer.max_steps"]}]}, "--key value pairs"),
    ({"config": "task", "args": {"cpu": []}, "rows": [S4D_ROW]}, "in the atlas: give a list of --key value pairs"),
    ({"config": "missing", "rows": [S4D_ROW]}, "missing.yaml of row S4D is missing"),
    ("rows: [", "is not valid YAML"),
])
def test_a_bad_atlas_file_is_one_line(tmp_path, capsys, content, message):
    write_atlas(tmp_path, [S4D_ROW])
    path = tmp_path / "bad.yaml"
    path.write_text(content if isinstance(content, str) else yaml.safe_dump(content))
    with pytest.raises(SystemExit) as exit_info:
        main(["atlas", str(path), "--out", str(tmp_path / "out"), "--status"])
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and len(err.splitlines()) == 1 and message in err, err


def test_rows_never_draw_the_atlas_without_the_rows_they_leave_out(tmp_path, capsys):
    """A folder that holds the runs of rows --rows leaves out keeps its atlas: --rows ... --draw refuses in one line
    (the same command without --draw trains the chosen rows and ends without drawing)."""
    path = write_atlas(tmp_path, [S4D_ROW, {**S4D_ROW, "label": "S4D wide"}])
    out = tmp_path / "out"
    (out / "S4D-wide" / "n_items=4" / "seed0").mkdir(parents=True)
    with pytest.raises(SystemExit) as exit_info:
        main(["atlas", str(path), "--out", str(out), "--rows", "S4D", "--draw"])
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and err == (
        f"primacy: error: --rows S4D: {out} also holds the runs of the row(s) S4D wide, and drawing without them would "
        "draw the atlas over theirs: leave out --rows to draw every row that is done"), err
    assert sorted(p.name for p in out.iterdir()) == ["S4D-wide"]


def test_bad_options_are_one_line(tmp_path, capsys):
    path = write_atlas(tmp_path, [S4D_ROW])
    for args, message in ((["--band", "0.9", "0.1"], "band=[0.9, 0.1] is invalid"),
                          (["--rows", "LSTM"], "rows=['LSTM'] are not rows of tiny: choose from S4D"),
                          (["--seeds", "0"], "seeds=0"),
                          (["--trainer.default_root_dir", "x"], "set by primacy atlas for each run"),
                          (["--data.init_args.n_itemz", "3"], "did you mean --data.init_args.n_items"),
                          (["--draw"], "--draw and --status are two modes")):
        with pytest.raises(SystemExit):
            main(["atlas", str(path), "--out", str(tmp_path / "out"), "--status", *args])
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and message in err, (args, err)
    with pytest.raises(UsageError, match="neither one of primacy's atlases"):
        read_atlas("no-such-atlas")


def test_a_task_with_a_length_is_tested_at_2L_in_twice_its_tokens(tmp_path):
    """MQAR's pairs fill a sequence of fixed length: the test at 2L doubles it (Task.at_list_length), so the longer
    list has the room and the density the trained one had."""
    spec = read_atlas(write_atlas(tmp_path, [S4D_ROW], task="MQARTask", model="RecallModel"))
    planner = Planner(spec, "cpu", 1, tmp_path / "out", [], parse_run, extrapolate=True)
    [state] = planner.rows()
    main(list(planner.status(state.todo[0]).args))
    [state] = planner.rows()
    [test] = [run for run in state.todo if run.test]
    args = list(planner.status(test).args)
    length = tiny_settings("MQARTask")["length"]
    assert args[args.index("--data.init_args.length") + 1] == str(2 * length)
    main(args)
    summary = json.loads((test.dir / "results" / "summary.json").read_text())
    assert summary["n_items"] == 2 * 4


def test_every_pilot_is_tested_at_2L_while_its_checkpoints_are_there(tmp_path):
    """Which value a row settles on is known only after its later pilots, perhaps in another session, where a pilot's
    checkpoints are gone (results/ keeps none): so each trained model is tested at 2L at once, pilots too. A pilot kept
    as its results alone, untested, is passed over, and the seeds' tests alone make the row's 2L numbers."""
    spec = read_atlas(write_atlas(tmp_path, [S4D_ROW], band=(0.99, 1.0)))  # out of reach: pilots at 4, then 2
    planner = Planner(spec, "cpu", 1, tmp_path / "out", [], parse_run, extrapolate=True)
    [state] = planner.rows()
    main(list(planner.status(state.todo[0]).args))
    [state] = planner.rows()
    assert [run.label for run in state.todo] == ["S4D/n_items=2/seed0", "S4D/n_items=4/seed0/extrapolate"]
    shutil.rmtree(state.todo[1].dir.parent / "checkpoints")  # in a later session's clone
    [state] = planner.rows()
    assert [run.label for run in state.todo] == ["S4D/n_items=2/seed0"]
    main(list(planner.status(state.todo[0]).args))
    [state] = planner.rows()
    assert state.search.chosen == 0 and [run.label for run in state.todo] == ["S4D/n_items=2/seed0/extrapolate"]
    main(list(planner.status(state.todo[0]).args))
    [state] = planner.rows()
    assert state.done and [run.label for run in state.extrapolated] == ["S4D/n_items=2/seed0/extrapolate"]


def test_a_failed_test_at_2L_leaves_the_row_complete_without_its_2L_numbers(tmp_path):
    """A list of 2L that the task's sequence cannot hold fails in its own log; the row is still drawn."""
    spec = read_atlas(write_atlas(tmp_path, [S4D_ROW]))
    planner = Planner(spec, "cpu", 1, tmp_path / "out", [], parse_run, extrapolate=True)
    seed = planner.run(spec.rows[0], 4, 0)
    test = extrapolation_of(seed)
    state = RowState(spec.rows[0], search((2, 4, 6), {1: 0.5}, (0.0, 1.0)), {seed: Status("done"), test: Status(
        "failed", "exit code 2", ("test",))}, [seed])
    assert state.done and state.extrapolated == []
    state.runs[test] = Status("missing", "", ("test",))
    assert not state.done
    state.runs[test] = Status("done")
    assert state.done and state.extrapolated == [test]


def test_on_slurm_each_step_of_the_searches_is_one_array_job(tmp_path, monkeypatch, capsys):
    """The rows' next pilots go to SLURM as one array job (a fake sbatch records it); --status then says queued, and
    the next command submits nothing while they are."""
    extra_module("submitit")
    bin_dir, captured = fake_slurm(tmp_path, monkeypatch, 77)
    transformer = {"label": "Transformer", "backbone": {"class_path": "TransformerBackbone",
                                                        "init_args": {"n_layers": 1, "n_heads": 2}},
                   "knob": "model.init_args.backbone.init_args.d_model", "values": [16, 8, 4]}
    path = write_atlas(tmp_path, [S4D_ROW, transformer])
    command = ["atlas", str(path), "--out", str(tmp_path / "out"), "--launcher", "slurm", "--slurm.partition", "cpu"]
    main(command)
    assert "#SBATCH --array=0-1%2" in captured.read_text() and "#SBATCH --job-name=primacy-atlas-tiny" in \
        captured.read_text()
    assert "submitted 2 runs as job 77" in capsys.readouterr().out
    main([*command[:4], "--status"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[-3] == "2 queued"
    assert lines[0] == "S4D: n_items 4: …; searching (0 min of runs; to go: ≤ 2 pilots, 2 seeds)"
    assert lines[-1] == ("to go: at most 4 pilots, then 4 seeds; no run has finished yet, so no time to estimate "
                         "them by")
    with pytest.raises(SystemExit) as exit_info:  # queued runs are not submitted again
        main(command)
    assert exit_info.value.code == 1 and "submitted" not in capsys.readouterr().out
