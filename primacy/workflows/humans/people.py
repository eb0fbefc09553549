"""Human free-recall data, from the datasets psifr ships (an optional extra: psifr is GPL-3), as the tensors the
model's analyses take: per person, the study lists and the outputs in order."""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
import torch

from primacy.analysis.behaviour.free_recall import PADDING, PSIFR_COLUMNS
from primacy.checks import one_of
from primacy.errors import UsageError

INSTALL = "pip install -e '.[humans]'"


@dataclass(frozen=True)
class Dataset:
    name: str  # as primacy names it (the command line's --dataset), or a file's stem
    psifr_name: str  # psifr.fr.sample_data's ("" for a file)
    list_length: int
    reference: str
    path: Path | None = None  # a user's file in psifr's long format (``from_file``)


DATASETS = {d.name: d for d in (
    Dataset("Morton2013", "Morton2013", 24, "Morton et al. (2013): 40 people, 48 lists of 24 words"),
    Dataset("peers", "peers_notask", 16,
            "PEERS experiment 1, no-task lists (Kahana et al.): 126 people, 28 lists of 16 words"),
)}


@dataclass(frozen=True)
class Person:
    subject: Any  # the dataset's subject id
    study: torch.Tensor  # lists x L: item ids, distinct within a list
    recalls: torch.Tensor  # lists x R: output item ids in order, PADDING after the last output


def dataset(name: str) -> Dataset:
    return DATASETS[one_of("dataset", name, DATASETS)]


def dataset_for_length(n_items: int) -> Dataset:
    """The dataset whose lists have ``n_items`` items."""
    for candidate in DATASETS.values():
        if candidate.list_length == n_items:
            return candidate
    lengths = ", ".join(f"{d.name} {d.list_length}" for d in DATASETS.values())
    raise UsageError(f"n_items={n_items}: no human dataset has lists of that length ({lengths})")


def from_file(path: str | Path) -> tuple[Dataset, list[Person]]:
    """A user's free-recall file (``read_people``) as a dataset named after the file, and its people."""
    persons = read_people(path)
    n_lists = sorted({len(p.study) for p in persons})
    length = persons[0].study.shape[1]
    lists = f"{n_lists[0]}" if len(n_lists) == 1 else f"{n_lists[0]}-{n_lists[-1]}"
    reference = f"{Path(path).name}: {len(persons)} people, {lists} lists of {length} items"
    return Dataset(Path(path).stem, "", length, reference, Path(path)), persons


def load(name: str) -> list[Person]:
    """Every person of dataset ``name`` (psifr's sample data), in the dataset's subject order."""
    info = dataset(name)
    try:
        from psifr import fr
    except ImportError:
        raise UsageError(f"dataset={name} comes with psifr, which is not installed: {INSTALL}") from None
    return people(fr.sample_data(info.psifr_name), info.list_length)


FORMAT = "psifr's long format: a header with columns " + ", ".join(PSIFR_COLUMNS) + (
    ", then one row per study event and per output")


def people(raw: Any, list_length: int) -> list[Person]:
    """A psifr raw table (a pandas DataFrame with columns subject, list, trial_type 'study' | 'recall', position,
    item; one row per study event and per output) as one Person per subject, in the order subjects first appear
    (``read_people`` of the same table written as a file)."""
    columns = [raw[name].tolist() for name in PSIFR_COLUMNS]
    rows = ((f"row {index + 1}", *values) for index, values in enumerate(zip(*columns)))
    return _people(rows, "the dataset", list_length)


def read_people(path: str | Path) -> list[Person]:
    """The people of a free-recall file in psifr's long format (what a run's results/free_recall.csv is and what
    ``psifr.fr.sample_data`` holds): a header with at least the columns subject, list, trial_type ('study' or
    'recall'), position (1-based: the study position of a study event, the output position of an output) and item,
    then one row per event, in any order. Every list has the same number of items (the first list's), studies each
    once, and numbers its study and output positions 1, 2, ...; an output of an item the list did not study is an
    intrusion, one said twice a repetition. A row that breaks a rule is a UsageError naming its line and column."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"data={path} does not exist: give a free-recall file in {FORMAT}")
    try:
        with path.open(newline="", encoding="utf-8-sig") as f:
            table = csv.reader(f)
            header = next(table, None)
            if not header:
                raise UsageError(f"data={path} is empty: give a free-recall file in {FORMAT}")
            missing = [name for name in PSIFR_COLUMNS if name not in header]
            if missing:
                raise UsageError(f"data={path} has no column {', '.join(missing)} (its header: {', '.join(header)}): "
                                 f"give a file in {FORMAT}")
            index = [header.index(name) for name in PSIFR_COLUMNS]
            rows = []
            for line, row in enumerate(table, start=2):
                if len(row) != len(header):
                    raise UsageError(f"{path} line {line} has {len(row)} fields and the header {len(header)}")
                rows.append((f"line {line}", *(row[i] for i in index)))
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise UsageError(f"data={path} cannot be read ({type(err).__name__}: {err}): give a text file in "
                         f"{FORMAT}") from None
    return _people(rows, str(path), None)


def _people(rows: Iterable[tuple[str, Any, Any, Any, Any, Any]], source: str, list_length: int | None) -> list[Person]:
    """One Person per subject from rows (where, subject, list, trial_type, position, item); ``where`` names the row in
    errors. Lists keep the order they first appear in within their subject; items become integer ids shared by all
    rows (an item's name is its text), so an intrusion or a repetition is scored as psifr scores it."""
    lists: dict[tuple[str, str], dict[str, dict[int, tuple[int, str]]]] = {}
    items: dict[str, int] = {}
    subjects: dict[str, Any] = {}  # the id as text -> as the table has it
    for where, subject, list_id, trial_type, position, item in rows:
        subjects.setdefault(_text(subject), subject)
        at = f"{source} {where}"
        subject, list_id, item = (_text(v) for v in (subject, list_id, item))
        for column, value in (("subject", subject), ("list", list_id), ("item", item)):
            if not value:
                _bad_cell(at, column, value, "is empty: every row names its " + column)
        if trial_type not in ("study", "recall"):
            _bad_cell(at, "trial_type", trial_type, "is neither 'study' nor 'recall'")
        number = _position(position)
        if number is None:
            _bad_cell(at, "position", position, "is not a whole number from 1")
        events = lists.setdefault((subject, list_id), {"study": {}, "recall": {}})[trial_type]
        if number in events:
            _bad_cell(at, "position", position, f"is the {trial_type} position of {events[number][1]} too (subject "
                      f"{subject}, list {list_id}): each position holds one event")
        events[number] = (items.setdefault(item, len(items)), where)
    if not lists:
        raise UsageError(f"{source} has no rows: give one row per study event and per output")
    studies, outputs = [], []
    for (subject, list_id), events in lists.items():
        name = f"subject {subject}, list {list_id}"
        study, recall = events["study"], events["recall"]
        if not study:
            raise UsageError(f"{source} {next(iter(recall.values()))[1]}: {name} has outputs but no study rows")
        length = list_length or (len(studies[0]) if studies else len(study))
        _check_numbering(study, source, name, "study")
        _check_numbering(recall, source, name, "recall")
        if len(study) != length:
            raise UsageError(f"{source} {study[max(study)][1]}: {name} studies {len(study)} items and the "
                             f"{'dataset' if list_length else 'first list'} {length}: every list has the same length")
        ids = [study[i][0] for i in range(1, length + 1)]
        if len(set(ids)) != length:
            repeated = next(i for i in range(1, length + 1) if ids.index(study[i][0]) != i - 1)
            raise UsageError(f"{source} {study[repeated][1]}: {name} studies the same item twice; items within a list "
                             "are distinct")
        studies.append(ids)
        outputs.append([recall[r][0] for r in range(1, len(recall) + 1)])
    width = max(1, max(map(len, outputs)))
    recalls = np.full((len(outputs), width), PADDING, dtype=np.int64)
    for row, said in enumerate(outputs):
        recalls[row, : len(said)] = said
    rank = {subject: index for index, subject in enumerate(subjects)}
    owner = np.array([rank[subject] for subject, _ in lists])
    study = np.array(studies, dtype=np.int64)
    return [Person(original, torch.from_numpy(study[owner == index]),
                   torch.from_numpy(_trim(recalls[owner == index])))
            for index, original in enumerate(subjects.values())]


def _bad_cell(at: str, column: str, value: Any, rule: str) -> NoReturn:
    """A UsageError naming the row (``at``: the file and its line, or the table and its row), column and value."""
    raise UsageError(f"{at}, column {column}: {value!r} {rule}")


def _text(value: Any) -> str:
    """A cell as text: a whole number read as a float by pandas (3.0) is written as one (3); NaN is empty."""
    if isinstance(value, float):
        return "" if math.isnan(value) else str(int(value)) if value.is_integer() else str(value)
    return str(value).strip()


def _position(value: Any) -> int | None:
    """A position cell as a number from 1, else None."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return int(number) if number.is_integer() and number >= 1 else None


def _check_numbering(events: dict[int, tuple[int, str]], source: str, name: str, kind: str) -> None:
    """A list's study (or output) positions are 1, 2, ..., n without a gap."""
    if events and max(events) != len(events):
        gap = next(i for i in range(1, max(events) + 1) if i not in events)
        after = min(i for i in events if i > gap)
        raise UsageError(f"{source} {events[after][1]}: {name} has {kind} position {after} but no {gap}: number them "
                         "1, 2, ... without a gap")


def _trim(recalls: np.ndarray) -> np.ndarray:
    """A person's recalls without the padding columns no list of theirs reaches (at least one column)."""
    used = (recalls != PADDING).any(axis=0)
    width = max(1, int(np.flatnonzero(used).max()) + 1) if used.any() else 1
    return recalls[:, :width]
