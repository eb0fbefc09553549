"""Every YAML in configs/ parses and runs one training batch (and a one-batch test)."""

import pytest
import yaml
from conftest import ROOT

from primacy.cli import main

CONFIGS = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "configs").rglob("*.yaml"))
HELD_OUT = ["--data.init_args.num_test_sets", "1", "--data.init_args.num_val_sets", "1"]
TASK_SIZES = {  # the smallest evaluation of each task, by class name
    "VerificationTask": HELD_OUT, "ReconstructionTask": HELD_OUT, "AssociativeRecallTask": HELD_OUT,
    "FreeRecallTask": HELD_OUT,
    "InductionTask": ["--data.init_args.num_test_prompts", "4", "--data.init_args.num_val_prompts", "4"],
}


@pytest.mark.parametrize("config", CONFIGS)
def test_config_runs_one_batch(config, quiet, tmp_path):
    task = yaml.safe_load((ROOT / config).read_text())["data"]["class_path"].rsplit(".", 1)[-1]
    main(["fit", "--config", str(ROOT / config), *quiet,
          "--trainer.accelerator", "cpu", "--trainer.max_steps", "1", "--trainer.val_check_interval", "1",
          "--trainer.limit_val_batches", "2",  # an int > 1 (as "1" would mean 100 %)
          "--trainer.limit_test_batches", "2", "--trainer.num_sanity_val_steps", "0",
          "--data.init_args.batch_size", "4", *TASK_SIZES[task], "--results.formats", "[png]"])
    assert (tmp_path / "run" / "checkpoints" / "last.ckpt").is_file()
    assert (tmp_path / "run" / "results" / "summary.json").is_file()
