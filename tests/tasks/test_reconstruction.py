"""Contracts of the delayed-reconstruction task (copying memory): what a trial is, what is held out, how the test is
designed, and that the model is scored only at the query positions."""

import pytest
import torch
from conftest import stream_batches

from primacy.backbones.lstm import LSTMBackbone
from primacy.errors import UsageError
from primacy.metrics import StudyQueryAccuracy
from primacy.models.lists import RecallModel
from primacy.tasks.base import TrainingStream
from primacy.tasks.reconstruction import ReconstructionTask, Tokens, resolve_test_delays, trials

SMALL = {"num_held_out": 12, "num_test_sets": 3, "num_val_sets": 2}


def task(**kwargs) -> ReconstructionTask:
    return ReconstructionTask(**{"n_items": 4, "vocab_size": 16, **SMALL, **kwargs})


def check_trials(batch: dict[str, torch.Tensor], t: ReconstructionTask, max_delay: int) -> None:
    """Everything a batch of ``t`` promises, read off its tokens."""
    n, tokens = t.n_items, batch["tokens"]
    rows = tokens.shape[0]
    assert tokens.shape == (rows, 2 * n + max_delay)
    assert all(batch[k].shape == (rows, n) for k in ("query_index", "targets", "study_pos"))
    assert batch["delay"].shape == (rows,)
    assert ((tokens >= 0) & (tokens < ReconstructionTask.model_vocabulary(t.hparams))).all()
    study = tokens[:, :n]
    assert (study < t.vocab_size).all(), "study tokens are items"
    if not t.repeats:
        assert (study.sort(dim=1).values.diff(dim=1) > 0).all(), "a list has distinct items"
    delay = batch["delay"]
    assert torch.equal(batch["query_index"], n + delay[:, None] + torch.arange(n)), "queries follow the D blanks"
    assert (batch["study_pos"].sort(dim=1).values == torch.arange(n)).all(), "every study position asked once"
    assert torch.equal(batch["targets"], study.gather(1, batch["study_pos"])), "the target is the item asked"
    queries = tokens.gather(1, batch["query_index"])
    blank = t.tokens.blank
    if t.condition == "cued":
        assert torch.equal(queries, t.tokens.first_position + batch["study_pos"])
    else:
        assert (batch["study_pos"] == torch.arange(n)).all(), "forward asks the items in study order"
        assert (queries[:, 0] == t.tokens.cue).all()
        expected = study[:, :-1] if t.teacher_forcing else torch.full_like(queries[:, 1:], blank)
        assert torch.equal(queries[:, 1:], expected)
    asked = torch.zeros_like(tokens, dtype=torch.bool).scatter_(1, batch["query_index"], True)
    asked[:, :n] = True
    assert (tokens[~asked] == blank).all(), "the delay and the padding after the queries are blanks"


@pytest.mark.parametrize("condition", ["forward", "cued"])
def test_module_docstring_example(condition):
    tokens = Tokens(8, 3, condition)
    order = torch.tensor([[0, 1, 2]] if condition == "forward" else [[2, 0, 1]])
    batch = trials(torch.tensor([[5, 1, 6]]), order, torch.tensor([2]), tokens, False, 2)
    if condition == "forward":
        assert batch["tokens"].tolist() == [[5, 1, 6, 8, 8, 9, 8, 8]]
        assert batch["targets"].tolist() == [[5, 1, 6]]
    else:
        assert batch["tokens"].tolist() == [[5, 1, 6, 8, 8, 12, 10, 11]]
        assert batch["targets"].tolist() == [[6, 5, 1]]
    assert batch["query_index"].tolist() == [[5, 6, 7]]


@pytest.mark.parametrize("settings", [
    {"condition": "forward"},
    {"condition": "forward", "teacher_forcing": True},
    {"condition": "cued"},
    {"condition": "forward", "repeats": True, "vocab_size": 3},
    {"condition": "cued", "repeats": True, "n_items": 6, "vocab_size": 4},
], ids=["forward", "teacher-forcing", "cued", "repeats", "cued-repeats-longer-than-vocab"])
def test_training_trials_are_well_formed(settings):
    t = task(delay=[1, 5], **settings)
    check_trials(t.stream_batch(0, 256), t, max_delay=5)


def test_vocabulary_counts_items_blank_cue_and_position_tokens():
    assert ReconstructionTask.model_vocabulary({"vocab_size": 16, "n_items": 4, "condition": "forward"}) == 18
    assert ReconstructionTask.model_vocabulary({"vocab_size": 16, "n_items": 4, "condition": "cued"}) == 22
    t = task(condition="cued")
    assert (t.tokens.blank, t.tokens.cue, t.tokens.first_position) == (16, 17, 18)


def test_teacher_forcing_shows_the_previous_item_after_the_cue():
    study = torch.tensor([[3, 0, 2, 1]])
    for forcing, after_cue in ((True, [3, 0, 2]), (False, [16, 16, 16])):
        batch = trials(study, torch.arange(4)[None], torch.tensor([1]), Tokens(16, 4, "forward"), forcing, 3)
        assert batch["tokens"].tolist() == [[3, 0, 2, 1, 16, 17, *after_cue, 16, 16]]


def test_training_delays_lie_in_the_range_and_cover_it():
    delay = task(delay=[2, 6]).stream_batch(0, 512)["delay"]
    assert sorted(set(delay.tolist())) == [2, 3, 4, 5, 6]
    assert set(task(delay=3).stream_batch(0, 64)["delay"].tolist()) == {3}


def test_test_delays_are_four_evenly_spaced_over_a_range_or_the_single_delay():
    assert resolve_test_delays([0, 30], None) == [0, 10, 20, 30]
    assert resolve_test_delays([0, 32], None) == [0, 11, 21, 32]
    assert resolve_test_delays([0, 2], None) == [0, 1, 2], "a short range gives fewer, never a repeat"
    assert resolve_test_delays(7, None) == [7]
    assert resolve_test_delays([4, 4], None) == [4]
    assert resolve_test_delays([0, 30], [9, 1]) == [1, 9], "given ones are used, sorted"
    assert ReconstructionTask.eval_delays({"delay": [0, 30], "test_delays": None}) == [0, 10, 20, 30]


@pytest.mark.parametrize("repeats", [False, True])
def test_held_out_sets_are_never_trained_on(repeats):
    # K = 5, L = 2: 10 sets (15 multisets with repeats), 5 held out, so a leak would show at once.
    t = ReconstructionTask(n_items=2, vocab_size=5, repeats=repeats, num_held_out=5, num_test_sets=3,
                           num_val_sets=2, delay=[0, 1])

    def sets(study):
        return {tuple(sorted(s.tolist())) for s in study}

    held = sets(t.held_out)
    assert len(held) == 5, "held-out sets are distinct"
    trained = set()
    for index in range(10):
        trained |= sets(t.stream_batch(index, 64)["tokens"][:, :2])
    assert not held & trained
    assert len(trained) == (15 if repeats else 10) - 5, "every other set is trained on"
    test = sets(torch.cat([b["tokens"][:, :2] for b in t.test_dataloader()]))
    val = sets(torch.cat([b["tokens"][:, :2] for b in t.val_dataloader()]))
    assert len(test) == 3 and len(val) == 2 and test | val <= held and not test & val


def test_cued_design_asks_every_pair_once_per_set_and_delay():
    t = task(condition="cued", delay=[0, 3])
    design = t.test_design()
    assert design.delays == (0, 1, 2, 3)
    batch = design.batch(torch.arange(len(design)))
    assert len(design) == 3 * 4 * 4
    check_trials(batch, t, max_delay=3)
    for s, study in enumerate(t.held_out[:3]):
        for delay in design.delays:
            rows = (batch["tokens"][:, :4] == study).all(dim=1) & (batch["delay"] == delay)
            assert int(rows.sum()) == 4, "L trials (shifts) per set and delay"
            pairs = torch.zeros(4, 4, dtype=torch.long)
            for pos in batch["study_pos"][rows]:
                pairs[pos, torch.arange(4)] += 1
            assert (pairs == 1).all(), "each (study, query) pair exactly once"


def test_forward_design_asks_study_position_j_at_query_j_for_every_delay():
    t = task(condition="forward", delay=[0, 6], test_delays=[0, 2, 6])
    design = t.test_design()
    batch = design.batch(torch.arange(len(design)))
    assert len(design) == 3 * 3
    check_trials(batch, t, max_delay=6)
    assert (batch["study_pos"] == torch.arange(4)).all()
    trials_seen = {(tuple(row[:4].tolist()), int(d)) for row, d in zip(batch["tokens"], batch["delay"])}
    assert trials_seen == {(tuple(s.tolist()), d) for s in t.held_out[:3] for d in (0, 2, 6)}


@pytest.mark.parametrize("condition,per_cell", [("cued", 3 * 4), ("forward", 3)])
def test_the_design_gives_every_delay_and_study_position_the_same_number_of_answers(condition, per_cell):
    t = task(condition=condition, delay=[0, 3])
    metric = StudyQueryAccuracy(4, t.test_delays)
    for batch in t.test_dataloader():
        metric.update(torch.ones_like(batch["targets"], dtype=torch.bool), batch["study_pos"], batch["delay"])
    out = metric.compute()
    assert (out["delay_counts"] == per_cell).all() and (out["serial_position_by_delay"] == 1).all()


def first_batches(**settings):
    t = task(**settings)
    train = stream_batches(t.train_dataloader(), 3)
    return train + list(t.val_dataloader()) + list(t.test_dataloader())


def same(a: list[dict], b: list[dict]) -> bool:
    return len(a) == len(b) and all(x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)
                                    for x, y in zip(a, b))


def test_same_seed_same_data_different_seed_different_data():
    settings = {"condition": "cued", "delay": [0, 2], "batch_size": 8}
    assert same(first_batches(seed=0, **settings), first_batches(seed=0, **settings))
    one, other = first_batches(seed=0, **settings), first_batches(seed=1, **settings)
    assert not any(torch.equal(a["tokens"], b["tokens"]) for a, b in zip(one, other))


@pytest.mark.parametrize("condition", ["forward", "cued"])
def test_data_do_not_depend_on_num_workers(condition):
    settings = {"condition": condition, "delay": [0, 2], "batch_size": 8}
    assert same(first_batches(num_workers=0, **settings), first_batches(num_workers=2, **settings))


def test_processes_split_each_training_batch_and_a_resumed_stream_goes_on_where_it_stopped():
    make = task(condition="cued", delay=[0, 3]).stream_batch
    whole = iter(TrainingStream(make, batch_size=6))
    batches = [next(whole) for _ in range(3)]
    parts = [next(iter(TrainingStream(make, batch_size=2, rank=r, world_size=3))) for r in range(3)]
    for key, value in batches[0].items():
        assert torch.equal(torch.cat([p[key] for p in parts]), value), key
    resumed = next(iter(TrainingStream(make, batch_size=6, start=2)))
    assert all(torch.equal(resumed[k], batches[2][k]) for k in resumed)
    assert not torch.equal(batches[1]["tokens"], batches[2]["tokens"])


def tiny_model(vocab_size: int, n_items: int, delays=None) -> RecallModel:
    torch.manual_seed(0)
    return RecallModel(LSTMBackbone(d_model=8), vocab_size=vocab_size, n_items=n_items, delays=delays)


def test_the_loss_is_cross_entropy_at_the_query_positions_only():
    t = task(condition="cued", delay=[0, 3])
    batch = t.stream_batch(0, 8)
    model = tiny_model(ReconstructionTask.model_vocabulary(t.hparams), 4)
    captured = []
    handle = model.backbone.register_forward_hook(lambda module, args, output: captured.append(output))
    loss, _ = model.answers(batch)
    handle.remove()
    (hidden,) = captured  # B T H
    (grad,) = torch.autograd.grad(loss, hidden, retain_graph=True)
    asked = torch.zeros(hidden.shape[:2], dtype=torch.bool).scatter_(1, batch["query_index"], True)
    assert (grad[~asked] == 0).all(), "nothing outside the query positions is scored"
    assert (grad[asked].abs().sum(dim=-1) > 0).all(), "every query position is"
    log_p = model.unembedding(hidden).log_softmax(dim=-1)  # B T V
    rows = torch.arange(8)[:, None]
    by_hand = -log_p[rows, batch["query_index"], batch["targets"]].mean()
    torch.testing.assert_close(loss, by_hand)


@pytest.mark.parametrize("forcing", [False, True])
def test_padding_after_the_queries_never_changes_the_answers(forcing):
    study, order = torch.tensor([[3, 0, 2, 1], [5, 7, 4, 6]]), torch.arange(4).expand(2, -1)
    delay = torch.tensor([1, 2])
    tokens = Tokens(16, 4, "forward")
    short, padded = (trials(study, order, delay, tokens, forcing, max_delay) for max_delay in (2, 9))
    assert padded["tokens"].shape[1] == short["tokens"].shape[1] + 7
    assert torch.equal(padded["query_index"], short["query_index"])
    model = tiny_model(len(tokens), 4)
    with torch.no_grad():
        a = model(short["tokens"], short["query_index"])
        b = model(padded["tokens"], padded["query_index"])
    torch.testing.assert_close(a, b, rtol=0, atol=1e-6)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"n_items": 5, "vocab_size": 4}, "vocab_size=4 is too small for n_items=5"),
        ({"n_items": 0}, "n_items=0 is invalid"),
        ({"vocab_size": 0}, "vocab_size=0 is invalid"),
        ({"delay": -1}, "delay=-1 is invalid"),
        ({"delay": [3, 1]}, r"delay=\[3, 1\] is invalid"),
        ({"delay": [-2, 1]}, r"delay=\[-2, 1\] is invalid"),
        ({"delay": [0, 1, 2]}, r"delay=\[0, 1, 2\] is invalid"),
        ({"delay": 1.5}, r"delay=1.5 is invalid"),
        ({"test_delays": [-1, 2]}, r"test_delays=\[-1, 2\] is invalid"),
        ({"test_delays": []}, r"test_delays=\[\] is invalid"),
        ({"test_delays": [2, 2]}, r"test_delays=\[2, 2\] is invalid"),
        ({"condition": "backward"}, "condition='backward' is unknown"),
        ({"condition": "cued", "teacher_forcing": True}, "teacher_forcing=true is for condition='forward'"),
        ({"n_items": 2, "vocab_size": 6, "num_held_out": 15}, "num_held_out=15 is too large"),
        ({"num_held_out": 4}, "num_held_out=4 is too small"),
        ({"batch_size": 0}, "batch_size=0 is invalid"),
        ({"num_workers": -1}, "num_workers=-1 is invalid"),
    ],
)
def test_impossible_settings_are_one_line_usage_errors(kwargs, message):
    with pytest.raises(UsageError, match=message) as err:
        task(**kwargs)
    assert "\n" not in str(err.value)
