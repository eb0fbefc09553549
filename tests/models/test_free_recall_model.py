"""FreeRecallModel: its order-agnostic losses against float64 references, greedy teacher forcing, free recall by
greedy and sampled decoding, and the FreeRecallStats metric."""

import copy

import numpy as np
import pytest
import torch
from conftest import extra_module
from support.distributed import half_batch_gaps

from primacy.analysis.behaviour.free_recall import free_recall_counts, recall_positions
from primacy.backbones.lstm import LSTMBackbone
from primacy.backbones.s4 import S4Backbone
from primacy.backbones.s4d import S4DBackbone
from primacy.backbones.transformer import TransformerBackbone
from primacy.errors import UsageError
from primacy.metrics import FreeRecallStats
from primacy.models.free_recall import FreeRecallModel
from primacy.rundir import results
from primacy.testing import WithoutStep

L, K, B = 4, 10, 6
CUE, STOP = K, K + 1


def model(**kwargs) -> FreeRecallModel:
    torch.manual_seed(0)
    return FreeRecallModel(LSTMBackbone(d_model=8), vocab_size=K + 2, n_items=L, **kwargs)


def trials(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """study (B, L) distinct items and tokens (B, 2L + 1): study, cue, the study items in a random order."""
    g = torch.Generator().manual_seed(seed)
    study = torch.rand(B, K, generator=g).argsort(1)[:, :L]  # B L
    order = torch.rand(B, L, generator=g).argsort(1)  # B L
    return study, torch.cat([study, torch.full((B, 1), CUE), study.gather(1, order)], dim=1)


def reference_loss(m: FreeRecallModel, tokens: torch.Tensor, name: str, decay: float = 1.0) -> float:
    """The module docstring's formulas, one step at a time in float64; step r weighs decay ** r."""
    with torch.no_grad():
        logp = m(tokens).double().log_softmax(-1)  # B L+1 V
    losses, weights = [], []
    for b in range(B):
        for r in range(L):
            remaining = tokens[b, L + 1 + r :]  # the items not fed before step r
            at = logp[b, r, remaining]
            losses.append(-at.logsumexp(0) if name == "set_mass" else -at.mean())
            weights.append(decay**r)
        losses.append(-logp[b, L, STOP])
        weights.append(decay**L)
    weights = torch.tensor(weights, dtype=torch.float64)
    return float((torch.stack(losses) * weights).sum() / weights.sum())


@pytest.mark.parametrize("name", ["set_mass", "uniform"])
def test_each_loss_is_its_formula(name):
    m = model(loss=name)
    _, tokens = trials()
    loss, right = m.order_agnostic_loss(tokens)
    assert loss.item() == pytest.approx(reference_loss(m, tokens, name), rel=1e-6)
    best = m(tokens).argmax(-1)  # B L+1
    for b in range(B):
        for r in range(L):
            assert right[b, r] == (best[b, r] in tokens[b, L + 1 + r :].tolist())
        assert right[b, L] == (best[b, L] == STOP)


@pytest.mark.parametrize("name", ["set_mass", "uniform"])
@pytest.mark.parametrize("decay", [0.5, 0.9])
def test_loss_decay_weights_each_step_by_its_power(name, decay):
    m = model(loss=name, loss_decay=decay)
    _, tokens = trials()
    loss, right = m.order_agnostic_loss(tokens)
    assert loss.item() == pytest.approx(reference_loss(m, tokens, name, decay), rel=1e-6)
    assert loss.item() != pytest.approx(reference_loss(m, tokens, name), rel=1e-3), "the weights change the loss"
    plain = model(loss=name)
    assert torch.equal(right, plain.order_agnostic_loss(tokens)[1]), "the answers do not depend on the weights"


@pytest.mark.slow
def test_favouring_a_few_two_processes_at_half_the_batch_train_like_one_at_the_whole_batch(tmp_path):
    """Every list weighs its steps alike, so the weighted mean splits across processes: N processes at B / N take the
    step of one process at B, up to the order of float sums. About 40 s."""
    run = {"model": "FreeRecallModel", "data": "FreeRecallTask",
           "model_settings": {"loss_decay": 0.8, "warmup_steps": 2}, "args": ["--test_after_fit", "false"]}
    gap, moved = half_batch_gaps(tmp_path, run)
    assert gap < 1e-5, "2 x batch 2 computes the batch-4 step"
    assert moved > 1e-3, "a batch of 2 alone trains differently, so the comparison can tell"


def test_the_loss_reads_only_the_output_steps_and_any_order_of_the_list_is_as_good():
    m = model()
    study, tokens = trials()
    loss, _ = m.order_agnostic_loss(tokens)
    assert loss.requires_grad
    logits = m(tokens)
    assert logits.shape == (B, L + 1, K + 2)
    # A list is a set: the loss at step 0 (all items remaining) is the same whatever order is fed after it.
    other = torch.cat([study, tokens[:, L : L + 1], study.flip(1)], dim=1)
    first = m(tokens).float().log_softmax(-1)[:, 0]
    assert torch.allclose(first, m(other).float().log_softmax(-1)[:, 0])


def test_greedy_teacher_forcing_feeds_a_permutation_of_the_list_chosen_by_the_model():
    m = model(teacher_forcing="greedy")
    study, tokens = trials()
    fed = m.greedy_order(tokens)
    assert torch.equal(fed[:, : L + 1], tokens[:, : L + 1])
    assert torch.equal(fed[:, L + 1 :].sort(1).values, study.sort(1).values)
    first_choice = m(tokens)[:, 0].gather(1, study).argmax(1)  # B: the remaining item rated highest at step 0
    assert torch.equal(fed[:, L + 1], study.gather(1, first_choice[:, None]).squeeze(1))


def test_evaluation_counts_the_steps_answered_right_fed_the_tasks_order_and_the_models_own():
    m = model()
    study, tokens = trials()
    stats = FreeRecallStats(L)
    assert stats.forced_accuracy() is None  # nothing measured yet
    m._update({"tokens": tokens, "study": study, "index": torch.arange(B)}, stats, m.test_loss)
    with torch.no_grad():  # by hand: the argmax at each of the L + 1 steps, fed each order, against what remains
        own = m.greedy_order(tokens)
        expected = {}
        for name, fed in (("task_order", tokens), ("own_order", own)):
            best = m(fed).argmax(-1)  # B L+1
            right = [best[b, r].item() in fed[b, L + 1 + r:].tolist() if r < L else best[b, r].item() == STOP
                     for b in range(B) for r in range(L + 1)]
            expected[name] = sum(right) / len(right)
    assert stats.forced_accuracy() == expected


def test_greedy_recall_feeds_its_own_outputs_back_and_pads_after_stop():
    m = model()
    study, _ = trials()
    recalls = m.recall(study, torch.arange(B))
    assert recalls.shape == (B, L)
    for b in range(B):
        tokens = torch.cat([study[b], torch.tensor([CUE]), torch.full((L,), STOP)])[None]
        for r in range(L):
            out = int(m(tokens)[0, r].argmax())
            if out == STOP:
                assert (recalls[b, r:] == -1).all()
                break
            assert recalls[b, r] == out
            if r + 1 < L:
                tokens[0, L + 1 + r] = out


STEPPING = {"lstm": lambda: LSTMBackbone(d_model=8, n_layers=2, output_block=True),
             "s4d": lambda: S4DBackbone(d_model=8, d_state=8), "s4": lambda: S4Backbone(d_model=8, d_state=8),
             "transformer": lambda: TransformerBackbone(d_model=8, n_heads=2)}


@pytest.mark.parametrize("name", STEPPING)
def test_a_backbone_that_steps_recalls_and_orders_as_passes_over_the_sequence_do(name):
    torch.manual_seed(0)
    stepped = FreeRecallModel(STEPPING[name](), vocab_size=K + 2, n_items=L, decoding="sampled").double()
    passes = copy.deepcopy(stepped)
    passes.backbone = WithoutStep(passes.backbone)
    study, tokens = trials()
    study, tokens = torch.cat([study, trials(1)[0]]), torch.cat([tokens, trials(1)[1]])  # 2B lists
    index = torch.arange(len(study))
    assert torch.equal(stepped.greedy_order(tokens), passes.greedy_order(tokens))
    for decoding in ("sampled", "greedy"):
        stepped.decoding = passes.decoding = decoding
        assert torch.equal(stepped.recall(study, index), passes.recall(study, index)), decoding


def test_sampled_recall_depends_on_each_list_and_seed_not_on_batching():
    m = model(decoding="sampled", temperature=2.0)
    study, _ = trials()
    index = torch.arange(10, 10 + B)
    whole = m.recall(study, index)
    assert torch.equal(torch.cat([m.recall(study[:2], index[:2]), m.recall(study[2:], index[2:])]), whole)
    assert not torch.equal(model(decoding="sampled", temperature=2.0, decoding_seed=1).recall(study, index), whole)


@pytest.mark.parametrize("kwargs, message", [
    ({"loss": "hungarian"}, "loss='hungarian' is unknown: choose one of 'set_mass', 'uniform'"),
    ({"teacher_forcing": "model"}, "teacher_forcing='model' is unknown: choose one of 'sampled', 'greedy'"),
    ({"decoding": "beam"}, "decoding='beam' is unknown: choose one of 'greedy', 'sampled'"),
    ({"temperature": 0.0}, "temperature=0.0 is invalid: it must be > 0"),
    ({"vocab_size": 5}, "vocab_size=5 is too small for n_items=4"),
])
def test_bad_settings_are_one_line(kwargs, message):
    settings = {"vocab_size": K + 2, "n_items": L, **kwargs}
    with pytest.raises(UsageError, match=message.replace("(", r"\(")) as err:
        FreeRecallModel(LSTMBackbone(d_model=8), **settings)
    assert "\n" not in str(err.value)


def test_the_metric_sums_counts_and_orders_the_lists_by_index_whatever_the_batches():
    study, _ = trials()
    g = torch.Generator().manual_seed(3)
    recalls = torch.where(torch.rand(B, L, generator=g) < 0.7, study.gather(1, torch.randint(L, (B, L), generator=g)),
                          torch.randint(K, (B, L), generator=g))
    recalls[:, -1] = -1  # every list stops before its last step
    index = torch.randperm(B, generator=g)
    one, two = FreeRecallStats(L), FreeRecallStats(L)
    one.update(study, recalls, index)
    two.update(study[3:], recalls[3:], index[3:])
    two.update(study[:3], recalls[:3], index[:3])
    (counts_one, study_one, recalls_one), (counts_two, study_two, recalls_two) = one.compute(), two.compute()
    expected = free_recall_counts(recall_positions(study, recalls), L)
    for a, b, c in zip(counts_one, counts_two, expected):
        assert torch.equal(a, c) and torch.equal(b, c)
    order = index.argsort()
    assert torch.equal(study_one, study[order]) and torch.equal(study_two, study[order])
    assert torch.equal(recalls_one, recalls[order]) and torch.equal(recalls_two, recalls[order])


def test_the_results_files_agree_with_psifr_reading_the_exported_recalls(tmp_path):
    fr, pd = extra_module("psifr.fr"), extra_module("pandas")
    study, _ = trials()
    recalls = model(decoding="sampled", temperature=3.0).recall(study, torch.arange(B))
    counts = free_recall_counts(recall_positions(study, recalls), L)
    summary = results.write_free_recall(tmp_path, counts, study, recalls, {"task": "free_recall"}, "seed0", 1.5)
    data = fr.merge_free_recall(pd.read_csv(tmp_path / "free_recall.csv"))
    assert summary["serial_position_curve"] == pytest.approx(fr.spc(data)["recall"].tolist(), abs=1e-12)
    assert summary["n_lists"] == B and summary["loss"] == 1.5 and summary["task"] == "free_recall"
    assert summary["counts"]["outputs"] == int((recalls >= 0).sum())
    assert summary["cmr_fit"] == results.cmr_fit_entry(np.array(summary["lag_crp"], dtype=float),
                                                       np.array(summary["lag_crp_lags"]))
    saved = dict(np.load(tmp_path / "free_recall.npz"))
    assert (saved["recalls"] == recalls.numpy()).all() and (saved["study"] == study.numpy()).all()
