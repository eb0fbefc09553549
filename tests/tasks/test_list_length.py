"""Task.at_list_length: the settings that test a trained model at a longer list (`primacy atlas --extrapolate` tests at
2L). Every task can be built at them, at the new list length; a task whose trials have a length of their own (MQAR,
selective copying) grows it with the list, so the longer list is as dense as the trained one."""

import pytest
from conftest import TINY_RUNS
from support.configs import BuildOnly, Built

from primacy.tasks.mqar import MQARTask
from primacy.tasks.selective_copying import SelectiveCopyingTask


# every task with a list of items; induction's repeated random tokens have none
@pytest.mark.parametrize("task", [task for task in TINY_RUNS if task != "induction"])
def test_every_task_is_built_at_twice_its_list_length(task, tmp_path):
    with pytest.raises(Built) as built:
        BuildOnly(args=["fit", *TINY_RUNS[task], "--trainer.default_root_dir", str(tmp_path)])
    data = built.value.datamodule
    cls, settings = type(data), {key: value for key, value in data.hparams.items() if not key.startswith("_")}
    longer = cls(**{**settings, **cls.at_list_length(settings, 2 * settings["n_items"])})
    assert longer.hparams["n_items"] == 2 * settings["n_items"]
    assert cls.sequence_length(longer.hparams) >= cls.sequence_length(settings)


@pytest.mark.parametrize("cls", [MQARTask, SelectiveCopyingTask])
def test_a_task_with_a_length_keeps_its_density(cls):
    assert cls.at_list_length({"n_items": 16, "length": 64}, 32) == {"n_items": 32, "length": 128}
    assert cls.at_list_length({"n_items": 3, "length": 64}, 6) == {"n_items": 6, "length": 128}
    assert cls.at_list_length({"n_items": 3, "length": 64}, 4) == {"n_items": 4, "length": 86}  # 85.3, rounded up
