"""A page drawn again from runs kept as their results (results/: no checkpoints) reads back their analyses, their
ablation and their Δ by token instead of redoing them from checkpoints that are gone; what was never kept is a
one-line error, and nothing is lost."""

import csv
import json
import os
import shutil

import pytest
from conftest import ROOT

from primacy.cli import main

KEPT = ROOT / "results" / "induction-cpu"


def draw_induction(out, capsys, seeds=1):
    """(exit code, output) of `primacy reproduce induction --draw` into ``out``."""
    try:
        main(["reproduce", "induction", "--scale", "cpu", "--seeds", str(seeds), "--out", str(out), "--draw"])
        code = 0
    except SystemExit as exit_info:
        code = exit_info.code
    return code, capsys.readouterr()


def rows(path):
    with open(path) as f:
        return {row["run"]: row for row in csv.DictReader(f)}


@pytest.fixture
def kept(tmp_path):
    out = tmp_path / "induction-cpu"
    panel = out / "induction-attn-2L"
    shutil.copytree(KEPT / "induction-attn-2L" / "seed0", panel / "seed0")
    ablation = panel / "seed0" / "ablation" / "ablation.json"
    os.utime(ablation, (0, 0))  # older than its analysis, as a fresh clone may leave it: still read back
    return out


def test_the_induction_page_is_drawn_again_from_a_kept_run_alone(kept, capsys):
    code, _ = draw_induction(kept, capsys)
    assert code == 0
    assert rows(kept / "induction.csv")["seed0"] == rows(KEPT / "induction.csv")["seed0"]
    assert not (kept / "induction-attn-2L" / "seed0" / "checkpoints").exists()


def test_a_kept_run_without_its_analyses_is_one_line_and_nothing_is_lost(kept, capsys):
    shutil.rmtree(kept / "induction-attn-2L" / "seed0" / "icl")
    summary = (kept / "induction-attn-2L" / "seed0" / "results" / "summary.json").read_text()
    code, output = draw_induction(kept, capsys)
    [line] = output.err.strip().splitlines()
    assert code == 2 and "kept without its checkpoints" in line and "icl" in line
    assert (kept / "induction-attn-2L" / "seed0" / "results" / "summary.json").read_text() == summary
    assert json.loads(summary)["repeat_accuracy"] > 0.9
