"""check_backbone(): the contract every backbone, built-in or plugin, must pass. Call it from your tests.
check_influence(): a backbone's exact token-to-token influence rebuilds each mixing layer's output.
check_ablation(): its ablate() zeroes units as the Backbone contract says.
WithoutStep: a backbone with its step() hidden, the reference for stepped decoding.
fixed_batch_losses(): a backbone trained on one verification batch, to test that it learns."""

from __future__ import annotations

import torch
from torch import nn

from primacy.backbones.base import Backbone
from primacy.backbones.influence import Influence
from primacy.errors import UsageError
from primacy.testing.signature import check_signature


def check_backbone(cls: type, d_model: int = 8, length: int = 12, batch: int = 3, **kwargs: object) -> None:
    """Assert the Backbone contract for ``cls(d_model=d_model, **kwargs)``; raises AssertionError on a breach.

    Checks: subclass of Backbone; typed constructor without ``*args``/``**kwargs``; (B, T, D) -> (B, T, D);
    causality (changing inputs at t does not change outputs before t); every trainable parameter gets a
    finite gradient, in float32 and under bfloat16 autocast (``check_mixed_precision``); ``dt()`` maps names to
    positive finite tensors; the state dict round-trips; with ``initial_state`` and ``step``, stepping through the
    inputs gives the outputs of ``forward``; with ``influence``, in float64, each layer's weights (B, C, T, T) are
    zero above the diagonal and rebuild the layer's output (``check_influence``), and ``ablate`` honours its
    contract (``check_ablation``).
    """
    assert issubclass(cls, Backbone), f"{cls.__name__} must subclass primacy.backbones.Backbone"
    check_signature(cls)

    torch.manual_seed(0)
    model = cls(d_model=d_model, **kwargs)
    assert model.d_model == d_model, f"{cls.__name__}.d_model must equal the d_model it was built with"
    x = torch.randn(batch, length, d_model, requires_grad=True)
    y = model(x)
    assert y.shape == (batch, length, d_model), f"{cls.__name__}: output {tuple(y.shape)}, expected {tuple(x.shape)}"
    assert torch.isfinite(y).all(), f"{cls.__name__}: non-finite output"

    cut = length // 2
    x2 = x.detach().clone()
    x2[:, cut:] = torch.randn(batch, length - cut, d_model)
    with torch.no_grad():
        y2 = model(x2)
    assert torch.allclose(y[:, :cut].detach(), y2[:, :cut], atol=1e-5), f"{cls.__name__} is not causal"
    assert not torch.allclose(y[:, cut:].detach(), y2[:, cut:]), f"{cls.__name__} ignores its input"

    y.pow(2).mean().backward()
    for name, p in model.named_parameters():
        if p.requires_grad:
            assert p.grad is not None, f"{cls.__name__}: parameter {name} gets no gradient"
            assert torch.isfinite(p.grad).all(), f"{cls.__name__}: parameter {name} has a non-finite gradient"
    assert x.grad is not None and x.grad.abs().sum() > 0, f"{cls.__name__}: no gradient reaches the input"

    dts = model.dt()
    assert isinstance(dts, dict), f"{cls.__name__}.dt() must return a dict"
    for name, dt in dts.items():
        assert isinstance(dt, torch.Tensor) and dt.ndim == 1, f"{cls.__name__}.dt()[{name!r}] must be (channels,)"
        assert torch.isfinite(dt).all() and (dt > 0).all(), f"{cls.__name__}.dt()[{name!r}] must be positive"

    if callable(getattr(model, "step", None)):
        assert callable(getattr(model, "initial_state", None)), f"{cls.__name__} has step() but no initial_state()"
        with torch.no_grad():
            state, steps = model.initial_state(batch), []
            for x_t in x2.unbind(1):
                y_t, state = model.step(x_t, state)
                steps.append(y_t)
        assert torch.allclose(torch.stack(steps, 1), y2, atol=1e-4, rtol=1e-4), \
            f"{cls.__name__}: stepping through the inputs does not give forward's outputs"

    check_mixed_precision(model, x2)

    torch.manual_seed(1)
    clone = cls(d_model=d_model, **kwargs)
    clone.load_state_dict(model.state_dict())
    with torch.no_grad():
        assert torch.allclose(clone(x2), y2, atol=1e-6), f"{cls.__name__}: state dict does not round-trip"

    if callable(getattr(model, "influence", None)):
        layers = check_influence(clone.double(), x2.double())
        check_ablation(clone, x2.double(), [layer.weights.shape[1] for layer in layers])


def check_mixed_precision(model: Backbone, x: torch.Tensor) -> None:
    """Assert that ``model`` trains under bfloat16 autocast on the CPU (``--trainer.precision bf16-mixed``): a finite
    output of x's shape and a finite gradient for every trainable parameter."""
    name = type(model).__name__
    model.zero_grad()
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        y = model(x)
    assert y.shape == x.shape and torch.isfinite(y).all(), f"{name}: no finite output under bf16 autocast"
    y.float().pow(2).mean().backward()
    for param_name, p in model.named_parameters():
        if p.requires_grad:
            assert p.grad is not None and torch.isfinite(p.grad).all(), \
                f"{name}: parameter {param_name} gets no finite gradient under bf16 autocast"
    model.zero_grad()


def check_influence(model: Backbone, x: torch.Tensor, atol: float = 1e-10) -> list[Influence]:
    """Assert that ``model.influence(x)`` is an exact causal mixing form and return it: a non-empty list with, per
    layer, weights (B, C, T, T) exactly zero above the diagonal, values (B, C, T) or (B, C, T, d), an output of the
    values' shape, and Σ_s weights · values equal to the output within ``atol`` (for float64 models and inputs;
    1e-10 holds for forms exact by construction)."""
    name = type(model).__name__
    layers = model.influence(x)
    assert isinstance(layers, list) and layers, f"{name}.influence() must return a non-empty list of Influence"
    batch, length = x.shape[:2]
    for i, layer in enumerate(layers):
        assert isinstance(layer, Influence), f"{name}.influence()[{i}] must be an Influence"
        w = layer.weights
        assert w.ndim == 4 and w.shape[0] == batch and w.shape[2:] == (length, length), \
            f"{name}.influence()[{i}].weights is {tuple(w.shape)}, expected (B, C, T, T) with B={batch}, T={length}"
        assert layer.values.shape[:3] == w.shape[:3] and layer.values.ndim in (3, 4), \
            f"{name}.influence()[{i}].values is {tuple(layer.values.shape)}, expected (B, C, T) or (B, C, T, d)"
        assert layer.output.shape == layer.values.shape, f"{name}.influence()[{i}].output must have the values' shape"
        assert not w.requires_grad, f"{name}.influence()[{i}] must be computed without gradients"
        assert (w.triu(1) == 0).all(), f"{name}.influence()[{i}]: weights above the diagonal (s > t) are not zero"
        error = (layer.mixed() - layer.output).abs().max().item()
        assert error <= atol, f"{name}.influence()[{i}]: Σ_s weights · values is {error:.3g} off the layer's output"
    return layers


def check_ablation(model: Backbone, x: torch.Tensor, sizes: list[int]) -> None:
    """Assert the ``ablate`` contract of a backbone whose influence layers have ``sizes`` units: ablating nothing
    changes nothing; ablating every unit of a layer changes the output; blocks nest and restore what was ablated
    before; stepping (with ``step``) gives forward's outputs under ablation too; a pair out of range is a UsageError
    that ablates nothing."""
    name = type(model).__name__
    assert callable(getattr(model, "ablate", None)), f"{name} has influence() but no ablate()"
    model.eval()
    with torch.no_grad():
        intact = model(x)
        with model.ablate([]):
            assert torch.equal(model(x), intact), f"{name}.ablate([]) changed the output"
        for layer, size in enumerate(sizes):
            every = [(layer, unit) for unit in range(size)]
            with model.ablate(every[:1]):
                one = model(x)
                with model.ablate(every[1:]):
                    ablated = model(x)
                    assert not torch.allclose(ablated, intact), \
                        f"{name}: ablating layer {layer}'s units changed nothing"
                    if callable(getattr(model, "step", None)):
                        state, steps = model.initial_state(len(x)), []
                        for x_t in x.unbind(1):
                            y_t, state = model.step(x_t, state)
                            steps.append(y_t)
                        assert torch.allclose(torch.stack(steps, 1), ablated, atol=1e-4, rtol=1e-4), \
                            f"{name}: under ablate(), stepping through the inputs does not give forward's outputs"
                assert torch.equal(model(x), one), f"{name}: a nested ablate() did not restore the outer one on exit"
            assert torch.equal(model(x), intact), f"{name}: ablate() did not restore the model on exit"
        try:
            with model.ablate([(len(sizes), 0)]):
                raise AssertionError(f"{name}.ablate() accepted layer {len(sizes)} of {len(sizes)} layers")
        except UsageError:
            pass
        assert torch.equal(model(x), intact), f"{name}: a refused ablate() left units ablated"


class WithoutStep(Backbone):
    """``inner`` with its ``step`` hidden, so a model feeding outputs back runs a pass over the sequence per output:
    the reference that a backbone's stepped decoding is checked and timed against."""

    def __init__(self, inner: Backbone) -> None:
        super().__init__()
        self.inner, self.d_model = inner, inner.d_model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x)


def fixed_batch_losses(backbone: Backbone, steps: int = 30, lr: float = 1e-2) -> list[float]:
    """The training losses of ``backbone`` between an embedding of 32 tokens and a linear readout, fitted with Adam to
    one batch of 16 verification trials (8 study tokens, then 8 queries: was each query studied?), the answer read
    at the query positions; a backbone that carries the study items forward halves the first loss."""
    torch.manual_seed(0)
    embedding, readout = nn.Embedding(32, backbone.d_model), nn.Linear(backbone.d_model, 1)
    tokens = torch.randint(0, 32, (16, 16))  # B 2L
    targets = (tokens[:, 8:, None] == tokens[:, None, :8]).any(-1).float()  # B L: the query was studied
    parameters = [*backbone.parameters(), *embedding.parameters(), *readout.parameters()]
    optimizer = torch.optim.Adam(parameters, lr=lr)
    losses = []
    for _ in range(steps):
        logits = readout(backbone(embedding(tokens)))[:, 8:, 0]  # B L
        loss = nn.functional.binary_cross_entropy_with_logits(logits, targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses
