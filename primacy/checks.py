"""Checks of user settings made before anything heavy is built: each failure is one UsageError naming the setting."""

from __future__ import annotations

import math
import os
from pathlib import Path

from primacy.errors import UsageError


def positive(**values: int) -> None:
    """Every value is at least 1."""
    for name, value in values.items():
        if value < 1:
            raise UsageError(f"{name}={value} is invalid: it must be at least 1")


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
        raise UsageError(f"{named} need {nbytes / 2**30:.3g} GiB for {what}, more than the "
                         f"{available / 2**30:.3g} GiB of memory of this machine: lower them")


def writable_directory(name: str, path: str | Path) -> Path:
    """``path`` is a directory that exists or can be made, and can be written to; checked before any work is done,
    without creating anything."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise UsageError(f"{name}={path} is a file: give a directory")
    existing = path
    while not existing.exists():  # the nearest ancestor that exists
        existing = existing.parent
    if not existing.is_dir():
        raise UsageError(f"{name}={path} lies below the file {existing}: give a directory path")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"{name}={path} cannot be written: {existing} is read-only for this user")
    return path
