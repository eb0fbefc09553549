"""Tiny runs stopped by a signal and started again: the command of a tiny run of each task (``fit``), the flag that
sends a signal at a step (tests/signals.py's SignalAt), a run's last checkpoint, and the bitwise comparison of two
checkpoints that a resumed run must pass."""

import json
import signal

import pytest
import torch

from primacy.cli import main
from primacy.testing import TINY_RUNS, tiny_fit

STEPS = 8


def fit(task: str, run, *extra: str) -> None:
    main(["fit", *TINY_RUNS[task], "--trainer.default_root_dir", str(run), "--trainer.max_steps", str(STEPS),
          "--test_after_fit", "false", *extra])


def interrupt_at(step: int, signum: int, during_validation: bool = False) -> list[str]:
    """Trainer flag adding tests/signals.py's SignalAt callback."""
    callback = {"class_path": "signals.SignalAt",
                "init_args": {"step": step, "signum": int(signum), "during_validation": during_validation}}
    return [f"--trainer.callbacks+={json.dumps(callback)}"]


def checkpoint(run) -> dict:
    return torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)


def assert_same_state(a: dict, b: dict) -> None:
    assert a["global_step"] == b["global_step"] == STEPS
    assert a["state_dict"].keys() == b["state_dict"].keys()
    for key, value in a["state_dict"].items():
        assert torch.equal(value, b["state_dict"][key]), key
    for state_a, state_b in zip(a["optimizer_states"][0]["state"].values(), b["optimizer_states"][0]["state"].values()):
        for key in state_a:
            assert torch.equal(state_a[key], state_b[key]), f"optimiser {key}"
    assert a["lr_schedulers"] == b["lr_schedulers"]
    # the trackers' histories (DtTracker's Δt, HeadScoreTracker's scores): no extra record where the run stopped
    trackers = [key for key in a["callbacks"] if key.startswith(("DtTracker", "HeadScoreTracker"))]
    assert trackers == [key for key in b["callbacks"] if key.startswith(("DtTracker", "HeadScoreTracker"))]
    for key in trackers:
        assert a["callbacks"][key]["steps"] == b["callbacks"][key]["steps"], key
        assert repr(a["callbacks"][key]) == repr(b["callbacks"][key]), key


def assert_resumes_bitwise(tmp_path, run: dict, at: int = 3) -> None:
    """A tiny run (``tiny_fit``'s settings ``run``) stopped by Ctrl-C after step ``at`` and started again ends where an
    uninterrupted run ends, bitwise."""
    straight = tiny_fit(tmp_path / "straight", **run)
    with pytest.raises(SystemExit):
        tiny_fit(tmp_path / "run", **{**run, "args": [*run.get("args", []), *interrupt_at(at, signal.SIGINT)]})
    assert checkpoint(tmp_path / "run")["global_step"] == at
    tiny_fit(tmp_path / "run", **run)
    assert_same_state(checkpoint(tmp_path / "run"), checkpoint(straight))
