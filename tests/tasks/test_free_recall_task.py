"""Contracts of the free-recall task: what a trial is, what is held out, how the test is designed, and that the data
are a function of the settings and the seed alone (not of workers or processes)."""


import pytest
import torch
from conftest import stream_batches

from primacy.errors import UsageError
from primacy.tasks import free_recall
from primacy.tasks.base import EvalShard, TrainingStream
from primacy.tasks.free_recall import FreeRecallTask, Tokens, trials
from primacy.tasks.sampling import set_hash

SMALL = {"num_held_out": 12, "num_test_sets": 3, "num_val_sets": 2}


def task(**kwargs) -> FreeRecallTask:
    return FreeRecallTask(**{"n_items": 4, "vocab_size": 16, **SMALL, **kwargs})


def check_trials(batch: dict[str, torch.Tensor], t: FreeRecallTask) -> None:
    """Everything a batch of ``t`` promises, read off its tokens."""
    n, tokens = t.n_items, batch["tokens"]
    rows = tokens.shape[0]
    assert tokens.shape == (rows, 2 * n + 1)
    assert batch["study"].shape == batch["order"].shape == (rows, n) and batch["index"].shape == (rows,)
    assert all(v.dtype == torch.long for v in batch.values())
    assert ((tokens >= 0) & (tokens < FreeRecallTask.model_vocabulary(t.hparams))).all()
    study = batch["study"]
    assert torch.equal(tokens[:, :n], study), "the sequence opens with the study list"
    assert (study < t.vocab_size).all(), "study tokens are items"
    assert (study.sort(dim=1).values.diff(dim=1) > 0).all(), "a list has distinct items"
    assert (tokens[:, n] == t.tokens.cue).all(), "the cue follows the study list"
    assert (batch["order"].sort(dim=1).values == torch.arange(n)).all(), "the order is a permutation"
    assert torch.equal(tokens[:, n + 1 :], study.gather(1, batch["order"])), "fed: the study items in that order"
    assert not (tokens == t.tokens.stop).any(), "stop is an answer, never an input"


def test_module_docstring_example():
    batch = trials(torch.tensor([[5, 1, 6]]), torch.tensor([[2, 0, 1]]), torch.tensor([0]), Tokens(8))
    assert batch["tokens"].tolist() == [[5, 1, 6, 8, 6, 5, 1]]
    doc = free_recall.__doc__
    assert "tokens = [5, 1, 6,  8,  6, 5, 1]   study = [5, 1, 6]   order = [2, 0, 1]" in doc
    tokens, n = batch["tokens"][0].tolist(), 3
    answers = [set(tokens[n + 1 + r :]) for r in range(n)]  # step r: the study items not fed before it
    assert answers == [{5, 1, 6}, {5, 1}, {1}]
    assert "answers {5, 1, 6}, {5, 1}, {1}, stop" in doc and "(L = 3, K = 8; cue 8, stop 9)" in doc
    assert (Tokens(8).cue, Tokens(8).stop) == (8, 9)


def test_training_trials_are_well_formed_and_their_orders_uniform():
    t = task()
    batch = t.stream_batch(0, 2048)
    check_trials(batch, t)
    first = torch.bincount(batch["order"][:, 0], minlength=4).float() / 2048
    assert (first - 0.25).abs().max() < 0.05, "each study position is fed first equally often"
    assert len({tuple(o.tolist()) for o in batch["order"]}) == 24, "every order of 4 items occurs"


def test_vocabulary_counts_items_cue_and_stop():
    assert FreeRecallTask.model_vocabulary({"vocab_size": 16, "n_items": 4}) == 18
    t = task()
    assert (t.tokens.cue, t.tokens.stop) == (16, 17)
    assert t.tokens.stop == FreeRecallTask.model_vocabulary(t.hparams) - 1, "the model's stop is its last token"


def sets(study: torch.Tensor) -> set[tuple[int, ...]]:
    return {tuple(sorted(s.tolist())) for s in study}


@pytest.mark.parametrize("n_items,vocab_size,num_held_out", [(2, 5, 5), (3, 8, 40)])
def test_held_out_sets_are_never_trained_on(n_items, vocab_size, num_held_out):
    # C(5, 2) = 10 and C(8, 3) = 56 sets, most held out, so a leak would show at once.
    t = FreeRecallTask(n_items=n_items, vocab_size=vocab_size, num_held_out=num_held_out, num_test_sets=3,
                       num_val_sets=2)
    held = sets(t.held_out)
    assert len(held) == num_held_out, "held-out sets are distinct"
    trained = set()
    for index in range(10):
        trained |= sets(t.stream_batch(index, 64)["study"])
    assert not held & trained
    total = 10 if vocab_size == 5 else 56
    assert len(trained) == total - num_held_out, "every other set is trained on"
    hashes = t._held_out.hashes  # the task's own check, by order-free set hash
    assert not torch.isin(set_hash(t.stream_batch(10, 64)["study"], t._held_out.token_hash), hashes).any()


def test_test_trials_are_the_first_held_out_sets_once_each_in_the_designs_order():
    t = task(num_held_out=20, num_test_sets=7, num_val_sets=5, batch_size=3)
    test = list(t.test_dataloader())
    assert len(test) == 3, "7 trials in batches of 3"
    batch = {k: torch.cat([b[k] for b in test]) for k in test[0]}
    check_trials(batch, t)
    assert torch.equal(batch["study"], t.held_out[:7]), "one trial per test set, in order"
    assert batch["index"].tolist() == list(range(7))
    design = t.test_design()
    assert len(design) == 7 and torch.equal(batch["order"], design.orders)
    val = torch.cat([b["study"] for b in t.val_dataloader()])
    assert torch.equal(val, t.held_out[15:]), "validation: the last num_val_sets held-out sets"
    assert not sets(val) & sets(batch["study"])
    again = torch.cat([b["order"] for b in task(num_held_out=20, num_test_sets=7, num_val_sets=5).test_dataloader()])
    assert torch.equal(again, batch["order"]), "the evaluation order is fixed by the seed, not the batch size"


def first_batches(**settings):
    t = task(**settings)
    train = stream_batches(t.train_dataloader(), 3)
    return train + list(t.val_dataloader()) + list(t.test_dataloader())


def same(a: list[dict], b: list[dict]) -> bool:
    return len(a) == len(b) and all(x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)
                                    for x, y in zip(a, b))


def test_same_seed_same_data_different_seed_different_data():
    settings = {"batch_size": 8}
    one = first_batches(seed=0, **settings)
    assert same(one, first_batches(seed=0, **settings))
    other = first_batches(seed=1, **settings)
    assert not any(torch.equal(a["tokens"], b["tokens"]) for a, b in zip(one, other))


def test_data_do_not_depend_on_num_workers():
    assert same(first_batches(num_workers=0, batch_size=8), first_batches(num_workers=2, batch_size=8))


def test_processes_split_each_training_batch_and_a_resumed_stream_goes_on_where_it_stopped():
    make = task().stream_batch
    whole = iter(TrainingStream(make, batch_size=6))
    batches = [next(whole) for _ in range(3)]
    parts = [next(iter(TrainingStream(make, batch_size=2, rank=r, world_size=3))) for r in range(3)]
    for key, value in batches[0].items():
        assert torch.equal(torch.cat([p[key] for p in parts]), value), key
    assert batches[1]["index"].tolist() == list(range(6, 12)), "a trial's index is its row in the stream"
    resumed = next(iter(TrainingStream(make, batch_size=6, start=2)))
    assert all(torch.equal(resumed[k], batches[2][k]) for k in resumed)
    assert not torch.equal(batches[1]["tokens"], batches[2]["tokens"])


def test_processes_share_the_test_trials_without_overlap():
    t = task(num_held_out=20, num_test_sets=7, num_val_sets=5, batch_size=2)
    design = t.test_design()
    whole = design.batch(torch.arange(len(design)))
    shards = [list(EvalShard(design.batch, len(design), 2, rank, 3)) for rank in range(3)]
    parts = {k: torch.cat([b[k] for shard in shards for b in shard]) for k in whole}
    assert all(torch.equal(parts[k], whole[k]) for k in whole), "every trial once, as one process sees it"


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"n_items": 5, "vocab_size": 4}, "vocab_size=4 is too small for n_items=5"),
        ({"n_items": 0}, "n_items=0 is invalid"),
        ({"vocab_size": 0}, "vocab_size=0 is invalid"),
        ({"batch_size": 0}, "batch_size=0 is invalid"),
        ({"num_workers": -1}, "num_workers=-1 is invalid"),
        ({"num_test_sets": 0}, "num_test_sets=0 is invalid"),
        ({"num_val_sets": 0}, "num_val_sets=0 is invalid"),
        ({"n_items": 2, "vocab_size": 6, "num_held_out": 15}, "num_held_out=15 is too large"),
        ({"n_items": 4, "vocab_size": 4, "num_held_out": 1, "num_test_sets": 1, "num_val_sets": 1},
         "num_held_out=1 is too large"),
        ({"num_held_out": 4}, "num_held_out=4 is too small"),
    ],
)
def test_impossible_settings_are_one_line_usage_errors(kwargs, message):
    with pytest.raises(UsageError, match=message) as err:
        task(**kwargs)
    assert "\n" not in str(err.value)
