"""The findings the docs state, written once as data beside the results they read, and checked against them.

A claims file (``results/<study>/claims.yaml``) lists sentences of a doc and what each one says of the runs beside it:

```yaml
doc: docs/atlas.md                 # where its sentences are, from the repository's root (the folder holding results/)
tables: [atlas.md]                 # generated files the doc holds as written (from this file's folder)
claims:
  - says: "**RetNet keeps the last pairs** (early − late −0.107 ± 0.013"   # the doc's words, line breaks aside
    of: RetNet/d_key=8/seed*       # the runs: folders (a glob or a list of them) from this file's folder
    key: early_minus_late          # of each run's results/summary.json (``file``: another; .3 indexes, .0:8 averages)
    is: negative                   # positive, negative, neither; above, below, same (with ``than``); value
    value: "−0.107 ± 0.013"        # how ``says`` writes the estimate: it must round to it
```

``is`` applies the one rule of ``primacy.analysis.evidence`` to the runs' mean ± SE (``above``/``below``/``same``:
to its difference with each group in ``than``, a list of run globs, or of ``{of, key, file}``). ``value`` checks the
numbers the sentence gives: "A ± B" the mean and SE, "A" the statistic alone, "A to B" (or "A–B") the smallest and
the largest value (``stat: range``); ``stat`` is ``mean`` (default), ``sum``, ``min``, ``max`` or ``range``, and
``unit`` (``min``, ``h``) divides seconds. ``n`` states how many runs there must be. A file that cannot be read as
such is a one-line usage error; a claim that does not hold (or whose sentence is no longer in its doc) is a failure,
reported with its value, SE and n.
"""

from __future__ import annotations

import functools
import glob
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from primacy.analysis.evidence import WORDS, Estimate, compare, word
from primacy.errors import UsageError
from primacy.rundir.layout import RunDir

CLAIMS_FILE = "claims.yaml"
PUBLISHED = "results"  # the repository's folder of published runs (results/README.md), not a run's results/
SUMMARY = RunDir(Path()).summary.as_posix()  # a run's summary, from the run's folder
COMPARISONS = {"above": "positive", "below": "negative", "same": "neither"}
KINDS = (*WORDS, *COMPARISONS, "value")
STATS = ("mean", "sum", "min", "max", "range")
UNITS = {"s": 1.0, "min": 60.0, "h": 3600.0}
_FIELDS = {"says", "doc", "of", "key", "file", "is", "than", "value", "stat", "unit", "n"}
_NUMBER = re.compile(r"[+\-−]?\d[\d,]*(?:\.\d+)?")


@dataclass(frozen=True)
class Quantity:
    """One number of every run the globs ``of`` find (``**`` spans folders): ``key`` of its ``file``."""

    of: tuple[str, ...]
    key: str
    file: str = SUMMARY

    def values(self, folder: Path, unit: float) -> list[float]:
        runs = sorted({run for pattern in self.of for run in _folders(str(folder / pattern))})
        if not runs:
            raise UsageError(f"of={_name(self.of)!r} matches no run folder under {folder}")
        return [_number(run / self.file, self.key) / unit for run in runs]


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
    for name in spec.get("tables", []):
        table = folder / name
        if not table.is_file():
            raise UsageError(f"{path}: table {name!r} is not a file in {folder}")
        held = _flat(table.read_text().strip()) in doc_text(spec["doc"])
        outcomes.append(Outcome(f"{spec['doc']}", f"the table {folder / name}", "generated",
                                None if held else f"{spec['doc']} does not hold it as written: draw it again and "
                                                  "copy it in"))
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
    stat, unit = claim.get("stat", "mean"), UNITS[claim.get("unit", "s")]
    values = _quantity(claim).values(folder, unit)
    if "n" in claim and len(values) != claim["n"]:
        return f"{len(values)} runs", f"n={claim['n']} runs expected, {len(values)} found under {_name(claim)!r}"
    if stat != "mean":
        low, high = min(values), max(values)
        measured = {"sum": sum(values), "min": low, "max": high}.get(stat)
        text = f"{stat} {low:.4g}–{high:.4g}" if stat == "range" else f"{stat} {measured:.4g}"
        return text, _value_failure(claim, (low, high) if stat == "range" else (measured,))
    estimate = Estimate.of(values)
    text = f"{claim['key']} {estimate}"
    kind = claim["is"]
    if kind in WORDS:
        said = word(estimate)
        if said != kind:
            return text, _word_failure(kind, said, estimate)
    elif kind in COMPARISONS:
        for other in claim["than"]:
            theirs = Estimate.of(_quantity(other, claim).values(folder, unit))
            said = compare(estimate, theirs)
            if said != COMPARISONS[kind]:
                wanted = {"above": "above", "below": "below", "same": "the same as"}[kind]
                return (f"{text} against {theirs}",
                        f"not {wanted} {_name(other)}: difference {estimate.minus(theirs)} is {said or 'undefined'}")
    return text, _value_failure(claim, (estimate.mean, estimate.se))


def _word_failure(kind: str, said: str | None, estimate: Estimate) -> str:
    if said is None:
        if estimate.n == 1:
            return f"one run has no SE: nothing may be said of it (claimed {kind})"
        return f"the runs do not define it (mean {estimate.mean}, SE {estimate.se}; claimed {kind})"
    rule = "|mean| < 2 SE" if kind == "neither" else "|mean| >= 2 SE"
    return f"{said}, not {kind} (needs {rule}: |{estimate.mean:.4g}| against 2 × {estimate.se:.4g})"


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
    """A claim's own runs, or one entry of its ``than``: globs (the claim's key and file) or {of, key, file}."""
    if not isinstance(spec, dict):
        return Quantity(_globs(spec), parent["key"], parent.get("file", SUMMARY))
    base = parent or {}
    return Quantity(_globs(spec["of"]), spec.get("key", base.get("key")), spec.get("file", base.get("file", SUMMARY)))


def _globs(of: str | list[str]) -> tuple[str, ...]:
    return (of,) if isinstance(of, str) else tuple(of)


def _name(spec: Any) -> str:
    of = spec["of"] if isinstance(spec, dict) else spec
    return of if isinstance(of, str) else ", ".join(of)


def _number(file: Path, key: str) -> float:
    """``key`` of a JSON file, dots indexing into dicts and lists; a last part ``a:b`` is the mean of that slice of
    a list (``serial_position_curve.0:16``: the first 16 positions)."""
    if not file.is_file():
        raise UsageError(f"{file} does not exist")
    value: Any = _json(file, file.stat().st_mtime_ns)
    for part in key.split("."):
        try:
            if isinstance(value, list) and ":" in part:
                start, stop = (int(bound) if bound else None for bound in part.split(":"))
                value = [float("nan") if entry is None else entry for entry in value[start:stop]]
                value = sum(value) / len(value)
            else:
                value = value[int(part)] if isinstance(value, list) else value[part]
        except (KeyError, IndexError, ValueError, TypeError, ZeroDivisionError):
            raise UsageError(f"key={key!r} is not in {file}") from None
    if value is None:
        return float("nan")
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise UsageError(f"key={key!r} of {file} is {type(value).__name__}, not a number")
    return float(value)


@functools.lru_cache(maxsize=1024)
def _folders(pattern: str) -> tuple[Path, ...]:
    """The folders a glob finds (many claims name the same runs; a ``**`` glob walks the whole tree)."""
    return tuple(Path(path) for path in glob.glob(pattern, recursive=True) if Path(path).is_dir())


@functools.lru_cache(maxsize=4096)
def _json(file: Path, mtime_ns: int) -> Any:
    """A JSON file, read once while it is unchanged (claims of one run read its summary many times)."""
    return json.loads(file.read_text())


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
