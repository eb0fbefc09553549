"""Checks of user settings made before anything heavy is built: each failure is one UsageError naming the setting."""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from primacy.errors import UsageError


def positive(**values: int) -> None:
    """Every value is at least 1."""
    for name, value in values.items():
        if value < 1:
            raise UsageError(f"{name}={value} is invalid: it must be at least 1")


def non_negative(**values: int) -> None:
    """Every value is at least 0."""
    for name, value in values.items():
        if value < 0:
            raise UsageError(f"{name}={value} is invalid: it must be at least 0")


def one_of(name: str, value: Any, allowed: Iterable[Any]) -> Any:
    """``value`` if it is one of ``allowed``; otherwise a UsageError naming the setting and every allowed value."""
    allowed = list(allowed)
    if value not in allowed:
        raise UsageError(f"{name}={value!r} is unknown: choose one of {', '.join(repr(a) for a in allowed)}")
    return value


def finite(**values: float) -> None:
    """Every value is a finite number (not NaN or infinite)."""
    for name, value in values.items():
        if not math.isfinite(value):
            raise UsageError(f"{name}={value} is invalid: it must be a finite number")


def memory_bytes() -> int:
    """This machine's physical memory."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def fits_in_memory(what: str, nbytes: int, **settings: int) -> None:
    """Refuse settings whose ``what`` would need more than this machine's memory, before allocating it."""
    available = memory_bytes()
    if nbytes > available:
        named = ", ".join(f"{k}={v}" for k, v in settings.items())
        verb = "needs" if len(settings) == 1 else "need"
        raise UsageError(f"{named} {verb} {nbytes / 2**30:.3g} GiB for {what}, more than the "
                         f"{available / 2**30:.3g} GiB of memory of this machine: lower them")


def writable_directory(name: str, path: str | Path) -> Path:
    """``path`` is a directory that exists or can be made, and can be written to; checked before any work is done,
    without creating anything."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise UsageError(f"{name}={path} is a file: give a directory (an existing file is never replaced)")
    _check_writable(name, path, path)
    return path


def writable_file(name: str, path: str | Path) -> Path:
    """``path`` can be written as a file (its directory exists or can be made, and is writable)."""
    path = Path(path)
    if path.is_dir():
        raise UsageError(f"{name}={path} is a directory: give a file name")
    _check_writable(name, path, path.parent)
    return path


def _check_writable(name: str, path: Path, directory: Path) -> None:
    existing = directory
    while not existing.exists():  # the nearest ancestor that exists
        existing = existing.parent
    if not existing.is_dir():
        raise UsageError(f"{name}={path} lies below the file {existing}, an existing file, not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"{name}={path} cannot be written: {existing} is read-only for this user")


def figure_formats(formats: list[str]) -> None:
    """Every format is one matplotlib can write."""
    from matplotlib.backend_bases import FigureCanvasBase

    supported = FigureCanvasBase.get_supported_filetypes()
    unknown = [f for f in formats if f not in supported]
    if unknown:
        raise UsageError(f"formats={unknown} are unknown: choose among {', '.join(sorted(supported))}")


def figure_path(name: str, path: str | Path) -> Path:
    """``path`` can be written as a figure: a writable place and a suffix matplotlib knows."""
    path = writable_file(name, path)
    figure_formats([path.suffix.removeprefix(".")])
    return path
