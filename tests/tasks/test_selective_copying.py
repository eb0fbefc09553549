"""SelectiveCopyingTask: the Mamba paper's selective copying — L tokens scattered among noise, emitted in order at
L markers; held-out lists, one test trial each."""

import pytest
import torch

from primacy.errors import UsageError
from primacy.tasks.selective_copying import SelectiveCopyingTask

SMALL = {"n_items": 4, "length": 16, "vocab_size": 8, "batch_size": 4, "num_held_out": 12, "num_test_sets": 3,
         "num_val_sets": 2}


def test_the_tokens_sit_in_order_at_random_places_among_noise_then_the_markers_ask_for_them():
    task = SelectiveCopyingTask(**SMALL)
    batch = task.stream_batch(0, 64)
    tokens, n = batch["tokens"], 4
    assert tokens.shape == (64, 16) and (tokens[:, 12:] == 9).all(), "the last L tokens are markers"
    region = tokens[:, :12]
    data = region != 8  # the rest is noise
    assert (data.sum(1) == n).all()
    assert torch.equal(region[data].view(64, n), batch["targets"]), "the data tokens, in order"
    assert torch.equal(batch["query_index"][0], torch.arange(12, 16)) and (batch["study_pos"] == torch.arange(n)).all()
    places = data.nonzero()[:, 1].view(64, n)
    assert places[:, 0].unique().numel() > 3 and places[:, -1].unique().numel() > 3, "the places vary"
    assert SelectiveCopyingTask.model_vocabulary(task.hparams) == 10


def test_each_held_out_list_is_one_test_trial_the_same_in_any_batch():
    task = SelectiveCopyingTask(**SMALL)
    design = task.test_design()
    whole = design.batch(torch.arange(len(design)))
    assert len(design) == 3 and torch.equal(whole["targets"], task.held_out[:3])
    some = design.batch(torch.tensor([2, 0]))
    assert all(torch.equal(some[key], whole[key][[2, 0]]) for key in whole)


def test_a_length_without_room_is_one_line():
    with pytest.raises(UsageError, match="length=7 is too short for n_items=4: .* at least 2L = 8") as error:
        SelectiveCopyingTask(**{**SMALL, "length": 7})
    assert "\n" not in str(error.value)
