"""Atlas files: the YAML that names an atlas's rows (a backbone, a difficulty knob and its values) and the config of
their task, read and checked; primacy's own are in configs/atlas/ (the format: ``primacy.workflows.atlas.planner``)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from primacy.errors import UsageError
from primacy.workflows.runs import SCALES, read_yaml

BAND = (0.70, 0.80)
METRIC = "overall_accuracy"
ATLASES = Path(__file__).resolve().parents[3] / "configs" / "atlas"  # primacy's atlas files (an editable install)


@dataclass(frozen=True)
class Row:
    label: str
    backbone: dict[str, Any] | None  # the backbone's config (class_path, init_args); None: the config's own
    knob: str  # a dotted config key
    values: tuple[tuple[Any, ...], tuple[Any, ...]]  # at the cpu and the paper scale, easiest to hardest
    args: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())  # more overrides of its runs at each scale
    config: tuple[str, str] | None = None  # the row's own config at each scale; None: the atlas's

    @property
    def slug(self) -> str:
        return "".join(c if c.isalnum() or c in "-_." else "-" for c in self.label)

    @property
    def knob_name(self) -> str:
        return self.knob.rsplit(".", 1)[-1]

    def scale_values(self, scale: str) -> tuple[Any, ...]:
        return self.values[SCALES.index(scale)]


@dataclass(frozen=True)
class AtlasSpec:
    name: str
    title: str
    rows: tuple[Row, ...]
    config: tuple[str, str] | None  # the task and training at each scale, a config beside the file
    root: Path  # the atlas file's folder
    band: tuple[float, float] = BAND
    metric: str = METRIC
    args: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())  # overrides of every row's runs at each scale

    def select(self, labels: list[str] | None) -> AtlasSpec:
        if not labels:
            return self
        known = [row.label for row in self.rows]
        unknown = [label for label in labels if label not in known]
        if unknown:
            raise UsageError(f"rows={unknown} are not rows of {self.name}: choose from {', '.join(known)}")
        return replace(self, rows=tuple(r for r in self.rows if r.label in labels))

    def rows_left_out(self, chosen: AtlasSpec, out: Path) -> list[str]:
        """The rows of this atlas that ``chosen`` (it as ``--rows`` selects it) leaves out but whose runs are in
        ``out``: the atlas drawn from ``chosen`` alone would be drawn over theirs, without them."""
        labels = {row.label for row in chosen.rows}
        return [row.label for row in self.rows if row.label not in labels and (out / row.slug).is_dir()]

    def config_path(self, row: Row, scale: str) -> Path:
        names = row.config or self.config
        if names is None:
            raise UsageError(f"atlas={self.name}: row {row.label} has no config and the atlas gives none: add "
                             "`config:` to the file or to the row")
        path = self.root / f"{names[SCALES.index(scale)]}.yaml"
        if not path.is_file():
            raise UsageError(f"atlas={self.name}: the config {path} of row {row.label} is missing")
        return path


def read_atlas(name: str | Path) -> AtlasSpec:
    """One of primacy's atlases by name (configs/atlas/<name>.yaml) or an atlas file; a missing file, invalid YAML or
    an incomplete row is refused in one line naming the file and what is allowed."""
    path = Path(name)
    if not path.suffix and (ATLASES / f"{name}.yaml").is_file():
        path = ATLASES / f"{name}.yaml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in ATLASES.glob("*.yaml")))
        raise UsageError(f"atlas={name} is neither one of primacy's atlases ({known}) nor an atlas file that exists")
    content = read_yaml("atlas", path)
    rows = content.get("rows") if isinstance(content, dict) else None
    if not isinstance(rows, list) or not rows:
        raise UsageError(f"atlas={path} has no rows: give a list `rows:` of {{label, backbone, knob, values}}")
    band = tuple(content.get("band", BAND))
    if not valid_band(band):
        raise UsageError(f"atlas={path} has band={content.get('band')!r}: give [low, high] with 0 <= low < high <= 1")
    spec = AtlasSpec(path.stem, str(content.get("title") or path.stem), tuple(_row(path, r) for r in rows),
                     _scaled(path, "config", content.get("config"), str) if "config" in content else None,
                     path.parent.resolve(), (float(band[0]), float(band[1])), str(content.get("metric", METRIC)),
                     _args(path, "the atlas", content.get("args", [])))
    labels = [row.label for row in spec.rows]
    if len(set(labels)) < len(labels):
        raise UsageError(f"atlas={path} has the row labels {labels}: give each row its own")
    return spec


def valid_band(band: tuple) -> bool:
    """Whether ``band`` is an accuracy band: two numbers, 0 <= low < high <= 1."""
    return len(band) == 2 and all(isinstance(b, (int, float)) for b in band) and 0 <= band[0] < band[1] <= 1


def _scaled(path: Path, key: str, value: Any, kind: type) -> tuple[Any, Any]:
    """A value the same at every scale, or {cpu: ..., paper: ...}."""
    by_scale = value if isinstance(value, dict) else {scale: value for scale in SCALES}
    if set(by_scale) != set(SCALES) or not all(isinstance(v, kind) for v in by_scale.values()):
        raise UsageError(f"atlas={path} has {key}={value!r}: give one {kind.__name__}, or one per scale "
                         f"({', '.join(SCALES)})")
    return tuple(by_scale[scale] for scale in SCALES)


def _row(path: Path, entry: Any) -> Row:
    if not isinstance(entry, dict) or not {"label", "knob", "values"} <= set(entry):
        raise UsageError(f"atlas={path} has the row {entry!r}: give each row a label, a knob (a dotted config key) "
                         "and its values (easiest to hardest)")
    label = str(entry["label"])
    values = _scaled(path, f"values of row {label}", entry["values"], list)
    if not all(values):
        raise UsageError(f"atlas={path} has no values for row {label} at some scale: give at least one")
    backbone = entry.get("backbone")
    if backbone is not None and not (isinstance(backbone, dict) and "class_path" in backbone):
        raise UsageError(f"atlas={path} has backbone={backbone!r} in row {label}: give {{class_path, init_args}}")
    args = _args(path, f"row {label}", entry.get("args", []))
    config = _scaled(path, f"config of row {label}", entry["config"], str) if "config" in entry else None
    return Row(label, backbone, str(entry["knob"]), tuple(tuple(v) for v in values), args, config)


def _args(path: Path, where: str, args: Any) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """--key value overrides, the same at every scale or {cpu: [...], paper: [...]}."""
    by_scale = args if isinstance(args, dict) else {scale: args for scale in SCALES}
    valid = set(by_scale) == set(SCALES) and all(
        isinstance(a, list) and not len(a) % 2 and all(str(key).startswith("--") for key in a[::2])
        for a in by_scale.values())
    if not valid:
        raise UsageError(f"atlas={path} has args={args!r} in {where}: give a list of --key value pairs, or one per "
                         f"scale ({', '.join(SCALES)})")
    return tuple(tuple(map(str, by_scale[scale])) for scale in SCALES)
