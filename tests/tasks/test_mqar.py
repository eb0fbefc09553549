"""MQARTask: Zoology's multi-query associative recall: pairs, then each key asked once in noise at power-law
distances; the test asks every pair at every query rank once per set."""

import pytest
import torch

from primacy.errors import UsageError
from primacy.tasks.mqar import MQARTask, slot_weights

SMALL = {"n_items": 4, "length": 24, "n_keys": 16, "n_values": 8, "batch_size": 4, "num_held_out": 12,
         "num_test_sets": 3, "num_val_sets": 2}


def test_a_trial_studies_the_pairs_then_asks_each_key_once_at_increasing_even_offsets():
    task = MQARTask(**SMALL)
    batch = task.stream_batch(0, 32)
    n, tokens = task.n_items, batch["tokens"]
    assert tokens.shape == (32, 24) and ((tokens >= 0) & (tokens < 24)).all()
    keys, values = tokens[:, 0 : 2 * n : 2], tokens[:, 1 : 2 * n : 2]
    assert (keys < 16).all() and (values >= 16).all()
    assert all(len(set(row.tolist())) == n for row in keys), "a trial's keys are distinct"
    where = batch["query_index"]
    assert (where.diff(dim=1) > 0).all() and ((where - 2 * n) % 2 == 0).all() and (where < 24).all()
    pair = batch["study_pos"]
    assert (pair.sort(dim=1).values == torch.arange(n)).all(), "each pair asked once"
    assert torch.equal(tokens.gather(1, where), keys.gather(1, pair))
    assert torch.equal(batch["targets"], values.gather(1, pair))
    assert MQARTask.model_vocabulary(task.hparams) == 24 and MQARTask.sequence_length(task.hparams) == 24


def test_query_slots_follow_the_power_law():
    weights = slot_weights(10, 0.01)
    assert torch.all(weights.diff() < 0) and weights[0] / weights[-1] == pytest.approx(10**0.99)
    soon = MQARTask(**{**SMALL, "length": 48, "power_a": 0.01}).stream_batch(0, 512)["query_index"]
    flat = MQARTask(**{**SMALL, "length": 48, "power_a": 1.0}).stream_batch(0, 512)["query_index"]
    assert soon.float().mean() < flat.float().mean() - 2, "a small exponent puts the queries soon after the pairs"
    slots = (flat - 8) // 2  # uniform over the 20 slots: each about 4/20 of the trials
    counts = torch.bincount(slots.flatten(), minlength=20).float() / 512
    assert counts.min() > 0.1 and counts.max() < 0.3


def test_the_test_asks_every_pair_at_every_rank_once_per_set_whatever_the_batch():
    task = MQARTask(**SMALL)
    design = task.test_design()
    assert len(design) == 3 * 4
    whole = design.batch(torch.arange(len(design)))
    for s in range(3):
        asked = whole["study_pos"][4 * s : 4 * (s + 1)]  # the set's L trials: L ranks each
        assert all(sorted(asked[:, j].tolist()) == [0, 1, 2, 3] for j in range(4))
    some = design.batch(torch.tensor([5, 0]))
    for key in whole:
        assert torch.equal(some[key], whole[key][[5, 0]]), key


@pytest.mark.parametrize("kwargs,message", [
    ({"length": 15}, "length=15 is too short for n_items=4: .* at least 4L = 16"),
    ({"power_a": 0.0}, "power_a=0.0 is invalid: it must lie in \\(0, 1\\]"),
    ({"n_keys": 3}, "n_keys=3 is too small for n_items=4"),
])
def test_bad_settings_are_one_line(kwargs, message):
    with pytest.raises(UsageError, match=message) as error:
        MQARTask(**{**SMALL, **kwargs})
    assert "\n" not in str(error.value)
