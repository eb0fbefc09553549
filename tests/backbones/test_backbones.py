"""Every registered backbone passes the contract; the registry finds them by class name."""

import re

import pytest
import torch

from primacy import registry
from primacy.backbones import Backbone
from primacy.cli import main
from primacy.errors import UsageError
from primacy.testing import check_backbone


@pytest.mark.parametrize("name", registry.names())
def test_backbone_contract(name):
    check_backbone(registry.get(name))


def test_builtins_are_registered_under_their_class_names():
    assert {"S4Backbone", "S4DBackbone", "LSTMBackbone", "TransformerBackbone"} <= set(registry.names())
    assert all(registry.get(name).__name__ == name for name in registry.names())


def test_unknown_name_suggests_close_matches():
    with pytest.raises(UsageError, match=r"backbone 'S4Dbackbone' is not registered: did you mean S4DBackbone"):
        registry.get("S4Dbackbone")


class FakeEntryPoint:
    """Stands in for an importlib.metadata entry point of some distribution."""

    def __init__(self, name: str, target: object, dist: str = "fake-plugin") -> None:
        self.name, self.value, self.group = name, f"fake_plugin:{name}", registry.GROUP
        self.dist = type("Dist", (), {"name": dist})()
        self._target = target

    def load(self) -> object:
        if isinstance(self._target, Exception):
            raise self._target
        return self._target


@pytest.fixture
def fake_plugins(monkeypatch):
    """Install a list of fake entry points (plus the real built-ins, without installed plugins) for one test."""
    from importlib.metadata import entry_points

    builtins = [ep for ep in entry_points(group=registry.GROUP) if ep.dist.name == "primacy"]

    def install(*fakes: FakeEntryPoint) -> None:
        monkeypatch.setattr(registry, "entry_points", lambda group: [*builtins, *fakes])
        registry._entry_points.cache_clear()

    yield install
    registry._entry_points.cache_clear()


class GoodBackbone(Backbone):
    """A plugin backbone for tests."""

    def __init__(self, d_model: int = 4) -> None:
        super().__init__()
        self.d_model = d_model
        self.linear = torch.nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)


def test_a_plugin_registers_by_class_name_and_is_listed_with_its_distribution(fake_plugins):
    fake_plugins(FakeEntryPoint("GoodBackbone", GoodBackbone))
    assert registry.get("GoodBackbone") is GoodBackbone
    row = next(r for r in registry.describe() if r["name"] == "GoodBackbone")
    assert row["distribution"] == "fake-plugin" and row["description"] == "A plugin backbone for tests."


def test_builtins_only_switch_ignores_plugins(fake_plugins, monkeypatch):
    monkeypatch.setenv(registry.BUILTINS_ONLY, "1")
    fake_plugins(FakeEntryPoint("GoodBackbone", GoodBackbone))
    assert "GoodBackbone" not in registry.names() and "S4Backbone" in registry.names()


def test_a_name_registered_by_two_distributions_is_refused(fake_plugins):
    fake_plugins(FakeEntryPoint("S4Backbone", GoodBackbone, dist="impostor"))
    with pytest.raises(UsageError,
                       match=r"backbone name 'S4Backbone' is registered twice: by primacy .*and by impostor"):
        registry.names()


@pytest.mark.parametrize(
    "target,message",
    [
        (ImportError("No module named 'fancy_kernels'"),
         r"'Broken' \(fake_plugin:Broken\) failed to import: No module named"),
        (torch.nn.Linear, r"'Broken' \(fake_plugin:Broken\) is not a subclass of primacy.backbones.Backbone"),
        (GoodBackbone, r"entry point 'Broken' points at class 'GoodBackbone': the names must match"),
    ],
)
def test_a_broken_plugin_is_named_and_does_not_hide_the_others(fake_plugins, target, message):
    fake_plugins(FakeEntryPoint("Broken", target))
    with pytest.raises(UsageError, match=message):
        registry.get("Broken")
    rows = {r["name"]: r for r in registry.describe()}
    assert rows["Broken"]["description"].startswith("unusable: ")
    assert rows["S4Backbone"]["description"].startswith("One S4 block")


def test_a_known_plugin_that_is_not_installed_says_what_to_install(fake_plugins):
    fake_plugins()
    with pytest.raises(UsageError, match=r"'MambaBackbone' is provided by the plugin primacy-mamba .*not installed"):
        registry.get("MambaBackbone")
    with pytest.raises(UsageError, match=r"'XLSTMBackbone' is provided by the plugin primacy-xlstm .*not installed"):
        registry.get("XLSTMBackbone")


def test_primacy_models_lists_every_backbone(capsys):
    main(["models"])
    out = capsys.readouterr().out
    for name in registry.names():
        assert name in out
    assert "Causal Transformer encoder" in out
    assert "primacy-mamba" in out and "primacy-xlstm" in out, "both bundled plugins, installed by the README's command"


class _Linear(Backbone):
    """A causal backbone that passes the contract; the broken ones below change one thing each."""

    def __init__(self, d_model: int = 4) -> None:
        super().__init__()
        self.d_model = d_model
        self.linear = torch.nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x.cumsum(1))  # B T D: a running sum, causal

    def initial_state(self, batch: int) -> torch.Tensor:
        return torch.zeros(batch, self.d_model)

    def step(self, x_t: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        state = state + x_t  # B D
        return self.linear(state), state


class _SeesTheFuture(_Linear):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x.flip(1).cumsum(1).flip(1))  # every output sums the inputs after it


class _StepsOtherwise(_Linear):
    def step(self, x_t: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.linear(x_t), state  # forgets the past that forward keeps


class _Untyped(_Linear):
    def __init__(self, d_model=4) -> None:  # noqa: ANN001 - the breach under test
        super().__init__(d_model)


@pytest.mark.parametrize("broken,message", [
    (_SeesTheFuture, "_SeesTheFuture is not causal"),
    (_StepsOtherwise, "_StepsOtherwise: stepping through the inputs does not give forward's outputs"),
    (_Untyped, "_Untyped.__init__: argument 'd_model' needs a type"),
])
def test_check_backbone_refuses_a_backbone_that_breaks_the_contract(broken, message):
    check_backbone(_Linear)  # the same backbone without the breach passes
    with pytest.raises(AssertionError, match=re.escape(message)):
        check_backbone(broken)
