"""A user's own people (`primacy humans --data FILE`): a free-recall file in psifr's long format reads back as the
lists it holds (rows in any order, extra columns ignored, intrusions and repetitions scored as psifr scores them),
goes through the same analyses as psifr's datasets, and every malformed row is one line naming its line and column."""

import csv
import json

import numpy as np
import pytest
import torch
from support.cli import refusal
from support.free_recall_results import free_recall_run
from support.people import HEADER

from primacy.analysis.behaviour.free_recall import free_recall_counts, recall_positions, summarize
from primacy.cli import main
from primacy.errors import UsageError
from primacy.workflows.humans import people


def test_a_file_reads_back_as_the_lists_it_holds(three_people):
    path, originals = three_people
    persons = people.read_people(path)
    assert sorted(p.subject for p in persons) == ["ann", "bo", "cy"]
    for person in persons:
        study, recalls = originals[person.subject]
        assert person.study.shape == study.shape
        ours = recall_positions(person.study, person.recalls)  # lists in the order the file first names them
        order = [int(n) - 1 for n in dict.fromkeys(_list_order(path, person.subject))]
        expected = recall_positions(study, recalls)[order]
        assert torch.equal(ours, expected[:, : ours.shape[1]]) and (expected[:, ours.shape[1]:] == -2).all()


def _list_order(path, subject):
    with path.open() as f:
        return [row["list"] for row in csv.DictReader(f) if row["subject"] == subject]


def test_primacy_humans_puts_runs_beside_the_people_of_a_file(three_people, tmp_path, capsys):
    path, originals = three_people
    run = free_recall_run(tmp_path, "model", 5, 0)
    out = tmp_path / "out"
    main(["humans", str(run), "--data", str(path), "--out", str(out)])
    assert "models beside people (mine)" in capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text())["mine"]
    assert summary["list_length"] == 5 and summary["reference"] == "mine.csv: 3 people, 6 lists of 5 items"
    assert summary["groups"]["people"]["members"] == 3 and summary["groups"]["model"]["members"] == 1
    spc = np.mean([summarize(free_recall_counts(recall_positions(*lists_), 5)).spc.numpy()
                   for lists_ in originals.values()], axis=0)
    with (out / "curves.csv").open() as f:
        ours = [float(r["mean"]) for r in csv.DictReader(f) if r["group"] == "people" and r["curve"] == "spc"]
    np.testing.assert_allclose(ours, spc, rtol=0, atol=1e-12)
    main(["humans", "--data", str(path), "--out", str(tmp_path / "alone")])  # the people alone
    assert json.loads((tmp_path / "alone" / "summary.json").read_text())["mine"]["groups"].keys() == {"people"}


STUDY = [("s", "1", "study", str(i + 1), f"w{i}") for i in range(3)]


@pytest.mark.parametrize("rows,message", [
    ([*STUDY, ("s", "1", "recall", "1", "w0", "extra")], "line 5 has 6 fields and the header 5"),
    ([*STUDY, ("", "1", "recall", "1", "w0")], "line 5, column subject: '' is empty: every row names its subject"),
    ([*STUDY, ("s", "1", "test", "1", "w0")], "line 5, column trial_type: 'test' is neither 'study' nor 'recall'"),
    ([*STUDY, ("s", "1", "recall", "0", "w0")], "line 5, column position: '0' is not a whole number from 1"),
    ([*STUDY, ("s", "1", "recall", "1.5", "w0")], "line 5, column position: '1.5' is not a whole number from 1"),
    ([*STUDY, ("s", "1", "recall", "1", "w0"), ("s", "1", "recall", "1", "w1")],
     "line 6, column position: '1' is the recall position of line 5 too (subject s, list 1): each position holds "
     "one event"),
    ([*STUDY, ("s", "1", "recall", "1", "w0"), ("s", "1", "recall", "3", "w1")],
     "line 6: subject s, list 1 has recall position 3 but no 2: number them 1, 2, ... without a gap"),
    ([*STUDY, *[("s", "2", "study", str(i + 1), f"v{i}") for i in range(4)]],
     "line 8: subject s, list 2 studies 4 items and the first list 3: every list has the same length"),
    ([*STUDY, ("s", "2", "recall", "1", "w0")], "line 5: subject s, list 2 has outputs but no study rows"),
    ([*STUDY[:2], ("s", "1", "study", "3", "w0")], "line 4: subject s, list 1 studies the same item twice; items "
     "within a list are distinct"),
    ([], "has no rows: give one row per study event and per output"),
])
def test_every_malformed_row_is_one_line_naming_it(tmp_path, rows, message):
    path = tmp_path / "bad.csv"
    path.write_text("\n".join(",".join(row) for row in [HEADER[:5], *rows]) + "\n")
    with pytest.raises(UsageError) as error:
        people.read_people(path)
    assert str(error.value) == f"{path} {message}" and "\n" not in str(error.value)


def test_a_missing_unreadable_or_headless_file_is_one_line(tmp_path, capsys):
    missing = tmp_path / "missing.csv"
    assert refusal(["humans", "--data", str(missing), "--out", str(tmp_path / "out")], capsys) == (
        f"primacy: error: data={missing} does not exist: give a free-recall file in {people.FORMAT}")
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(UsageError, match=f"^data={empty} is empty: give a free-recall file in psifr's long format"):
        people.read_people(empty)
    no_item = tmp_path / "no_item.csv"
    no_item.write_text("subject,list,trial_type,position\ns,1,study,1\n")
    with pytest.raises(UsageError, match=r"has no column item \(its header: subject, list, trial_type, position\)"):
        people.read_people(no_item)
    binary = tmp_path / "binary.csv"
    binary.write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(UsageError, match=f"^data={binary} cannot be read \\(UnicodeDecodeError"):
        people.read_people(binary)
    assert not (tmp_path / "out").exists()
