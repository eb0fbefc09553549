"""``primacy models``: every registered backbone, plugins included."""

from __future__ import annotations

from primacy import registry
from primacy.errors import ArgumentParser


def command(args: list[str]) -> None:
    """List every registered backbone: its name (for configs), distribution and one-line description."""
    ArgumentParser(prog="primacy models", description=command.__doc__).parse_args(args)
    rows = registry.describe()
    width = max(len(row["name"]) for row in rows)
    dist_width = max(len(row["distribution"]) for row in rows)
    for row in rows:
        print(f"{row['name']:<{width}}  {row['distribution']:<{dist_width}}  {row['description']}")
