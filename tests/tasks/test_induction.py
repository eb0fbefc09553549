"""The induction task's sequences hold exactly one copied segment, and a tiny attention-only model learns to copy."""

import lightning as L
import pytest
import torch

from primacy.backbones.transformer import TransformerBackbone
from primacy.errors import UsageError
from primacy.models.language import LanguageModel
from primacy.tasks.induction import InductionTask, repeated_segment_batch
from primacy.tasks.prompts import BOS


def test_training_sequences_copy_one_segment_and_mark_the_predictable_tokens():
    batch = repeated_segment_batch(500, 40, 1000, 3, torch.Generator().manual_seed(0))
    tokens, repeat = batch["tokens"], batch["repeat"]
    assert tokens.shape == repeat.shape == (500, 40)
    assert (tokens[:, 0] == BOS).all() and (tokens[:, 1:] != BOS).all()
    periods = set()
    for row, mask in zip(tokens, repeat):
        positions = torch.nonzero(mask)[:, 0]
        start, period = positions[0].item() - 1, len(positions) + 1  # the copy's first token is not predictable
        assert torch.equal(positions, torch.arange(start + 1, start + period))
        periods.add(period)
        # some earlier offset holds the same segment (V = 1000 makes accidental matches unlikely)
        segment = row[start : start + period]
        assert any(torch.equal(row[a : a + period], segment) for a in range(1, start - period + 1))
    assert min(periods) == 3 and max(periods) == 19, "periods cover [min_period, (length - 1) // 2]"


def test_validation_prompts_are_bos_r_r_and_mark_the_second_repeat():
    task = InductionTask(vocab_size=50, length=32, prompt_items=10, batch_size=8, num_val_prompts=20)
    batches = list(task.val_dataloader())
    assert [len(b["tokens"]) for b in batches] == [8, 8, 4]
    tokens, repeat = batches[0]["tokens"], batches[0]["repeat"]
    assert tokens.shape == (8, 21) and torch.equal(tokens[:, 1:11], tokens[:, 11:])
    assert repeat[0].nonzero()[:, 0].tolist() == list(range(12, 21))


def test_training_stream_is_reproducible():
    first = next(iter(InductionTask(seed=3).train_dataloader()))["tokens"]
    again = next(iter(InductionTask(seed=3).train_dataloader()))["tokens"]
    other = next(iter(InductionTask(seed=4).train_dataloader()))["tokens"]
    assert torch.equal(first, again) and not torch.equal(first, other)


@pytest.mark.parametrize(
    "kwargs,message",
    [({"vocab_size": 2}, "vocab_size=2"), ({"min_period": 40, "length": 64}, "min_period=40 is invalid"),
     ({"prompt_items": 128}, "prompt_items=128"), ({"batch_size": 0}, "batch_size=0")],
)
def test_bad_settings_are_rejected(kwargs, message):
    with pytest.raises(UsageError, match=message):
        InductionTask(**kwargs)


def test_a_few_steps_reduce_the_loss(tmp_path):
    torch.manual_seed(0)
    backbone = TransformerBackbone(d_model=32, n_layers=2, n_heads=2, mlp=False, layer_norm=False)
    model = LanguageModel(backbone, vocab_size=32, lr=3e-3, warmup_steps=5)
    task = InductionTask(vocab_size=32, length=24, min_period=3, prompt_items=8, batch_size=32, num_val_prompts=32)
    batch = next(iter(task.train_dataloader()))
    before = model.token_losses(batch)[0].mean().item()
    trainer = L.Trainer(max_steps=40, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, default_root_dir=tmp_path, val_check_interval=40,
                        check_val_every_n_epoch=None, accelerator="cpu")
    trainer.fit(model, datamodule=task)
    assert model.token_losses(batch)[0].mean().item() < before - 0.1
    assert {"val/repeat_accuracy", "val/other_accuracy"} <= set(trainer.callback_metrics)


def test_distinct_sequences_repeat_only_the_copied_segment():
    batch = repeated_segment_batch(200, 30, 40, 2, torch.Generator().manual_seed(1), distinct=True)
    for row, mask in zip(batch["tokens"], batch["repeat"]):
        period = int(mask.sum()) + 1
        assert len(set(row.tolist())) == len(row) - period, "every token but the copy's occurs once"
    with pytest.raises(UsageError, match="length=64 is too long for vocab_size=50"):
        InductionTask(vocab_size=50, length=64, distinct=True)
    InductionTask(vocab_size=50, length=64, prompt_items=10)  # distinct=False is the default
