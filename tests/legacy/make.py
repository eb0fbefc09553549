"""How tests/legacy/ was made, with the code of commit 04ae89d (before the layout of issue 26): a tiny verification
quickstart with DtTracker, stopped by Ctrl-C at step 4 of 8 (run/), and the same run uninterrupted (straight.ckpt,
the state a resumed run must end in). Run from a checkout of that commit: PYTHONPATH=. python tests/legacy/make.py OUT.
The configs/ beside this file are copies of that commit's task configs, which name the old class paths."""

import json
import shutil
import signal
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: conftest's TINY_RUNS, signals.SignalAt
from conftest import TINY_RUNS  # noqa: E402

from primacy.cli import main  # noqa: E402

STEPS, STOP = 8, 4


def fit(run: Path, *extra: str) -> None:
    main(["fit", *TINY_RUNS["verification"], "--trainer.default_root_dir", str(run), "--trainer.max_steps", str(STEPS),
          "--trainer.callbacks.every_n_steps", "2", "--test_after_fit", "false", "--seed_everything", "0", *extra])


def main_() -> None:
    out = Path(sys.argv[1])
    shutil.rmtree(out, ignore_errors=True)
    fit(out / "straight")
    state = torch.load(out / "straight" / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    torch.save({"global_step": state["global_step"], "state_dict": state["state_dict"],
                "optimizer_states": state["optimizer_states"], "lr_schedulers": state["lr_schedulers"],
                "callbacks": state["callbacks"]}, out / "straight.ckpt")
    shutil.rmtree(out / "straight")
    signal_at = {"class_path": "signals.SignalAt", "init_args": {"step": STOP, "signum": int(signal.SIGINT)}}
    try:
        fit(out / "run", f"--trainer.callbacks+={json.dumps(signal_at)}")
    except SystemExit as stop:
        assert stop.code == 130, stop.code
    # the interruption is the test's, not the user's: the run's config is the one the user wrote
    config = out / "run" / "config.yaml"
    text = config.read_text()
    start = text.index("  - class_path: signals.SignalAt")
    end = text.index("  - class_path", start + 1) if "  - class_path" in text[start + 1:] else None
    rest = text[end:] if end else text[text.index("\n", text.index("during_validation", start)) + 1:]
    config.write_text(text[:start] + rest)


if __name__ == "__main__":
    main_()
