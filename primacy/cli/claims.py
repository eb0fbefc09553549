"""``primacy claims``: every finding the docs state, checked against the committed results it reads."""

from __future__ import annotations

from pathlib import Path

from primacy.analysis.evidence import EFFECT_SE
from primacy.errors import ArgumentParser
from primacy.workflows import claims


def command(args: list[str]) -> None:
    parser = ArgumentParser(prog="primacy claims", description=claims.__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", metavar="CLAIMS_FILE",
                        help=f"claims files to check (default: every results/**/{claims.CLAIMS_FILE} under --root)")
    parser.add_argument("--root", default=".", help="the repository's root: the folder holding results/ and the docs")
    parser.add_argument("--failures", action="store_true", help="print only the claims that fail")
    options = parser.parse_args(args)
    files = [Path(file) for file in options.files] or claims.find(options.root)
    outcomes = list(claims.check_all(files, options.root))
    for outcome in outcomes:
        if outcome.failure is not None or not options.failures:
            print(outcome.line())
    failed = claims.failures(outcomes)
    print(f"{len(outcomes) - len(failed)} of {len(outcomes)} claims hold ({len(files)} files; the rule: an effect at "
          f">= {EFFECT_SE:g} SE of its n, neither below)")
    if failed:
        raise SystemExit(1)
