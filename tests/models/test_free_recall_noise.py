"""Free recall's input noise (issue 71): each list's own Gaussian noise, one vector a position, the same in every pass
over the list and whatever the batching or the backbone's path (stepping or passes); training lists' from the run's
seed, evaluation lists' from decoding_seed; 0 draws nothing; bad values refused in one line; bitwise resume, and two
processes at half the batch train like one at the whole batch."""

import pytest
import torch
from support.distributed import half_batch_gaps
from support.resume import assert_resumes_bitwise

from primacy.backbones.lstm import LSTMBackbone
from primacy.errors import UsageError
from primacy.models.free_recall import FreeRecallModel
from primacy.tasks.free_recall import FreeRecallTask
from primacy.testing import WithoutStep

L, K, B, H = 4, 10, 6, 8


def model(**kwargs) -> FreeRecallModel:
    torch.manual_seed(0)
    return FreeRecallModel(LSTMBackbone(d_model=H), vocab_size=K + 2, n_items=L, **kwargs)


def batch(rows: int = B, start: int = 0) -> dict[str, torch.Tensor]:
    return FreeRecallTask(n_items=L, vocab_size=K, num_held_out=12, num_test_sets=5, num_val_sets=2).stream_batch(
        start, rows)


def test_each_list_draws_its_own_noise_of_the_set_size_from_its_seed():
    m, data = model(embedding_noise=0.5, decoding_seed=7), batch(8)
    torch.manual_seed(3)  # as seed_everything(3) does: the run's seed
    train = m.input_noise(data["index"], 9, training=True)
    assert train.shape == (8, 9, H) and train.dtype == torch.float32
    assert torch.equal(train[5:], m.input_noise(data["index"][5:], 9, training=True)), "not by batching"
    torch.manual_seed(4)
    assert not torch.equal(train, m.input_noise(data["index"], 9, training=True)), "training: the run's seed"
    evaluation = m.input_noise(data["index"], 9, training=False)
    assert not torch.equal(evaluation, train)
    torch.manual_seed(3)
    assert torch.equal(evaluation, m.input_noise(data["index"], 9, training=False)), "evaluation: decoding_seed's"
    assert not torch.equal(evaluation, model(embedding_noise=0.5, decoding_seed=8).input_noise(data["index"], 9, False))
    many = model(embedding_noise=0.5).input_noise(torch.arange(400), 50, training=False)
    assert many.mean().abs() < 0.01 and many.std().item() == pytest.approx(0.5, rel=0.01)


def test_without_noise_nothing_is_drawn_and_the_loss_is_the_plain_one():
    m, data = model(), batch()
    assert m.input_noise(data["index"], 9, training=True) is None
    noisy = model(embedding_noise=0.5)
    assert noisy.state_dict().keys() == m.state_dict().keys(), "the noise adds no parameter or buffer"
    noise = noisy.input_noise(data["index"], data["tokens"].shape[1], training=True)
    plain, _ = m.order_agnostic_loss(data["tokens"])
    assert torch.equal(noisy.order_agnostic_loss(data["tokens"], torch.zeros_like(noise))[0], plain)
    assert not torch.equal(noisy.order_agnostic_loss(data["tokens"], noise)[0], plain)
    torch.manual_seed(0)
    loss, _ = noisy.training_answers(data)
    torch.manual_seed(0)
    assert torch.equal(loss, noisy.order_agnostic_loss(data["tokens"], noise)[0]), "training reads its lists' noise"


@pytest.mark.parametrize("decoding", ["greedy", "sampled"])
def test_stepping_and_passes_over_the_sequence_read_the_same_noise(decoding):
    """The recurrence reads position t's noise as the pass over the sequence does: recalls and greedy orders agree."""
    m, data = model(embedding_noise=5.0, decoding=decoding), batch()
    passes = model(embedding_noise=5.0, decoding=decoding)
    passes.backbone = WithoutStep(passes.backbone)
    noise = m.input_noise(data["index"], data["tokens"].shape[1], training=False)
    recalls = m.recall(data["study"], data["index"])
    assert torch.equal(recalls, passes.recall(data["study"], data["index"]))
    assert not torch.equal(recalls, model(decoding=decoding).recall(data["study"], data["index"])), "noise is read"
    assert torch.equal(m.greedy_order(data["tokens"], data["study"], noise),
                       passes.greedy_order(data["tokens"], data["study"], noise))
    assert torch.equal(recalls[2:], m.recall(data["study"][2:], data["index"][2:])), "not by batching"


@pytest.mark.parametrize("value, message", [
    (-0.1, "embedding_noise=-0.1 is invalid: it must be at least 0"),
    (float("nan"), "embedding_noise=nan is invalid: it must be a finite number"),
    (float("inf"), "embedding_noise=inf is invalid: it must be a finite number"),
])
def test_a_bad_noise_is_refused_in_one_line(value, message):
    with pytest.raises(UsageError) as refused:
        model(embedding_noise=value)
    assert str(refused.value) == message


RUN = {"model": "FreeRecallModel", "data": "FreeRecallTask", "steps": 8,
       "model_settings": {"embedding_noise": 0.5, "teacher_forcing": "greedy", "warmup_steps": 2},
       "args": ["--test_after_fit", "false"]}


def test_a_noisy_run_resumes_bitwise(tmp_path):
    assert_resumes_bitwise(tmp_path, RUN)


@pytest.mark.slow
def test_two_noisy_processes_at_half_the_batch_train_like_one_at_the_whole_batch(tmp_path):
    """Each list's noise comes from its row, so N processes at B / N take the step of one process at B, up to the
    order of float sums. About 40 s."""
    gap, moved = half_batch_gaps(tmp_path, RUN)
    assert gap < 1e-5, "2 x batch 2 computes the batch-4 step"
    assert moved > 1e-3, "a batch of 2 alone trains differently, so the comparison can tell"
