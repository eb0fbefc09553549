"""``main()``: the ``primacy`` command. Lightning's subcommands (fit, validate, test, predict) go to PrimacyCLI; each of
primacy's own is the ``command(args)`` of its module, ``primacy.cli.<name>``, imported only when it runs. Nothing here
imports Lightning (about 4 s): ``primacy --help`` and the commands that need no Lightning start without it."""

from __future__ import annotations

import importlib
import sys

from primacy.cli import console
from primacy.cli.help import TOOL_COMMANDS, overview
from primacy.cli.parse_errors import check_plugins_installed
from primacy.errors import find_usage_error
from primacy.workflows import launchers


def main(args: list[str] | None = None) -> None:
    console.setup()
    launchers.stop_with_parent()
    argv = sys.argv[1:] if args is None else list(args)
    if not argv or argv[0] in ("-h", "--help"):  # bare `primacy` is a usage error: the same list, on stderr
        console.show(overview(), sys.stdout if argv else sys.stderr)
        raise SystemExit(0 if argv else 2)
    try:
        if argv[0] in TOOL_COMMANDS:
            importlib.import_module(f"primacy.cli.{argv[0]}").command(argv[1:])
        else:
            check_plugins_installed(argv)  # before Lightning's imports: a missing plugin is said at once
            _lightning(args)  # Lightning's subcommands, and any mistyped command
    except Exception as err:
        usage = find_usage_error(err)
        if usage is None:
            raise
        print(f"primacy: error: {usage}", file=sys.stderr)
        raise SystemExit(2) from None


def _lightning(args: list[str] | None) -> None:
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    from primacy.cli.lightning import PrimacyCLI

    try:
        PrimacyCLI(args=args)
    except SIGTERMException:  # Lightning stops at the end of the step; RunCheckpoint saved it
        print("primacy: stopped by SIGTERM with a checkpoint: run the same command again to resume", file=sys.stderr)
        raise SystemExit(143) from None
