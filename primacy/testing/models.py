"""check_model(): what every model, built-in or plugin, must do on the batches of a task it is built for. Call it
from your tests."""

from __future__ import annotations

import inspect
import logging
import math
import tempfile
import warnings
from typing import Any

import lightning as L
import torch

from primacy import registry
from primacy.backbones.base import Backbone
from primacy.callbacks.results import ResultsWriter
from primacy.contract import linked_sizes
from primacy.errors import UsageError
from primacy.rundir import kinds
from primacy.rundir.layout import RunDir
from primacy.testing.signature import check_signature


def task_settings(task: L.LightningDataModule) -> dict[str, Any]:
    """The settings (init args) ``task`` was built with: its hparams, or the attributes named like its arguments (as
    the CLI resolves them: ``registry.constructor_parameters``)."""
    if task.hparams:
        return dict(task.hparams)
    names = [p.name for p in registry.constructor_parameters(type(task))]
    return {name: getattr(task, name) for name in names if hasattr(task, name)}


def model_for(cls: type, task: L.LightningDataModule, **settings: Any) -> L.LightningModule:
    """``cls`` built for ``task`` as ``primacy fit`` builds it: the task's sizes (its model vocabulary, n_items,
    evaluation delays, longest sequence as the backbone's context_length) where the model takes them, ``settings``
    over them, and a small LSTM backbone unless ``settings`` give one."""
    from primacy.backbones.lstm import LSTMBackbone

    takes = inspect.signature(cls.__init__).parameters
    sizes, linked = linked_sizes(type(task), task_settings(task)), dict(settings)
    for size in ("vocab_size", "n_items", "delays"):
        if size in takes:
            linked.setdefault(size, sizes[size])
    if "backbone" in takes and "backbone" not in linked:
        linked["backbone"] = LSTMBackbone(d_model=8)
    backbone = linked.get("backbone")
    length = sizes["context_length"]
    if isinstance(backbone, Backbone) and hasattr(backbone, "context_length") and backbone.context_length is None:
        backbone.context_length = length
    return cls(**{k: v for k, v in linked.items() if v is not None or k in settings})


def check_model(cls: type, task: L.LightningDataModule, **settings: Any) -> None:
    """Assert the model contract for ``cls`` built for ``task`` (``model_for``; give a task with small settings);
    raises AssertionError on a breach.

    Checks: subclass of LightningModule; typed constructor without ``*args``/``**kwargs``; a training step on the
    task's first batch gives a finite scalar loss, and every trainable parameter a finite gradient; a Lightning
    Trainer (CPU, no logger) trains one step, which moves the weights and leaves them finite; validation and test
    update the stage metrics and log values, none infinite and some finite (NaN marks a value undefined for the
    task); the test writes the model's kind of result (``primacy.rundir.kinds``: the one its test metric names),
    which reads back with summary.json naming it; the state dict round-trips (a model rebuilt from it scores the same
    loss).
    """
    name = cls.__name__
    assert isinstance(cls, type) and issubclass(cls, L.LightningModule), f"{name} must subclass LightningModule"
    check_signature(cls, defaults=False)
    torch.manual_seed(0)
    with _quiet():
        model = model_for(cls, task, **settings)
    batch = next(iter(task.train_dataloader()))

    loss = _loss(model, batch)
    assert loss.ndim == 0 and torch.isfinite(loss), f"{name}: the training loss on {type(task).__name__}'s first " \
                                                    f"batch is {loss.tolist()}, not a finite scalar"
    assert loss.requires_grad, f"{name}: the training loss does not depend on the weights"
    loss.backward()
    for key, p in model.named_parameters():
        if p.requires_grad:
            assert p.grad is not None, f"{name}: parameter {key} gets no gradient from the training loss"
            assert torch.isfinite(p.grad).all(), f"{name}: parameter {key} has a non-finite gradient"
    model.zero_grad(set_to_none=True)

    before = {key: p.detach().clone() for key, p in model.named_parameters() if p.requires_grad}
    with tempfile.TemporaryDirectory() as root, _quiet():
        trainer = L.Trainer(default_root_dir=root, max_steps=1, val_check_interval=2, check_val_every_n_epoch=None,
                            accelerator="cpu", devices=1,
                            logger=False, enable_checkpointing=False, enable_progress_bar=False,
                            enable_model_summary=False, num_sanity_val_steps=0,
                            callbacks=[ResultsWriter(formats=[], val_heatmap=False)])
        trainer.fit(model, datamodule=task)
        moved = [key for key, p in model.named_parameters() if p.requires_grad and not torch.equal(p, before[key])]
        assert moved, f"{name}: one training step moved no weight"
        assert all(torch.isfinite(p).all() for p in model.parameters()), f"{name}: a training step made weights " \
                                                                          "non-finite"
        for stage, run in (("val", trainer.validate), ("test", trainer.test)):
            [logged] = run(model, datamodule=task, verbose=False)
            assert logged, f"{name}: {stage} logged nothing: its metric must update and compute"
            infinite = {key: value for key, value in logged.items() if math.isinf(value)}
            assert not infinite, f"{name}: {stage} logged infinite values {infinite}"
            # NaN is how a metric says "undefined here" (a distractor accuracy where no query is a distractor)
            assert any(math.isfinite(value) for value in logged.values()), f"{name}: {stage} logged no finite value"
        kind = kinds.for_model(model)
        try:
            written = kind.read(RunDir(root))["summary"]
        except UsageError as err:
            raise AssertionError(f"{name}: its test's {kind.name} cannot be read back: {err}") from None
        assert written.get(kinds.KIND_KEY) == kind.name, f"{name}: the test's summary.json names " \
                                                          f"{written.get(kinds.KIND_KEY)!r}, not {kind.name}"
    model.trainer = task.trainer = None  # as they were: a step by hand again
    metric = getattr(model, "metric", None)
    if callable(metric):  # TaskModel's stage metrics: the test's is kept for the results writer
        assert metric("test").update_count > 0, f"{name}: the test metric was never updated"

    torch.manual_seed(1)
    with _quiet():
        clone = model_for(cls, task, **settings)
    clone.load_state_dict(model.state_dict())
    model.eval(), clone.eval()
    with torch.no_grad():
        torch.manual_seed(2)
        expected = _loss(model, batch)
        torch.manual_seed(2)
        assert torch.equal(_loss(clone, batch), expected), f"{name}: state dict does not round-trip (another loss)"


def _loss(model: L.LightningModule, batch: Any) -> torch.Tensor:
    out = model.training_step(batch, 0)
    return out["loss"] if isinstance(out, dict) else out


class _quiet:
    """Lightning's info lines and warnings about tiny runs (few workers, few batches), silenced."""

    def __enter__(self) -> None:
        self.logger = logging.getLogger("lightning.pytorch")
        self.level = self.logger.level
        self.logger.setLevel(logging.ERROR)
        self.warnings = warnings.catch_warnings()
        self.warnings.__enter__()
        warnings.simplefilter("ignore")

    def __exit__(self, *exc: object) -> None:
        self.warnings.__exit__(*exc)
        self.logger.setLevel(self.level)
