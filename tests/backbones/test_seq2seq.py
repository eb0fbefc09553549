"""Seq2SeqBackbone (issue 71): an RNN encoder and decoder with the decoder's attention over the encoder's states pass
the backbone contract (causal, steps as it runs, its attention an exact influence, heads ablated), recall freely in
the free-recall model, resume bitwise, and refuse bad settings in one line."""

import copy

import pytest
import torch
from support.resume import assert_resumes_bitwise

from primacy import registry
from primacy.backbones.seq2seq import Seq2SeqBackbone
from primacy.errors import UsageError
from primacy.models.free_recall import FreeRecallModel
from primacy.tasks.free_recall import FreeRecallTask
from primacy.testing import WithoutStep, check_backbone, tiny_fit


@pytest.mark.parametrize("settings", [{"n_heads": 2, "cell": "lstm"}, {"n_heads": 4}], ids=["lstm-2-heads", "gru-4"])
def test_other_settings_keep_the_backbone_contract(settings):
    # the default settings: tests/backbones/test_backbones.py, as registered
    check_backbone(Seq2SeqBackbone, **settings)


def test_it_is_registered_under_its_class_name():
    assert registry.get("Seq2SeqBackbone") is Seq2SeqBackbone


def test_position_t_attends_over_the_encoder_states_up_to_t_and_its_attention_is_what_forward_mixes():
    torch.manual_seed(0)
    model = Seq2SeqBackbone(d_model=8, n_heads=2).double().eval()
    x = torch.randn(2, 7, 8, dtype=torch.float64)
    (layer,) = model.influence(x)
    weights = layer.weights  # B h T T
    assert torch.allclose(weights.sum(-1), torch.ones(2, 2, 7, dtype=torch.float64)), "a softmax over s <= t"
    below = torch.ones(7, 7, dtype=torch.bool).tril()
    assert (weights[..., ~below] == 0).all() and (weights[..., below] > 0).all()
    context = layer.mixed().transpose(1, 2).reshape(2, 7, 8)  # B T D
    decoded = model.decoder(x)[0]
    assert torch.allclose(torch.tanh(model.combine(torch.cat([context, decoded], -1))), model(x), atol=1e-12)
    later = x.clone()
    later[:, 4:] = torch.randn(2, 3, 8, dtype=torch.float64)
    assert torch.equal(model(later)[:, :4], model(x)[:, :4]), "what comes after t changes nothing before it"


def test_the_free_recall_model_recalls_with_it_stepping_as_passes_over_the_sequence_do():
    task = FreeRecallTask(n_items=4, vocab_size=16, num_held_out=12, num_test_sets=3, num_val_sets=2, delay=2,
                          gap=1, distractor_vocab=3)
    batch = task.stream_batch(0, 5)
    torch.manual_seed(0)
    stepped = FreeRecallModel(Seq2SeqBackbone(d_model=8, n_heads=2), vocab_size=FreeRecallTask.model_vocabulary(
        task.hparams), n_items=4, decoding="sampled").double()
    passes = copy.deepcopy(stepped)
    passes.backbone = WithoutStep(passes.backbone)
    tokens, study, index = batch["tokens"], batch["study"], batch["index"]
    prompt = tokens[:, : tokens.shape[1] - 4]
    assert torch.equal(stepped.greedy_order(tokens, study), passes.greedy_order(tokens, study))
    for decoding in ("sampled", "greedy"):
        stepped.decoding = passes.decoding = decoding
        assert torch.equal(stepped.recall(study, index, prompt), passes.recall(study, index, prompt)), decoding


RUN = {"model": "FreeRecallModel", "data": "FreeRecallTask", "backbone": "Seq2SeqBackbone", "steps": 8,
       "model_settings": {"teacher_forcing": "greedy", "warmup_steps": 2}, "args": ["--test_after_fit", "false"]}


def test_a_free_recall_run_with_it_resumes_bitwise(tmp_path):
    assert_resumes_bitwise(tmp_path, RUN)


@pytest.mark.parametrize("settings,message", [
    ({"d_model": 6, "n_heads": 4}, "d_model=6 is invalid with n_heads=4: it must be divisible by n_heads"),
    ({"n_heads": 0}, "n_heads=0 is invalid: it must be at least 1"),
    ({"cell": "rnn"}, "cell='rnn' is unknown: choose one of 'gru', 'lstm'"),
])
def test_bad_settings_are_refused_in_one_line(settings, message):
    with pytest.raises(UsageError) as refused:
        Seq2SeqBackbone(**settings)
    assert str(refused.value) == message


def test_ablating_a_head_out_of_range_is_refused_in_one_line():
    model = Seq2SeqBackbone(d_model=8, n_heads=2)
    with pytest.raises(UsageError) as refused, model.ablate([(0, 2)]):
        pass
    assert "head (layer, head)=(0, 2) is invalid: layer must lie in [0, 0] and head in [0, 1]" == str(refused.value)


def test_the_list_models_train_and_test_with_it(tmp_path):
    run = tiny_fit(tmp_path / "run", "SequenceModel", "VerificationTask", "Seq2SeqBackbone", steps=2)
    assert (run / "results" / "summary.json").exists()
