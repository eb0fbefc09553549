"""Bad input to the newer commands (cmr_grid, aggregate over free recall, analyze icl|ablation of a Hugging Face
model; issue 69): exit code 2, one line on stderr naming the option, value or file and what is allowed, no traceback,
refused before any model is analysed or file written, and an existing output folder left byte-identical. Nothing is
trained: a free-recall run's results are written directly, a tiny GPT-2 is built from its config."""

import csv
import shutil

import numpy as np
import pytest
from support.cli import snapshot
from support.free_recall_results import random_free_recall_run
from support.pretrained import save_model

from primacy.cli import main

ICL = ["analyze", "icl", "--out", "{out}", "--overwrite", "--n_items", "11", "--prompts", "2", "--formats", "png"]
ABLATION = ["analyze", "ablation", "--hf_model", "{gpt2}", "--out", "{out}", "--overwrite", "--n_items", "11",
            "--sequences", "4", "--random", "2", "--formats", "png"]
NO_FIT_LAGS = "without [-5, -4, -3, -2, 2, 3, 4, 5]: the fits compare CRPs on lags -5..5, so a grid needs each of them"
UNREADABLE = "is not a readable safetensors file, damaged or cut short ("

# (id, arguments, the whole message after "primacy: error: ", or a tuple of the parts it must contain where a part is
# a library's text). Paths: {tmp}; {file}, a plain file; {out}, an earlier output folder that must stay as it was;
# {gpt2}, a tiny GPT-2 (2 layers of 4 heads) saved with save_pretrained; {garbage} and {step2000}, copies of it with
# a model.safetensors of garbage and cut in half; {step1000}, an intact copy; {no_item}, a free-recall run whose
# free_recall.csv lacks the item column.
CASES = [
    ("cmr-grid-out-below-a-file", ["cmr_grid", "--out", "{file}/grid.npz"],
     "out={file}/grid.npz lies below the file {file}, an existing file, not a directory"),
    ("cmr-grid-out-a-directory", ["cmr_grid", "--out", "{out}"], "out={out} is a directory: give a file name"),
    ("cmr-grid-compare-lags", ["cmr_grid", "--compare", "{tmp}/short_lags.npz", "{tmp}/empty.npz"],
     f"compare={{tmp}}/short_lags.npz has lags -1..1, {NO_FIT_LAGS}"),
    ("aggregate-free-recall-without-item", ["aggregate", "{no_item}", "--out", "{out}"],
     "{no_item}/results/free_recall.csv is damaged (it has no item column, of the columns subject, list, trial_type, "
     "position, item, study_position primacy writes): re-test the run with `primacy test --config "
     "{no_item}/config.yaml --ckpt_path {no_item}/checkpoints/last.ckpt --trainer.default_root_dir {no_item}`"),
    ("icl-grid-empty", [*ICL, "--hf_model", "{gpt2}", "--grid", "{tmp}/empty.npz"],
     "grid={tmp}/empty.npz holds no parameter sets: a CMR grid needs at least one CRP to fit"),
    ("icl-grid-nan", [*ICL, "--hf_model", "{gpt2}", "--grid", "{tmp}/nan.npz"],
     "grid={tmp}/nan.npz has 2 of 2 CRPs with values that are NaN or outside [0, 1]: a CRP holds probabilities"),
    ("icl-grid-short-lags", [*ICL, "--hf_model", "{gpt2}", "--grid", "{tmp}/short_lags.npz"],
     f"grid={{tmp}}/short_lags.npz has lags -1..1, {NO_FIT_LAGS}"),
    ("icl-grid-missing", [*ICL, "--hf_model", "{gpt2}", "--grid", "{tmp}/none.npz"],
     "grid={tmp}/none.npz does not exist: give a CMR grid file, or build one with primacy cmr_grid --out FILE"),
    ("icl-top-heads-from-one-checkpoint", [*ICL, "--hf_model", "{gpt2}", "--top_heads_from", "each"],
     "top_heads_from=each is unused with one checkpoint: it chooses which heads to follow over training, so it needs "
     "several (--ckpt_path A B ..., --hf_model A B ... or --revision A B ...)"),
    ("ablation-heads-of-another-model", [*ABLATION, "--heads", "{tmp}/gpt2-small-heads.csv"],
     "heads={tmp}/gpt2-small-heads.csv names [(11, 11), (11, 10), (11, 9), (11, 8)] and 132 more, not heads of this "
     "model: layer must lie in [0, 1] and head in [0, 3]"),
    ("ablation-heads-not-numbers", [*ABLATION, "--heads", "{tmp}/words-heads.csv"],
     "heads={tmp}/words-heads.csv is not an `analyze icl` heads.csv: invalid literal for int() with base 10: 'one' "
     "(layer and head are whole numbers, cmr_distance a number or empty)"),
    ("hf-weights-garbage", [*ICL, "--hf_model", "{garbage}"],
     ("hf_model={garbage} could not be loaded: {garbage}/model.safetensors " + UNREADABLE,
      "): save or download the model again")),
    ("hf-weights-cut-short-in-a-series", [*ICL, "--hf_model", "{step1000}", "{step2000}"],
     ("hf_model={step2000} could not be loaded: {step2000}/model.safetensors " + UNREADABLE, "file not fully covered",
      "): save or download the model again")),
    ("hf-revisions-of-a-directory", [*ICL, "--hf_model", "{gpt2}", "--revision", "step1000", "step2000"],
     "revision=step1000 step2000 is for a hub id, not the local directory hf_model={gpt2}, which holds one checkpoint "
     "whatever the revision: leave out --revision, or give one directory per checkpoint (--hf_model DIR DIR ...)"),
]


def _grids(tmp) -> None:
    params, lags = np.array([[0.5, 0.5, 0.5], [0.6, 0.5, 0.5]]), np.arange(-8, 9)
    np.savez(tmp / "empty.npz", params=np.zeros((0, 3)), crps=np.zeros((0, 17)), lags=lags)
    np.savez(tmp / "nan.npz", params=params, crps=np.full((2, 17), np.nan), lags=lags)
    np.savez(tmp / "short_lags.npz", params=params, crps=np.full((2, 3), 1 / 3), lags=np.arange(-1, 2))


def _heads_tables(tmp) -> None:
    """GPT-2 small's 144 heads (12 layers of 12), the later the more CMR-like; and a table of words."""
    rows = [{"layer": layer, "head": head, "cmr_distance": 1 - (12 * layer + head) / 144, "induction": 0.5}
            for layer in range(12) for head in range(12)]
    for name, table in (("gpt2-small-heads.csv", rows), ("words-heads.csv", [{**rows[0], "layer": "one"}])):
        with (tmp / name).open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(table)


def _without_column(path, column: str) -> None:
    with path.open(newline="") as f:
        rows = list(csv.reader(f))
    at = rows[0].index(column)
    with path.open("w", newline="") as f:
        csv.writer(f).writerows([row[:at] + row[at + 1:] for row in rows])


@pytest.fixture(scope="module")
def places(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bad-input-newer")
    (tmp / "file").write_text("a plain file")
    out = tmp / "out"  # what an earlier analysis and aggregate left there
    out.mkdir()
    for name in ("heads.csv", "summary.json", "lag_crps.npz", "ablation.json", "free_recall.csv"):
        (out / name).write_text(f"earlier {name}\n")
    _grids(tmp)
    _heads_tables(tmp)
    no_item = random_free_recall_run(tmp, "no-item", 0)
    _without_column(no_item / "results" / "free_recall.csv", "item")
    gpt2 = save_model("gpt2", tmp / "gpt2")
    weights = (gpt2 / "model.safetensors").read_bytes()
    copies = {name: tmp / name for name in ("garbage", "step1000", "step2000")}
    for copy in copies.values():
        shutil.copytree(gpt2, copy)
    (copies["garbage"] / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{\"a\": 1}garbage")
    (copies["step2000"] / "model.safetensors").write_bytes(weights[: len(weights) // 2])
    return {"tmp": tmp, "file": tmp / "file", "out": out, "gpt2": gpt2, "no_item": no_item, **copies}


@pytest.mark.parametrize("args,expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_refused_in_one_line_before_any_work(args, expected, places, capsys, monkeypatch):
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # no hub here: never wait for one
    before = {name: snapshot(places[name]) for name in ("out", "gpt2", "no_item")}
    with pytest.raises(SystemExit) as exit_info:
        main([a.format(**places) for a in args])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "Traceback" not in err, err
    last = err.strip().splitlines()[-1]
    if isinstance(expected, str):
        assert last == f"primacy: error: {expected.format(**places)}"
    else:
        assert last.startswith("primacy: error: ") and all(part.format(**places) in last for part in expected), last
    for name, files in before.items():
        assert snapshot(places[name]) == files, f"{name} was changed"  # out: nothing replaced, nothing added
