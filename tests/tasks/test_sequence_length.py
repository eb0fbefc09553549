"""Task.sequence_length is the longest input the task builds, training and evaluation alike: the CLI sets the
context_length of backbones that have one (XLSTMBackbone) from it, so a shorter value would stop evaluation and a
longer one would hide a change of the task's layout."""

import pytest
from conftest import TINY_RUNS, stream_batches
from support.configs import BuildOnly, Built

from primacy.tasks.induction import InductionTask
from primacy.tasks.reconstruction import ReconstructionTask


@pytest.mark.parametrize("task", list(TINY_RUNS))
def test_the_longest_sequence_of_each_task_is_its_sequence_length(task, tmp_path):
    with pytest.raises(Built) as built:
        BuildOnly(args=["fit", *TINY_RUNS[task], "--trainer.default_root_dir", str(tmp_path)])
    data = built.value.datamodule
    batches = [*stream_batches(data.train_dataloader(), 3), *data.val_dataloader(), *data.test_dataloader()]
    longest = max(batch["tokens"].shape[1] for batch in batches)
    assert longest == type(data).sequence_length(data.hparams)


def test_the_longest_delay_or_prompt_sets_the_length():
    settings = {"n_items": 4, "delay": [0, 2], "test_delays": [0, 7]}
    assert ReconstructionTask.sequence_length(settings) == 2 * 4 + 7  # study, the longest test delay, queries
    assert ReconstructionTask.sequence_length({**settings, "delay": [0, 9]}) == 2 * 4 + 9  # the longest training delay
    assert InductionTask.sequence_length({"length": 16, "prompt_items": 5}) == 16
    assert InductionTask.sequence_length({"length": 16, "prompt_items": 25}) == 51  # [BOS] r r
