"""What a figure of ``primacy reproduce`` is made of: its panels, each a config at each scale (and the backbone it
needs, when that comes with a plugin), its layout and the panel its table compares the others with."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from primacy.errors import UsageError
from primacy.workflows.runs import SCALES

AGGREGATES = "aggregates"  # the layout of a figure of any kinds of result: each panel's aggregate and one table


@dataclass(frozen=True)
class Panel:
    label: str  # the paper's letter or column
    title: str
    configs: tuple[str, str]  # config names at the cpu and the paper scale ("": none at that scale)
    groups: tuple[int, int] = (1, 1)  # units read as one head at each scale, for a backbone without attention
    requires: str = ""  # a registered backbone the panel needs ("": primacy's own); without it the panel is left out
    # at each scale, the files (paths under configs/) that compose the panel's config in this order, each a --config
    # of its runs, the panel's config name then naming only its runs' folder; (): the one file configs/<scale>/NAME.yaml
    parts: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())

    def config(self, scale: str) -> str:
        return self.configs[SCALES.index(scale)]

    def config_parts(self, scale: str) -> tuple[str, ...]:
        return self.parts[SCALES.index(scale)]


@dataclass(frozen=True)
class FigureSpec:
    name: str
    title: str
    panels: tuple[Panel, ...]
    layout: str  # "heatmaps" (Fig. 3), "dt" (Fig. 4 and 5), "probes", "emergence" (induction), "humans" or
    # AGGREGATES (a figure file's, the tasks': each panel's aggregate, whatever its kind of result, and a table)
    reference: str | None = None  # the panel the others are compared with in the figure's markdown table
    config_root: Path | None = None  # where its configs are (a figure file's folder); None: configs/<scale>/

    def select(self, names: list[str] | None) -> FigureSpec:
        """The figure restricted to some panels, named by label or config name."""
        if not names:
            return self
        known = {key: panel for panel in self.panels for key in (panel.label, *panel.configs)}
        unknown = [name for name in names if name not in known]
        if unknown:
            raise UsageError(f"panels={unknown} are not panels of {self.name}: choose from "
                             f"{', '.join(p.label for p in self.panels)} or their config names")
        return replace(self, panels=tuple(p for p in self.panels if any(known[n] is p for n in names)))

    def installed(self) -> tuple[FigureSpec, list[str]]:
        """The figure without the panels whose ``requires`` backbone is not registered here, and a line for each
        backbone missing, naming its panels and what to install."""
        from primacy import registry

        have = set(registry.names())
        missing = {p.requires for p in self.panels if p.requires and p.requires not in have}
        lines = []
        for name in sorted(missing):
            labels = [p.label for p in self.panels if p.requires == name]
            plugin = registry.checkout_plugins().get(("backbone", name), "the plugin that registers it")
            lines.append(f"{self.name}: leaving out {len(labels)} panel{'s' * (len(labels) > 1)} ({', '.join(labels)})"
                         f": backbone {name} is not installed; install {plugin} to run them")
        return replace(self, panels=tuple(p for p in self.panels if p.requires not in missing)), lines


def _panel(label: str, title: str, cpu: str, paper: str, groups: tuple[int, int] = (1, 1)) -> Panel:
    return Panel(label, title, (cpu, paper), groups)
