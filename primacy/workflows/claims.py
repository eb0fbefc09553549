"""The findings the docs state, written once as data beside the results they read, and checked against them.

A claims file (``results/<study>/claims.yaml``) lists sentences of a doc and what each one says of the runs beside it:

```yaml
doc: docs/atlas.md                 # where its sentences are, from the repository's root (the folder holding results/)
tables: [atlas.md]                 # generated files the doc holds as written (from this file's folder; another
                                   # doc's: {file: weights.md, doc: docs/influence.md})
claims:
  - says: "**RetNet keeps the last pairs** (early − late −0.107 ± 0.013"   # the doc's words, line breaks aside
    of: RetNet/d_key=8/seed*       # the runs: folders (a glob or a list of them) from this file's folder
    key: early_minus_late          # of each run's results/summary.json (``file``: another; .3 indexes, .0:8 averages,
                                   # .*. takes every entry of a list: primacy.rundir.records)
    is: negative                   # positive, negative, neither; above, below, same (with ``than``); value
    value: "−0.107 ± 0.013"        # how ``says`` writes the estimate: it must round to it
```

``is`` applies the one rule of ``primacy.analysis.evidence`` to the runs' mean ± SE (``above``/``below``/``same``: to
its difference with each group in ``than``, a list of run globs, or of ``{of, key, file}``). ``value`` checks the
numbers the sentence gives: "A ± B" the mean and SE, "A" the statistic alone, "A to B" ("A–B", "A-B") the smallest and
the largest value (``stat: range``); ``stat`` is ``mean`` (default), ``sum``, ``min``, ``max``, ``range``, ``median``
or ``count``; ``unit`` (``min``, ``h``) divides seconds, or (``%``) writes a rate as a percentage. ``n`` states how
many values there must be (runs, files, rows, elements). ``stat: count`` counts the values in ``within``: one closed
interval ``[low, high]`` or a list of them (``[[0, 0.001], [0.999, 1]]``: at 0 or 1; ``.inf`` is unbounded), so "20 of
40" is ``value: "20", n: 40``; ``within`` a mapping of keys to intervals counts the records (rows, files) in which
every value of each key falls in its own (``{induction: [0.5, .inf], cmr_distance: [0, 0.5]}``, naming ``key``).
``file`` may be a glob (``seed*.json``: one value per file it finds). ``minus`` (runs, or a mapping of of, key, file,
where; what it leaves out is the claim's) makes each value a paired difference: the claim's value less the one in the
same place of the other, or less the other's one value; where only its key differs, within each record (seed by seed:
"ablation costs 1.37 units" is the ablated score less the intact one). A ``.csv`` ``file`` gives one value per row
that ``where`` selects (``where: {curve: spc, x: [7, 8]}``), and a row that is a mean already (people's curves) names
its SE and count columns (``se: se, count: members``). An ``.npz`` ``file``'s ``key`` names an array (``dt``;
``dt.-1`` its last row, ``dt.0:8`` the mean of rows 0-7) and gives each element of what it reaches as a value (a step
× channel array: every channel of every step), for any ``stat``. A file that cannot be read as such is a one-line
usage error; a claim that does not hold (or whose sentence is no longer in its doc) is a failure, reported with its
value, SE and n.
"""

from __future__ import annotations

import functools
import glob
import re
import statistics
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from primacy.analysis.evidence import EFFECT_SE, WORDS, Estimate, compare, word
from primacy.errors import UsageError
from primacy.rundir import records
from primacy.rundir.layout import RunDir

CLAIMS_FILE = "claims.yaml"
PUBLISHED = "results"  # the repository's folder of published runs (results/README.md), not a run's results/
SUMMARY = RunDir(Path()).summary.as_posix()  # a run's summary, from the run's folder
COMPARISONS = {"above": "positive", "below": "negative", "same": "neither"}
KINDS = (*WORDS, *COMPARISONS, "value")
STATS = ("mean", "sum", "min", "max", "range", "median", "count")
UNITS = {"s": 1.0, "min": 60.0, "h": 3600.0, "%": 0.01}  # what a value is divided by: 0.08 is "8 %"
_QUANTITY = {"of", "key", "file", "where", "se", "count"}
_FIELDS = {"says", "doc", "is", "than", "value", "stat", "within", "unit", "n", "minus", *_QUANTITY}
_NUMBER = re.compile(r"(?:(?<![\d.])[+\-−])?\d[\d,]*(?:\.\d+)?")  # "0.6-0.7": a range, not −0.7


@dataclass(frozen=True)
class Quantity:
    """One number of every run the globs ``of`` find (``**`` spans folders): ``key`` of its ``file``. A ``.csv`` file
    gives the ``key`` column of each row that ``where`` selects (column: value, or a list of values); a row that holds
    a mean already names its standard error's and its count's columns (``se``, ``count``)."""

    of: tuple[str, ...]
    key: str
    file: str = SUMMARY
    where: tuple[tuple[str, tuple[str, ...]], ...] = ()
    se: str | None = None
    count: str | None = None
    minus: Quantity | None = None  # a paired difference: each value less the same place's value of another quantity

    def rows(self, folder: Path) -> list[dict[str, Any]]:
        """Each value's record: a run's JSON file, or each row of a run's table that ``where`` selects."""
        runs = sorted({run for pattern in self.of for run in _folders(str(folder / pattern))})
        if not runs:
            raise UsageError(f"of={_name(self.of)!r} matches no run folder under {folder}")
        files = [file for run in runs for file in records.files(run, self.file)]
        if not self.file.endswith(".csv"):
            return [records.load(file) for file in files]
        found = [row for file in files for row in records.load(file)
                 if all(row.get(column) in allowed for column, allowed in self.where)]
        if not found:
            raise UsageError(f"no row of {self.file} in {_name(self.of)!r} has {dict(self.where)}")
        return found

    def values(self, folder: Path, unit: float) -> list[float]:
        rows = self.rows(folder)
        if self.minus is None:
            return [number / unit for row in rows for number in records.numbers(row, self.key, self.file)]
        other = self.minus
        if (other.of, other.file, other.where) == (self.of, self.file, self.where):  # the same records: within each
            return [value / unit for row in rows for value in _paired(
                records.numbers(row, self.key, self.file), records.numbers(row, other.key, self.file), other)]
        own = [number / unit for row in rows for number in records.numbers(row, self.key, self.file)]
        return _paired(own, other.values(folder, unit), other)

    def estimate(self, folder: Path, unit: float) -> Estimate:
        """Mean ± SE over the values, or the one row's own mean, SE and count when it names them."""
        if self.se is None:
            return Estimate.of(self.values(folder, unit))
        if self.minus is not None:
            raise UsageError(f"se={self.se!r} reads one row's own SE, which a paired difference (minus) has not")
        rows = self.rows(folder)
        if len(rows) != 1:
            raise UsageError(f"se={self.se!r} reads one row's own SE, but {len(rows)} rows match")
        if "*" in f"{self.key}.{self.se}".split("."):
            raise UsageError(f"se={self.se!r} reads one row's own SE: key={self.key!r} must name one number, not *")
        (mean,), (se,) = (records.numbers(rows[0], name, self.file) for name in (self.key, self.se))
        n = int(records.numbers(rows[0], self.count, self.file)[0]) if self.count else 0
        return Estimate(mean / unit, se / unit, n)


@dataclass(frozen=True)
class Outcome:
    """A checked claim: where it is, what it says, and why it fails (None when it holds)."""

    where: str
    says: str
    measured: str
    failure: str | None

    def line(self) -> str:
        mark = "ok  " if self.failure is None else "FAIL"
        tail = "" if self.failure is None else f": {self.failure}"
        return f"{mark} {self.where}: {_short(self.says)} [{self.measured}]{tail}"


def find(root: str | Path) -> list[Path]:
    """Every claims file under ``root``/results."""
    files = sorted(Path(root, PUBLISHED).rglob(CLAIMS_FILE))
    if not files:
        raise UsageError(f"--root {str(root)!r} has no results/**/{CLAIMS_FILE}: give the repository's root")
    return files


def check(path: str | Path, root: str | Path) -> list[Outcome]:
    """Every claim and table of one claims file, checked against the runs beside it and the docs under ``root``."""
    path = Path(path)
    spec = _read(path)
    folder, root, docs = path.parent, Path(root), {}

    def doc_text(name: str) -> str:
        if name not in docs:
            file = root / name
            if not file.is_file():
                raise UsageError(f"{path}: doc={name!r} is not a file under --root {str(root)!r}")
            docs[name] = _flat(file.read_text())
        return docs[name]

    outcomes = []
    for entry in spec.get("tables", []):
        name, doc = (entry["file"], entry["doc"]) if isinstance(entry, dict) else (entry, spec["doc"])
        table = folder / name
        if not table.is_file():
            raise UsageError(f"{path}: table {name!r} is not a file in {folder}")
        held = _flat(table.read_text().strip()) in doc_text(doc)
        outcomes.append(Outcome(doc, f"the table {folder / name}", "generated",
                                None if held else f"{doc} does not hold it as written: draw it again and copy it in"))
    for i, claim in enumerate(spec["claims"]):
        where = f"{claim.get('doc', spec['doc'])} ({path.name} #{i + 1})"
        try:
            measured, failure = _judge(claim, folder)
        except UsageError as error:
            raise UsageError(f"{path}, claim {i + 1}: {error}") from None
        if failure is None and _flat(claim["says"]) not in doc_text(claim.get("doc", spec["doc"])):
            failure = "the doc no longer says this: change the claim with the sentence"
        outcomes.append(Outcome(where, claim["says"], measured, failure))
    return outcomes


def check_all(paths: list[Path], root: str | Path) -> Iterator[Outcome]:
    for path in paths:
        yield from check(path, root)


def _judge(claim: dict, folder: Path) -> tuple[str, str | None]:
    """What the runs measure for one claim (as text) and why the claim fails, None when it holds."""
    stat, unit, quantity = claim.get("stat", "mean"), UNITS[claim.get("unit", "s")], _quantity(claim)
    if stat != "mean":
        values = [] if stat == "count" else quantity.values(folder, unit)
        counted, total = _count(claim, quantity, folder, unit) if stat == "count" else (0, len(values))
        if "n" in claim and total != claim["n"]:
            return f"{total} values", f"n={claim['n']} expected, {total} found under {_name(claim)!r}"
        if stat == "count":
            return f"count {counted} of {total}", _value_failure(claim, (counted,))
        low, high = min(values), max(values)
        measured = {"sum": sum(values), "min": low, "max": high, "median": statistics.median(values)}.get(stat)
        text = f"{stat} {low:.4g}–{high:.4g}" if stat == "range" else f"{stat} {measured:.4g}"
        return text, _value_failure(claim, (low, high) if stat == "range" else (measured,))
    estimate = quantity.estimate(folder, unit)
    if "n" in claim and estimate.n != claim["n"]:
        return f"n = {estimate.n}", f"n={claim['n']} expected, {estimate.n} found under {_name(claim)!r}"
    text = f"{claim['key']} {estimate}"
    kind = claim["is"]
    if kind in WORDS:
        said = word(estimate)
        if said != kind:
            return text, _word_failure(kind, said, estimate)
    elif kind in COMPARISONS:
        for other in claim["than"]:
            theirs = _quantity(other, claim).estimate(folder, unit)
            said = compare(estimate, theirs)
            if said != COMPARISONS[kind]:
                wanted = {"above": "above", "below": "below", "same": "the same as"}[kind]
                return (f"{text} against {theirs}",
                        f"not {wanted} {_name(other)}: difference {estimate.minus(theirs)} is {said or 'undefined'}")
    return text, _value_failure(claim, (estimate.mean, estimate.se))


def _paired(values: list[float], others: list[float], other: Quantity) -> list[float]:
    """Each value less the same place's other value, or less the one other value there is."""
    if len(others) == 1:
        others = others * len(values)
    if len(others) != len(values):
        raise UsageError(f"minus={_name(other.of)!r} (key {other.key!r}) gives {len(others)} values and the claim "
                         f"{len(values)}: a paired difference needs one of each, in the same order, or one in all")
    return [value - that for value, that in zip(values, others)]


def _count(claim: dict, quantity: Quantity, folder: Path, unit: float) -> tuple[int, int]:
    """How many of the values fall in ``within``'s intervals, of how many; ``within`` a mapping of keys: how many of
    the records (rows, files) have every value of each key in its own intervals."""
    within = claim["within"]
    if not isinstance(within, dict):
        values = quantity.values(folder, unit)
        return sum(_inside(value, within) for value in values), len(values)
    held = [all(_inside(number / unit, intervals) for key, intervals in within.items()
                for number in records.numbers(row, key, quantity.file)) for row in quantity.rows(folder)]
    return sum(held), len(held)


def _inside(value: float, intervals: list) -> bool:
    return any(low <= value <= high for low, high in (intervals if isinstance(intervals[0], list) else [intervals]))


def _intervals(within: Any) -> bool:
    """Whether ``within`` is one [low, high] interval of numbers or a list of them."""
    def interval(pair: Any) -> bool:
        return (isinstance(pair, list) and len(pair) == 2 and all(isinstance(bound, (int, float)) and not
                isinstance(bound, bool) for bound in pair) and pair[0] <= pair[1])
    return interval(within) or (isinstance(within, list) and bool(within) and all(map(interval, within)))


def _word_failure(kind: str, said: str | None, estimate: Estimate) -> str:
    if said is None:
        if estimate.n == 1:
            return f"one run has no SE: nothing may be said of it (claimed {kind})"
        return f"the runs do not define it (mean {estimate.mean}, SE {estimate.se}; claimed {kind})"
    rule = f"|mean| {'<' if kind == 'neither' else '>='} {EFFECT_SE:g} SE"
    return f"{said}, not {kind} (needs {rule}: |{estimate.mean:.4g}| against {EFFECT_SE:g} × {estimate.se:.4g})"


def _value_failure(claim: dict, measured: tuple[float | None, ...]) -> str | None:
    """Whether the numbers of ``value`` are the measured ones rounded as written (None when they are, or when there is
    no ``value``)."""
    if "value" not in claim:
        return None
    written = str(claim["value"])
    if _flat(written) not in _flat(claim["says"]):
        return f"value {written!r} is not in the sentence"
    numbers = _NUMBER.findall(written)
    for text, number in zip(numbers, measured):
        if number is None or not _rounds_to(number, text):
            return f"the sentence writes {text}, the runs give {number:.6g}"
    return None


def _rounds_to(number: float, text: str) -> bool:
    plain = text.replace(",", "").replace("−", "-").lstrip("+")
    digits = len(plain.split(".")[1]) if "." in plain else 0
    return abs(number - float(plain)) <= 0.5 * 10.0**-digits + 1e-9


def _quantity(spec: Any, parent: dict | None = None) -> Quantity:
    """A claim's own runs, or one entry of its ``than``: globs (the claim's key, file and rows) or a mapping of its
    own (of, key, file, where, se, count; what it leaves out is the claim's)."""
    own = spec if isinstance(spec, dict) else {"of": spec}
    merged = {**{name: value for name, value in (parent or {}).items() if name in _QUANTITY}, **own}
    where = merged.get("where") or {}
    if not isinstance(where, dict):
        raise UsageError(f"where={where!r} must map columns to a value or a list of values")
    rows = tuple((str(column), tuple(str(v) for v in (value if isinstance(value, list) else [value])))
                 for column, value in where.items())
    minus = own.get("minus")
    if minus is not None and not isinstance(minus, (str, list, dict)):
        raise UsageError(f"minus={minus!r} must be runs (a glob or a list of them) or a mapping of of, key, file, "
                         "where")
    return Quantity(_globs(merged["of"]), merged["key"], merged.get("file", SUMMARY), rows, merged.get("se"),
                    merged.get("count"), None if minus is None else _quantity(minus, merged))


def _globs(of: str | list[str]) -> tuple[str, ...]:
    return (of,) if isinstance(of, str) else tuple(of)


def _name(spec: Any) -> str:
    of = spec["of"] if isinstance(spec, dict) else spec
    return of if isinstance(of, str) else ", ".join(of)


@functools.lru_cache(maxsize=1024)
def _folders(pattern: str) -> tuple[Path, ...]:
    """The folders a glob finds (many claims name the same runs; a ``**`` glob walks the whole tree)."""
    return tuple(Path(path) for path in glob.glob(pattern, recursive=True) if Path(path).is_dir())


def _read(path: Path) -> dict:
    """A claims file, its shape checked: a doc, a list of claims each with says/of/key/is, known fields only."""
    try:
        spec = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # C: 30x faster
    except (OSError, yaml.YAMLError) as error:
        mark = getattr(error, "problem_mark", None)
        reason = getattr(error, "problem", None) or " ".join(str(error).split())
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        raise UsageError(f"claims file {str(path)!r} cannot be read: {reason}{where}") from None
    if not isinstance(spec, dict) or not isinstance(spec.get("doc"), str) or not isinstance(spec.get("claims"), list):
        raise UsageError(f"claims file {str(path)!r} needs doc: (a path) and claims: (a list)")
    for entry in spec.get("tables", []):
        if not isinstance(entry, str) and not (isinstance(entry, dict) and set(entry) == {"file", "doc"}):
            raise UsageError(f"claims file {str(path)!r}: tables entry {entry!r} must be a file name or "
                             "{file: NAME, doc: PATH}")
    for i, claim in enumerate(spec["claims"]):
        where = f"claims file {str(path)!r}, claim {i + 1}"
        if not isinstance(claim, dict):
            raise UsageError(f"{where} is not a mapping")
        missing = [name for name in ("says", "of", "key", "is") if name not in claim]
        unknown = sorted(set(claim) - _FIELDS)
        if missing or unknown:
            raise UsageError(f"{where}: " + "; ".join(
                [f"missing {', '.join(missing)}"] * bool(missing) + [f"unknown {', '.join(unknown)}"] * bool(unknown))
                + f" (fields: {', '.join(sorted(_FIELDS))})")
        for name, value, allowed in (("is", claim["is"], KINDS), ("stat", claim.get("stat", "mean"), STATS),
                                     ("unit", claim.get("unit", "s"), tuple(UNITS))):
            if value not in allowed:
                raise UsageError(f"{where}: {name}={value!r} is not one of {', '.join(allowed)}")
        if "value" in claim and not isinstance(claim["value"], str):
            raise UsageError(f"{where}: value={claim['value']!r} must be quoted as the doc writes it (unquoted, YAML "
                             "reads 0.970 as 0.97 and the check would lose a digit)")
        within = claim.get("within")
        if (claim.get("stat") == "count") != ("within" in claim):
            raise UsageError(f"{where}: " + (f"within={within!r} takes stat: count" if "within" in claim else
                             "stat='count' needs within: [low, high], a list of them, or a mapping of keys to them"))
        if "within" in claim and not (_intervals(within) or isinstance(within, dict) and claim["key"] in within
                                      and all(map(_intervals, within.values()))):
            raise UsageError(f"{where}: within={within!r} must be [low, high] (numbers, low <= high), a list of "
                             f"them, or a mapping of keys to them that names key {claim['key']!r}")
        if claim.get("stat", "mean") != "mean" and claim["is"] != "value":
            raise UsageError(f"{where}: stat={claim['stat']!r} gives no mean ± SE to judge: it takes is: value")
        if (claim["is"] in COMPARISONS) != isinstance(claim.get("than"), list):
            raise UsageError(f"{where}: is={claim['is']!r} " + ("needs than: (a list of runs)" if claim["is"] in
                             COMPARISONS else "takes no than: (only above, below and same compare)"))
    return spec


def _flat(text: str) -> str:
    """Text with every run of white space one space: a sentence is found whatever the doc's line breaks."""
    return " ".join(text.split())


def _short(text: str, width: int = 90) -> str:
    text = _flat(text).replace("**", "")
    return text if len(text) <= width else text[: width - 1] + "…"


def failures(outcomes: list[Outcome]) -> list[Outcome]:
    return [outcome for outcome in outcomes if outcome.failure is not None]
