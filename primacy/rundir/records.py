"""Numbers read from result files by a dotted key (``primacy claims`` reads the docs' findings with them): a JSON file
(summary.json, logs/state.json), each row of a ``.csv`` table, or the arrays of an ``.npz`` file.

A key's dots index into dicts and lists (``serial_position_curve.3``; a negative index counts from the end); a last
part ``a:b`` is the mean of that slice (``serial_position_curve.0:16``); a part ``*`` takes every entry of a list
(``top_induction_heads.*.beta_enc``: each head's). An ``.npz`` file is a record of arrays: the key's first part names
an array, an index picks along its first axis (``dt.-1``: the last row), ``a:b`` averages rows ``a`` to ``b``, and
what the key reaches gives every element of it as a value (``dt``: each step's each channel's, flattened).
"""

from __future__ import annotations

import csv
import functools
import glob
import json
from pathlib import Path
from typing import Any

import numpy as np

from primacy.errors import UsageError

_ARRAY = (np.ndarray, np.generic)


def load(file: Path) -> Any:
    """A JSON file, a table's rows (.csv) or an .npz file's arrays (a dict by name), read once while it is unchanged
    (claims of one run read it many times)."""
    if not file.is_file():
        raise UsageError(f"{file} does not exist")
    return _parsed(file, file.stat().st_mtime_ns)


def files(run: Path, name: str) -> list[Path]:
    """A run's ``file``: the one file it names, or each file a glob of it finds (``seed*.json``)."""
    if not glob.has_magic(name):
        return [run / name]
    found = sorted(Path(path) for path in glob.glob(str(run / name)) if Path(path).is_file())
    if not found:
        raise UsageError(f"file={name!r} matches no file in {run}")
    return found


def numbers(record: Any, key: str, file: str) -> list[float]:
    """``key`` of a record (a JSON file, a table's row, an .npz file's arrays): one number, one for each entry of a
    list where a part is ``*``, or each element of the array it reaches. A key that is itself a name in the record (a
    table's column ``dt_share_below_0.03``) is that entry, not a dotted path."""
    if isinstance(record, dict) and key in record:
        return _values(record[key], key, file)
    parts = key.split(".")
    if "*" not in parts:
        return _values(_entry(record, parts, key, file), key, file)
    at = parts.index("*")
    entries = _entry(record, parts[:at], key, file)
    if not isinstance(entries, (list, np.ndarray)) or not len(entries):
        raise UsageError(f"key={key!r}: {'.'.join(parts[:at]) or 'the record'} of {file} is not a list of entries")
    rest = ".".join(parts[at + 1:])
    return [number for entry in entries
            for number in (numbers(entry, rest, file) if rest else _values(entry, key, file))]


def _entry(record: Any, parts: list[str], key: str, file: str) -> Any:
    """What the dotted ``parts`` of ``key`` reach in a record; a last part ``a:b`` is the mean of that slice of a list,
    or of an array along its first axis. A name with dots of its own (a group labelled ``ZOH-0.3-1``) is found as the
    shortest run of parts that a mapping holds."""
    value: Any = record
    parts = list(parts)
    while parts:
        part = parts.pop(0)
        if isinstance(value, dict):
            while part not in value and parts:
                part = f"{part}.{parts.pop(0)}"
        try:
            if isinstance(value, (list, np.ndarray)) and ":" in part:
                start, stop = (int(bound) if bound else None for bound in part.split(":"))
                rows = value[start:stop]
                if not len(rows):
                    raise IndexError(part)
                value = (rows.astype(float).mean(axis=0) if isinstance(rows, np.ndarray)
                         else sum(float("nan") if entry is None else entry for entry in rows) / len(rows))
            else:
                value = value[int(part)] if isinstance(value, (list, np.ndarray)) else value[part]
        except (KeyError, IndexError, ValueError, TypeError, ZeroDivisionError):
            raise UsageError(f"key={key!r} is not in {file}") from None
    return value


def _values(value: Any, key: str, file: str) -> list[float]:
    """The numbers of what ``key`` reached: an array's every element, or one value."""
    if not isinstance(value, _ARRAY):
        return [_number(value, key, file)]
    if np.asarray(value).dtype.kind not in "iuf":
        raise UsageError(f"key={key!r} of {file} is an array of {np.asarray(value).dtype}, not of numbers")
    return [float(number) for number in np.ravel(value)]


def _number(value: Any, key: str, file: str) -> float:
    """One value that ``key`` reached, as a number (missing: NaN)."""
    if value is None or value == "":
        return float("nan")
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            raise UsageError(f"key={key!r} of {file} is {value!r}, not a number") from None
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise UsageError(f"key={key!r} of {file} is {type(value).__name__}, not a number")
    return float(value)


@functools.lru_cache(maxsize=4096)
def _parsed(file: Path, mtime_ns: int) -> Any:
    if file.suffix == ".csv":
        with open(file, newline="") as f:
            return list(csv.DictReader(f))
    if file.suffix == ".npz":
        try:
            with np.load(file) as arrays:
                return {name: arrays[name] for name in arrays.files}
        except (OSError, ValueError) as error:
            raise UsageError(f"{file} cannot be read as .npz arrays: {error}") from None
    return json.loads(file.read_text())
