"""Atomic writes of result files and figures: each is written under a temporary name beside its final one and
renamed into place, so a reader (or a run killed midway) sees the old file or the new one, never half of one."""

from __future__ import annotations

import csv
import functools
import io
import json
import math
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import matplotlib as mpl
import numpy as np
from matplotlib.figure import Figure


def _reserve(target: Path) -> Path:
    """Create an empty, hidden temporary file beside ``target`` with its suffix (so matplotlib and numpy infer the
    same format); O_EXCL so two writers never share one, mode 0o666 so the umask applies as for a plain write."""
    while True:
        temp = target.with_name(f".{target.name}.tmp-{secrets.token_hex(4)}{target.suffix}")
        try:
            os.close(os.open(temp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
            return temp
        except FileExistsError:
            continue


def _flush_to_disk(path: Path) -> None:
    """fsync the written bytes before the rename, so a power cut cannot leave the new name on empty content."""
    fd = os.open(path, os.O_RDWR)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path`` to write the new content to (parent directories are made).

    When the block ends normally the temporary file replaces ``path`` in one ``os.replace``; when it raises (or
    the replace fails) the temporary file is removed and ``path`` is left as it was.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    temp = _reserve(target)
    try:
        yield temp
        _flush_to_disk(temp)
        os.replace(temp, target)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


def write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically; returns the path."""
    with atomic_path(path) as temp:
        temp.write_text(text, encoding="utf-8")
    return Path(path)


def plain(value: Any) -> Any:
    """``value`` as JSON holds it: NaN and infinities become null, numpy numbers and arrays Python numbers and lists,
    tuples lists; dicts and lists recursively."""
    if isinstance(value, dict):
        return {key: plain(v) for key, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return plain(value.tolist())
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    return value


def write_json(path: str | Path, content: Any) -> Path:
    """``content`` (through ``plain``) as indented JSON to ``path`` atomically; returns the path."""
    return write_text(path, json.dumps(plain(content), indent=2, allow_nan=False) + "\n")


def write_csv(path: str | Path, rows: list[dict[str, Any]]) -> Path:
    """A table, one dict per row, to ``path`` atomically (``csv_text``); returns the path. Every CSV primacy writes
    goes through here."""
    return write_text(path, csv_text(rows))


def csv_text(rows: list[dict[str, Any]]) -> str:
    """A table, one dict per row, as CSV text, lines ending in \\n. The header is every key of the rows in the order
    first seen (a row without one has an empty cell; None is an empty cell too)."""
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=list(dict.fromkeys(key for row in rows for key in row)),
                            lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return text.getvalue()


def save_npz(path: str | Path, compressed: bool = False, **arrays: Any) -> Path:
    """``np.savez`` (``np.savez_compressed`` with ``compressed``) to ``path`` atomically; written through an open
    file, so ``path`` is used as given (numpy would append .npz to a name without it)."""
    with atomic_path(path) as temp, temp.open("wb") as f:
        (np.savez_compressed if compressed else np.savez)(f, **arrays)
    return Path(path)


def save_figure(fig: Figure, path: str | Path, **savefig_kwargs: Any) -> Path:
    """``fig.savefig`` to ``path`` atomically, in the format of the path's suffix (``format=`` overrides it; without
    either, matplotlib's default format) and under exactly that name."""
    path = Path(path)
    fmt = savefig_kwargs.pop("format", None) or path.suffix.removeprefix(".") or mpl.rcParams["savefig.format"]
    with atomic_path(path) as temp:
        fig.savefig(temp, format=fmt, **savefig_kwargs)
    return path


def __getattr__(name: str) -> Any:
    if name == "AtomicCheckpointIO":
        return _atomic_checkpoint_io()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@functools.cache
def _atomic_checkpoint_io() -> type:
    """``AtomicCheckpointIO`` (what every run's ``trainer.plugins`` names), made when first asked for: it extends a
    Lightning class, and reading and writing files should not import Lightning (seconds)."""
    from lightning.pytorch.plugins.io import TorchCheckpointIO

    class AtomicCheckpointIO(TorchCheckpointIO):
        """Lightning's checkpoint writer with the temporary file beside the checkpoint. Lightning's own writes a
        temporary file in $TMPDIR and moves it into place, which is a copy, not a rename, when $TMPDIR is on another
        filesystem (a node-local /tmp on a cluster): a job killed during the copy would leave a truncated last.ckpt."""

        def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
            with atomic_path(path) as temp:
                super().save_checkpoint(checkpoint, temp, storage_options)

    AtomicCheckpointIO.__qualname__ = "AtomicCheckpointIO"  # pickled and named in configs as primacy.files.<name>
    return AtomicCheckpointIO
