"""``primacy models``: every registered backbone, model and task, plugins included, with the distribution of each."""

from __future__ import annotations

from primacy import registry
from primacy.errors import ArgumentParser

HEADINGS = {"backbone": "backbones", "model": "models", "task": "tasks", "result": "kinds of result"}


def command(args: list[str]) -> None:
    """List every registered backbone, model, task and kind of result: its name (for configs), the distribution
    that brings it (primacy or a plugin) and a one-line description."""
    ArgumentParser(prog="primacy models", description=command.__doc__).parse_args(args)
    tables = {kind: registry.describe(kind) for kind in HEADINGS}
    rows = [row for table in tables.values() for row in table]
    width = max(len(row["name"]) for row in rows)
    dist_width = max(len(row["distribution"]) for row in rows)
    for kind, table in tables.items():
        print(f"{HEADINGS[kind]}:")
        for row in table:
            print(f"  {row['name']:<{width}}  {row['distribution']:<{dist_width}}  {row['description']}")
