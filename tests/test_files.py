"""Result files are replaced atomically: a write that fails midway leaves the old file byte for byte and no
temporary file behind; a successful one lands under exactly the name asked for, in the format of its suffix."""

import os
import stat

import matplotlib.pyplot as plt
import numpy as np
import pytest

from primacy import files
from primacy.rundir import results


def only(directory, name):
    """The directory holds ``name`` and nothing else: no temporary file was left behind."""
    assert sorted(p.name for p in directory.iterdir()) == [name]


@pytest.fixture
def figure():
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    yield fig
    plt.close(fig)


def test_a_figure_whose_savefig_fails_midway_leaves_the_old_file(tmp_path, figure, monkeypatch):
    path = files.save_figure(figure, tmp_path / "heatmap.png")
    old = path.read_bytes()

    def half_written(fname, **kwargs):
        with open(fname, "wb") as f:
            f.write(b"\x89PNG half")
        raise RuntimeError("disk full")

    monkeypatch.setattr(figure, "savefig", half_written)
    with pytest.raises(RuntimeError, match="disk full"):
        files.save_figure(figure, path)
    assert path.read_bytes() == old
    only(tmp_path, "heatmap.png")


def test_an_array_that_fails_to_serialise_leaves_the_old_npz(tmp_path):
    path = files.save_npz(tmp_path / "accuracy.npz", hits=np.arange(4))
    old = path.read_bytes()
    with pytest.raises(Exception, match="pickle|lambda"):  # the first array is written before the second fails
        files.save_npz(path, hits=np.zeros(10_000), broken=np.array([lambda: 0], dtype=object))
    assert path.read_bytes() == old
    np.testing.assert_array_equal(np.load(path)["hits"], np.arange(4))
    only(tmp_path, "accuracy.npz")


def test_a_failed_rename_leaves_the_old_text(tmp_path, monkeypatch):
    path = files.write_text(tmp_path / "summary.json", '{"old": true}\n')

    def no_rename(src, dst):
        raise OSError("rename refused")

    monkeypatch.setattr(files.os, "replace", no_rename)
    with pytest.raises(OSError, match="rename refused"):
        files.write_text(path, '{"new": true}\n')
    assert path.read_text() == '{"old": true}\n'
    only(tmp_path, "summary.json")


def test_the_temporary_file_is_hidden_beside_the_target_with_its_suffix(tmp_path):
    target = tmp_path / "new" / "dir" / "heatmap.pdf"
    with files.atomic_path(target) as temp:
        assert temp.parent == target.parent and temp.name.startswith(".heatmap.pdf.") and temp.suffix == ".pdf"
        temp.write_text("new")
        assert not target.exists(), "nothing is visible under the final name before the block ends"
    assert target.read_text() == "new" and not temp.exists()


def test_a_new_file_gets_the_usual_permissions(tmp_path):
    umask = os.umask(0o022)
    try:
        path = files.write_text(tmp_path / "summary.json", "{}\n")
    finally:
        os.umask(umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644  # not the 0o600 of a mkstemp file


def test_figures_take_the_format_of_their_suffix_and_keep_their_name(tmp_path, figure):
    assert files.save_figure(figure, tmp_path / "a.pdf").read_bytes().startswith(b"%PDF")
    assert files.save_figure(figure, tmp_path / "b.png").read_bytes().startswith(b"\x89PNG")
    files.save_figure(figure, tmp_path / "c", format="svg")  # matplotlib alone would write c.svg
    assert b"<svg" in (tmp_path / "c").read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.pdf", "b.png", "c"]


def test_npz_keeps_its_name_without_the_suffix(tmp_path):
    files.save_npz(tmp_path / "history", steps=np.arange(3))  # np.savez alone would write history.npz
    only(tmp_path, "history")
    np.testing.assert_array_equal(np.load(tmp_path / "history")["steps"], np.arange(3))


def test_a_test_into_a_directory_with_results_says_it_replaces_them(tmp_path):
    out = tmp_path / "run" / "results"
    assert results.replacing_notice(out) is None
    results.write_summary(out, {"overall_accuracy": 0.5})
    notice = results.replacing_notice(out)
    assert notice.startswith(f"replacing the results in {out} (written 20") and "\n" not in notice


def test_checkpoints_are_written_beside_their_final_name_then_renamed(tmp_path, monkeypatch):
    import torch

    io = files.AtomicCheckpointIO()
    path = tmp_path / "last.ckpt"
    io.save_checkpoint({"global_step": 1}, path)
    old = path.read_bytes()

    def killed_midway(obj, f, *args, **kwargs):
        f.write(b"PK half a checkpoint")
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", killed_midway)
    with pytest.raises(KeyboardInterrupt):
        io.save_checkpoint({"global_step": 2}, path)
    assert path.read_bytes() == old
    only(tmp_path, "last.ckpt")


def test_runs_save_their_checkpoints_through_the_atomic_writer(tmp_path, monkeypatch):
    from conftest import TINY_RUNS

    from primacy.cli import main

    saved = []
    original = files.AtomicCheckpointIO.save_checkpoint
    monkeypatch.setattr(files.AtomicCheckpointIO, "save_checkpoint", lambda self, checkpoint, path, **kw:
                        saved.append(path) or original(self, checkpoint, path, **kw))
    main(["fit", *TINY_RUNS["verification"], "--trainer.max_steps", "2", "--test_after_fit", "false",
          "--trainer.default_root_dir", str(tmp_path / "run")])
    assert [os.path.basename(p) for p in saved] == ["last.ckpt"]
