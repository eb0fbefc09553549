import os
from pathlib import Path

import pytest

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def quiet(tmp_path):
    """CLI arguments for a fast, file-local run without a logger or progress bar."""
    return ["--trainer.logger", "false", "--trainer.enable_progress_bar", "false",
            "--trainer.enable_model_summary", "false", "--trainer.default_root_dir", str(tmp_path / "run")]
