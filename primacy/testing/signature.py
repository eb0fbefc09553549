"""What LightningCLI needs of every class a config names: a constructor it can validate, print and save."""

from __future__ import annotations

import inspect

from primacy import registry


def check_signature(cls: type, defaults: bool = True, without_default: tuple[str, ...] = ()) -> None:
    """Assert that ``cls.__init__`` takes typed keyword arguments, each with a default (when ``defaults``) but those
    named in ``without_default``: its own and those its ``**kwargs`` stands for, as the CLI resolves them
    (``registry.constructor_parameters``: a model's ``**optimiser`` is ``Optimiser``'s settings). No ``*args``, and no
    ``**kwargs`` the CLI cannot follow to the parameters it is handed to (it would offer none of them)."""
    own = list(inspect.signature(cls.__init__).parameters.values())[1:]
    assert not any(p.kind is p.VAR_POSITIONAL for p in own), f"{cls.__name__}: no *args"
    resolved = registry.constructor_parameters(cls)
    if any(p.kind is p.VAR_KEYWORD for p in own):
        named = {p.name for p in own}
        assert any(p.name not in named for p in resolved), (
            f"{cls.__name__}.__init__: the CLI finds no parameters behind its **kwargs: hand them to a typed callable "
            f"(e.g. Optimiser(**optimiser)) or declare them")
    empty = inspect.Parameter.empty
    for param in resolved:
        name = param.name
        assert param.annotation is not empty, f"{cls.__name__}.__init__: argument {name!r} needs a type"
        if defaults and name not in without_default:
            assert param.default is not empty, f"{cls.__name__}.__init__: argument {name!r} needs a default"
