"""What LightningCLI needs of every class a config names: a constructor it can validate, print and save."""

from __future__ import annotations

import inspect


def check_signature(cls: type, defaults: bool = True, without_default: tuple[str, ...] = ()) -> None:
    """Assert that ``cls.__init__`` takes typed keyword arguments without ``*args``/``**kwargs``, each with a default
    (when ``defaults``) but those named in ``without_default``."""
    for name, param in inspect.signature(cls.__init__).parameters.items():
        if name == "self":
            continue
        assert param.kind not in (param.VAR_POSITIONAL, param.VAR_KEYWORD), f"{cls.__name__}: no *args/**kwargs"
        assert param.annotation is not param.empty, f"{cls.__name__}.__init__: argument {name!r} needs a type"
        if defaults and name not in without_default:
            assert param.default is not param.empty, f"{cls.__name__}.__init__: argument {name!r} needs a default"
