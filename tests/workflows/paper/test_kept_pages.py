"""A page drawn again from runs kept as their results (results/: no checkpoints) reads back their analyses, their
ablation and their Δ by token instead of redoing them from checkpoints that are gone; what was never kept is a
one-line error, and nothing is lost."""

import csv
import json
import os
import shutil

import pytest
from conftest import ROOT, extra_module

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


def copy_run(source, tmp_path, without=("checkpoints", "selection")):
    """A run as results/ keeps it, in a scratch folder: no checkpoints (and here no Δ by token either)."""
    run = tmp_path / source.parent.name / source.name
    shutil.copytree(source, run, ignore=shutil.ignore_patterns(*without))
    return run


def test_a_kept_fixed_dt_is_read_from_its_kept_history_the_same_on_every_token(tmp_path):
    """S4D's Δt is a parameter: a kept run's Δ by token is its Δt history's last row (the tracker's, at the last step),
    the same for new and repeated tokens, so its contrast is exactly 0."""
    import numpy as np

    from primacy.workflows.paper.selection import run_dt_by_role

    run = copy_run(ROOT / "results" / "backbones-cpu" / "quickstart" / "seed0", tmp_path)
    measured = run_dt_by_role(run)
    with np.load(run / "results" / "dt_history.npz") as history:
        expected = np.median(np.log10(history["dt"][-1].astype(np.float64)))
    assert measured.layers == ["ssm"] and measured.contrast.tolist() == [0.0]
    assert np.allclose(measured.new[0], expected, rtol=0, atol=1e-12)
    assert (run / "selection" / "dt_by_role.npz").is_file() is False  # read, not written: the run is kept as it was


def test_a_kept_selective_dt_without_its_file_is_one_line(tmp_path):
    from primacy.errors import UsageError
    from primacy.workflows.paper.selection import run_dt_by_role

    extra_module("primacy_mamba")
    run = copy_run(ROOT / "results" / "influence-cpu" / "induction-v64-mamba-2L" / "seed0", tmp_path)
    with pytest.raises(UsageError) as error:
        run_dt_by_role(run)
    assert "kept without checkpoints" in str(error.value) and "\n" not in str(error.value)
