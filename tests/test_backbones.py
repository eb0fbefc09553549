"""Every registered backbone passes the contract; the registry finds them by class name."""

import pytest

from primacy import registry
from primacy.errors import UsageError
from primacy.testing import check_backbone


@pytest.mark.parametrize("name", registry.names())
def test_backbone_contract(name):
    check_backbone(registry.get(name))


def test_builtins_are_registered_under_their_class_names():
    assert {"S4DBackbone", "LSTMBackbone"} <= set(registry.names())
    assert all(registry.get(name).__name__ == name for name in registry.names())


def test_unknown_name_suggests_close_matches():
    with pytest.raises(UsageError, match=r"backbone 'S4Dbackbone' is not registered: did you mean S4DBackbone"):
        registry.get("S4Dbackbone")
