"""The learning-rate schedule is the paper's: linear warm-up to the full rate, then a cosine to 0 at the last step. The
optimiser's settings are every model's arguments, declared once (``Optimiser``), with each model's defaults."""

import math
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from primacy.backbones.base import Backbone
from primacy.backbones.s4d import S4DBackbone
from primacy.errors import UsageError
from primacy.models.free_recall import FreeRecallModel
from primacy.models.language import LanguageModel, LanguageOptimiser
from primacy.models.lists import RecallModel, SequenceModel
from primacy.models.optim import adamw_warmup_cosine, warmup_cosine
from primacy.registry import constructor_parameters
from primacy.testing.signature import check_signature


def test_warmup_cosine_matches_its_closed_form_at_hand_computed_steps():
    # 4 warm-up steps of 12: 1/4, 2/4, 3/4, 1, then 0.5 (1 + cos(pi (s - 4) / 8)) down to 0 at step 12
    expected = {0: 0.25, 1: 0.5, 2: 0.75, 3: 1.0, 4: 1.0, 6: 0.5 * (1 + math.cos(math.pi / 4)), 8: 0.5,
                10: 0.5 * (1 + math.cos(3 * math.pi / 4)), 12: 0.0, 20: 0.0}
    for step, factor in expected.items():
        assert warmup_cosine(step, warmup_steps=4, total_steps=12) == pytest.approx(factor, abs=1e-12), step


def test_without_warmup_the_schedule_starts_at_the_full_rate_and_only_falls():
    factors = [warmup_cosine(step, warmup_steps=0, total_steps=100) for step in range(101)]
    assert factors[0] == 1.0 and factors[-1] == pytest.approx(0.0, abs=1e-12)
    assert all(a >= b for a, b in zip(factors, factors[1:]))


def test_torchs_scheduler_applies_the_factor_at_every_step():
    """What Optimiser.configure hands to LambdaLR: the optimiser's lr after k steps is lr x factor(k)."""
    weight = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.AdamW([weight], lr=1e-3)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: warmup_cosine(s, 3, 10))
    for step in range(12):
        assert optimizer.param_groups[0]["lr"] == pytest.approx(1e-3 * warmup_cosine(step, 3, 10), abs=1e-15)
        optimizer.step()
        scheduler.step()


SETTINGS = ["lr", "betas", "eps", "weight_decay", "warmup_steps"]
# Each model's optimiser defaults, as when every model declared the five settings itself.
DEFAULTS = {"lr": 1e-3, "betas": (0.9, 0.99), "eps": 1e-8, "weight_decay": 0.0, "warmup_steps": 1000}
MODELS = {SequenceModel: DEFAULTS, RecallModel: DEFAULTS, FreeRecallModel: DEFAULTS,
          LanguageModel: {**DEFAULTS, "warmup_steps": 200}}


@pytest.mark.parametrize("model", MODELS, ids=lambda cls: cls.__name__)
def test_a_model_takes_the_optimisers_settings_last_with_the_defaults_it_always_had(model):
    """What the CLI offers, checks and prints for a model that declares none of them (``**optimiser``): Optimiser's
    five settings after the model's own, typed, with each model's defaults (LanguageModel warms up for 200 steps)."""
    params = constructor_parameters(model)
    assert [p.name for p in params][-5:] == SETTINGS
    assert {p.name: p.default for p in params[-5:]} == MODELS[model]
    assert all(p.doc for p in params[-5:]), "each setting is described (Optimiser's docstring)"
    check_signature(model, defaults=False)


@pytest.mark.parametrize("given", [{}, {"warmup_steps": 5, "lr": 3e-3}])
def test_a_model_built_in_python_saves_every_optimiser_setting_last(given):
    """hparams (so a checkpoint and summary.json) hold the five settings after the others whatever the constructor was
    given, as when the models declared them; the model's optimiser is built from the same values."""
    model = LanguageModel(S4DBackbone(d_model=8, d_state=8), vocab_size=16, **given)
    assert list(model.hparams)[-5:] == SETTINGS
    assert {k: model.hparams[k] for k in SETTINGS} == {**MODELS[LanguageModel], **given}
    assert model.optimiser == LanguageOptimiser(**given)


@pytest.mark.parametrize(("settings", "message"), [
    ({"lr": 0.0}, "lr=0.0 is invalid: it must be positive"),
    ({"lr": math.nan}, "lr=nan is invalid: it must be a finite number"),
    ({"eps": math.inf}, "eps=inf is invalid: it must be a finite number"),
    ({"betas": (0.9, 1.0)}, r"betas=\(0.9, 1.0\) is invalid: both must lie in \[0, 1\)"),
    ({"warmup_steps": -1}, "warmup_steps=-1 is invalid: it must be at least 0"),
])
def test_settings_the_optimiser_cannot_use_are_refused_in_one_line(settings, message):
    with pytest.raises(UsageError, match=f"^{message}$"):
        SequenceModel(S4DBackbone(d_model=8, d_state=8), **settings)


def test_configure_is_adamw_at_the_settings_with_the_warmup_cosine_schedule():
    """The settings reach AdamW and its schedule (the trainer's 10 steps); ``adamw_warmup_cosine``, kept for code
    that called it, reads the same settings from hparams and builds the same."""
    settings = {"lr": 2e-3, "betas": (0.8, 0.95), "eps": 1e-7, "weight_decay": 0.1, "warmup_steps": 3}
    model = SequenceModel(S4DBackbone(d_model=8, d_state=8), vocab_size=16, n_items=4, **settings)
    model._trainer = SimpleNamespace(estimated_stepping_batches=10)
    for configured in (model.configure_optimizers(), adamw_warmup_cosine(model)):
        optimizer, scheduler = configured["optimizer"], configured["lr_scheduler"]["scheduler"]
        assert isinstance(optimizer, torch.optim.AdamW) and configured["lr_scheduler"]["interval"] == "step"
        assert optimizer.defaults["betas"] == (0.8, 0.95) and optimizer.defaults["eps"] == 1e-7
        assert {g["weight_decay"] for g in optimizer.param_groups} == {0.0, 0.1}  # S4D's dynamics: no decay
        assert {f(5) for f in scheduler.lr_lambdas} == {warmup_cosine(5, 3, 10)}  # one lambda a group
        assert all(g["initial_lr"] == 2e-3 for g in optimizer.param_groups)


def test_the_conformance_kit_refuses_a_kwargs_the_cli_cannot_follow():
    """A ``**kwargs`` kept rather than handed to a typed callable gives the CLI no options: refused, not lost."""

    class Opaque(SequenceModel):
        def __init__(self, backbone: Backbone, **settings: Any) -> None:
            super().__init__(backbone)
            self.settings = settings

    with pytest.raises(AssertionError, match=r"Opaque.__init__: the CLI finds no parameters behind its \*\*kwargs"):
        check_signature(Opaque, defaults=False)
