"""Contracts of the associative-recall task: what a trial is, which keys are held out, how the test is designed, and
that the model is scored only at the query positions."""

import pytest
import torch
from conftest import stream_batches

from primacy.backbones.lstm import LSTMBackbone
from primacy.errors import UsageError
from primacy.models.lists import RecallModel
from primacy.tasks.associative_recall import AssociativeRecallTask, Layout
from primacy.tasks.base import TrainingStream

SMALL = {"num_held_out": 12, "num_test_sets": 3, "num_val_sets": 2}


def task(**kwargs) -> AssociativeRecallTask:
    return AssociativeRecallTask(**{"n_items": 4, "n_keys": 16, "n_values": 8, **SMALL, **kwargs})


def check_trials(batch: dict[str, torch.Tensor], t: AssociativeRecallTask) -> None:
    """Everything a batch of ``t`` promises, read off its tokens."""
    n, tokens = t.n_items, batch["tokens"]
    rows = tokens.shape[0]
    none = t.layout.none
    assert tokens.shape == (rows, 3 * n)
    assert all(batch[k].shape == (rows, n) for k in ("query_index", "targets", "study_pos"))
    assert ((tokens >= 0) & (tokens < AssociativeRecallTask.model_vocabulary(t.hparams))).all()
    keys, values, queries = tokens[:, 0 : 2 * n : 2], tokens[:, 1 : 2 * n : 2], tokens[:, 2 * n :]
    assert (keys < t.n_keys).all() and (queries < t.n_keys).all(), "study and query tokens at keys are keys"
    assert ((values >= t.n_keys) & (values < t.n_keys + t.n_values)).all(), "values lie in the value vocabulary"
    assert (keys.sort(dim=1).values.diff(dim=1) > 0).all(), "a trial's keys are distinct"
    assert (batch["query_index"] == 2 * n + torch.arange(n)).all(), "the queries follow the last pair"
    pos, targets = batch["study_pos"], batch["targets"]
    seen = pos >= 0
    assert torch.equal(targets == none, ~seen), "none is the answer exactly to the queries about no pair"
    studied = (queries[:, :, None] == keys[:, None, :]).any(dim=2)  # B L
    assert torch.equal(studied, seen), "an unseen key is never among the trial's study keys"
    at = pos.clamp(min=0)
    assert torch.equal(queries[seen], keys.gather(1, at)[seen]), "a seen query asks its pair's key"
    assert torch.equal(targets[seen], values.gather(1, at)[seen]), "and its answer is the pair's value"
    for row_pos, row_queries in zip(pos, queries):
        assert len(set(row_pos[row_pos >= 0].tolist())) == int((row_pos >= 0).sum()), "no pair asked twice"
        assert len(set(row_queries.tolist())) == n, "no key asked twice"


def test_module_docstring_example():
    layout = Layout(3, 8, 4)
    rows = torch.tensor([[5, 1, 6, 7, 3, 0, 1, 0, 1]])  # keys, unseen keys, values (0-based)
    batch = layout.trials(rows, torch.tensor([[1, 2, 0]]), torch.tensor([[False, True, False]]))
    assert batch["tokens"].tolist() == [[5, 9, 1, 8, 6, 9, 1, 3, 5]]
    assert batch["targets"].tolist() == [[8, 12, 9]]
    assert batch["study_pos"].tolist() == [[1, -1, 0]]
    assert batch["query_index"].tolist() == [[6, 7, 8]]


@pytest.mark.parametrize("p_unseen", [0.0, 0.25, 0.5])
def test_training_trials_are_well_formed(p_unseen):
    t = task(p_unseen=p_unseen)
    batch = t.stream_batch(0, 512)
    check_trials(batch, t)
    assert float((batch["study_pos"] < 0).float().mean()) == pytest.approx(p_unseen, abs=0.04)


def test_vocabulary_is_keys_values_and_none():
    assert AssociativeRecallTask.model_vocabulary({"n_items": 4, "n_keys": 16, "n_values": 8}) == 25
    assert task().layout.none == 24
    assert AssociativeRecallTask.eval_delays({}) is None, "recall has no delays"


def test_held_out_key_sets_are_never_trained_on():
    # 5 keys, L = 2: 10 key sets, 5 held out (with any values), so a leak would show at once.
    t = AssociativeRecallTask(n_items=2, n_keys=5, n_values=3, p_unseen=0.25, num_held_out=5, num_test_sets=3,
                              num_val_sets=2)

    def key_sets(tokens):
        return {frozenset(row.tolist()) for row in tokens[:, 0:4:2]}

    held = {frozenset(row.tolist()) for row in t.held_out[:, :2]}
    assert len(held) == 5, "held-out key sets are distinct"
    trained = set()
    for index in range(10):
        trained |= key_sets(t.stream_batch(index, 64)["tokens"])
    assert not held & trained
    assert len(trained) == 10 - 5, "every other key set is trained on"
    test = key_sets(torch.cat([b["tokens"] for b in t.test_dataloader()]))
    val = key_sets(torch.cat([b["tokens"] for b in t.val_dataloader()]))
    assert len(test) == 3 and len(val) == 2 and test | val <= held and not test & val


def design_rows(t: AssociativeRecallTask) -> tuple[dict[str, torch.Tensor], list[torch.Tensor]]:
    """The whole test design as one batch, and the rows of each set."""
    design = t.test_design()
    batch = design.batch(torch.arange(len(design)))
    keys = batch["tokens"][:, 0 : 2 * t.n_items : 2]
    sets = [(keys == t.held_out[s, : t.n_items]).all(dim=1) for s in range(t.num_test_sets)]
    return batch, sets


def test_seen_design_asks_every_pair_at_every_query_position_once_per_set():
    t = task(condition="seen", p_unseen=0.25)
    batch, sets = design_rows(t)
    assert len(batch["tokens"]) == 3 * 4
    check_trials(batch, t)
    assert (batch["study_pos"] >= 0).all(), "seen asks studied keys only"
    for rows in sets:
        assert int(rows.sum()) == 4
        pairs = torch.zeros(4, 4, dtype=torch.long)
        for pos in batch["study_pos"][rows]:
            pairs[pos, torch.arange(4)] += 1
        assert (pairs == 1).all(), "each (pair, query position) cell exactly once"


def test_half_design_asks_every_cell_once_per_set_over_both_variants():
    t = task(condition="half", p_unseen=0.25)
    batch, sets = design_rows(t)
    assert len(batch["tokens"]) == 3 * 4 * 2
    check_trials(batch, t)
    pos = batch["study_pos"]
    variant = torch.arange(len(pos)) % 2  # trial index = (s * L + k) * 2 + v
    unseen = pos < 0
    assert (unseen[variant == 0][:, 0::2]).all() and not (unseen[variant == 0][:, 1::2]).any()
    assert (unseen[variant == 1][:, 1::2]).all() and not (unseen[variant == 1][:, 0::2]).any()
    for rows in sets:
        assert int(rows.sum()) == 2 * 4
        pairs = torch.zeros(4, 4, dtype=torch.long)
        for row in pos[rows]:
            seen = row >= 0
            pairs[row[seen], torch.arange(4)[seen]] += 1
        assert (pairs == 1).all(), "each (pair, query position) cell exactly once over both variants"
        assert (unseen[rows].sum(dim=0) == 4).all(), "each query position asks an unseen key L times"


def first_batches(**settings):
    t = task(**settings)
    train = stream_batches(t.train_dataloader(), 3)
    return train + list(t.val_dataloader()) + list(t.test_dataloader())


def same(a: list[dict], b: list[dict]) -> bool:
    return len(a) == len(b) and all(x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)
                                    for x, y in zip(a, b))


def test_same_seed_same_data_different_seed_different_data():
    settings = {"condition": "half", "p_unseen": 0.25, "batch_size": 8}
    assert same(first_batches(seed=0, **settings), first_batches(seed=0, **settings))
    one, other = first_batches(seed=0, **settings), first_batches(seed=1, **settings)
    assert not any(torch.equal(a["tokens"], b["tokens"]) for a, b in zip(one, other))


@pytest.mark.parametrize("condition", ["seen", "half"])
def test_data_do_not_depend_on_num_workers(condition):
    settings = {"condition": condition, "p_unseen": 0.25, "batch_size": 8}
    assert same(first_batches(num_workers=0, **settings), first_batches(num_workers=2, **settings))


def test_processes_split_each_training_batch_and_a_resumed_stream_goes_on_where_it_stopped():
    make = task(condition="half", p_unseen=0.25).stream_batch
    whole = iter(TrainingStream(make, batch_size=6))
    batches = [next(whole) for _ in range(3)]
    parts = [next(iter(TrainingStream(make, batch_size=2, rank=r, world_size=3))) for r in range(3)]
    for key, value in batches[0].items():
        assert torch.equal(torch.cat([p[key] for p in parts]), value), key
    resumed = next(iter(TrainingStream(make, batch_size=6, start=2)))
    assert all(torch.equal(resumed[k], batches[2][k]) for k in resumed)
    assert not torch.equal(batches[1]["tokens"], batches[2]["tokens"])


def test_the_loss_is_cross_entropy_at_the_query_positions_only():
    t = task(p_unseen=0.25)
    batch = t.stream_batch(0, 8)
    torch.manual_seed(0)
    model = RecallModel(LSTMBackbone(d_model=8), vocab_size=len(t.layout), n_items=4)
    captured = []
    handle = model.backbone.register_forward_hook(lambda module, args, output: captured.append(output))
    loss, correct = model.answers(batch)
    handle.remove()
    (hidden,) = captured  # B T H
    (grad,) = torch.autograd.grad(loss, hidden)
    assert (grad[:, : 2 * 4] == 0).all(), "nothing before the queries is scored"
    assert (grad[:, 2 * 4 :].abs().sum(dim=-1) > 0).all(), "every query position is"
    logits = model.unembedding(hidden).log_softmax(dim=-1)  # B T V
    rows = torch.arange(8)[:, None]
    by_hand = -logits[rows, batch["query_index"], batch["targets"]].mean()
    torch.testing.assert_close(loss, by_hand)
    assert torch.equal(correct, logits[rows, batch["query_index"]].argmax(-1) == batch["targets"])


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"n_items": 5, "n_keys": 4}, "n_keys=4 is too small for n_items=5"),
        ({"n_keys": 6, "p_unseen": 0.5}, "n_keys=6 is too small for n_items=4 with p_unseen=0.5"),
        ({"n_keys": 0}, "n_keys=0 is invalid"),
        ({"n_values": 0}, "n_values=0 is invalid"),
        ({"n_items": 0}, "n_items=0 is invalid"),
        ({"p_unseen": 1.0}, r"p_unseen=1.0 is invalid"),
        ({"p_unseen": -0.1}, r"p_unseen=-0.1 is invalid"),
        ({"p_unseen": float("nan")}, "p_unseen=nan is invalid"),
        ({"condition": "all"}, "condition='all' is unknown"),
        ({"condition": "half"}, "condition='half' .* p_unseen=0"),
        ({"n_items": 2, "n_keys": 4, "num_held_out": 6}, "num_held_out=6 is too large"),
        ({"num_held_out": 4}, "num_held_out=4 is too small"),
        ({"batch_size": 0}, "batch_size=0 is invalid"),
        ({"num_workers": -1}, "num_workers=-1 is invalid"),
    ],
)
def test_impossible_settings_are_one_line_usage_errors(kwargs, message):
    with pytest.raises(UsageError, match=message) as err:
        task(**kwargs)
    assert "\n" not in str(err.value)
