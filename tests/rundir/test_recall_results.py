"""The result files of the recall tasks (reconstruction, associative recall): written and read back unchanged, the
serial-position curve by delay included, under the task's own file name."""

import csv
import json

import numpy as np
import pytest
import torch

from primacy.metrics import StudyQueryAccuracy
from primacy.rundir import results


def computed(n_items: int, delays: list[int] | None, seed: int = 0) -> dict:
    """StudyQueryAccuracy.compute() of random trials (a fifth of the queries about no item), none of them at the last
    of several delays (its curve is NaN)."""
    gen = torch.Generator().manual_seed(seed)
    rows = 30
    correct = torch.rand(rows, n_items, generator=gen) < 0.6
    order = torch.rand(rows, n_items, generator=gen).argsort(dim=1)
    study_pos = torch.where(torch.rand(rows, n_items, generator=gen) < 0.2, -1, order)
    metric = StudyQueryAccuracy(n_items, delays)
    used = None if delays is None else torch.tensor(delays[:-1] if len(delays) > 1 else delays)
    delay = None if used is None else used[torch.randint(0, len(used), (rows,), generator=gen)]
    metric.update(correct, study_pos, delay)
    return metric.compute()


def test_a_result_with_delays_survives_write_and_read(tmp_path):
    result = computed(3, [0, 4, 9, 20])
    settings = {"task": "reconstruction", "condition": "cued", "n_items": 3}
    summary = results.write(tmp_path, result, settings)
    back = results.read(tmp_path)
    assert back["delays"].tolist() == [0, 4, 9, 20]
    for key in ("delay_hits", "delay_counts", "hits", "counts"):
        assert torch.equal(back[key], result[key]), key
    torch.testing.assert_close(back["serial_position_by_delay"], result["serial_position_by_delay"], equal_nan=True,
                               rtol=0, atol=0)
    torch.testing.assert_close(back["early_minus_late_by_delay"], result["early_minus_late_by_delay"],
                               equal_nan=True, rtol=0, atol=0)
    on_disk = json.loads((tmp_path / "summary.json").read_text())
    assert on_disk == back["summary"] == summary
    assert on_disk["delays"] == [0, 4, 9, 20] and on_disk["task"] == "reconstruction"
    expected = [[None if np.isnan(v) else v for v in row] for row in result["serial_position_by_delay"].tolist()]
    assert on_disk["serial_position_by_delay"][-1] == [None, None, None], "no trials at delay 20"
    assert on_disk["serial_position_by_delay"] == expected, "JSON keeps every float exactly, null for NaN"
    with (tmp_path / "delays.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 4 * 3, "one row per (delay, study position)"
    assert [(int(r["delay"]), int(r["study_pos"])) for r in rows] == [(d, s) for d in (0, 4, 9, 20) for s in range(3)]
    assert [int(r["n"]) for r in rows] == result["delay_counts"].flatten().tolist()
    assert (tmp_path / "reconstruction.csv").is_file() and not (tmp_path / "verification.csv").exists()


@pytest.mark.parametrize("task", ["recall", None])
def test_a_result_without_delays_writes_no_delay_files(tmp_path, task):
    result = computed(4, None)
    results.write(tmp_path, result, {"task": task, "condition": "half"})
    back = results.read(tmp_path)
    assert "delays" not in back and "serial_position_by_delay" not in back
    assert "delays" not in back["summary"]
    assert not (tmp_path / "delays.csv").exists()
    name = task or "verification"  # a run without a task name is a verification run
    assert [p.name for p in tmp_path.glob("*.csv") if p.name != "contiguity.csv"] == [f"{name}.csv"]
    with (tmp_path / f"{name}.csv").open() as f:
        assert len(list(csv.DictReader(f))) == 4 * 4 + 4, "L x L cells, then L rows of queries about no item"
