"""Models beside people: human free-recall data, the same analyses of runs and of people, and CMR fitted to both by
likelihood. ``primacy.workflows.humans`` was one module until issue 70: its names (``compare``, ``write``, ...) still
import from here, with a FutureWarning naming where they are now.

Modules:
    cmr_fits  CMR fitted by likelihood to participants, chunked and resumable
    cmr_grid  build and compare CMR grids
    page      models beside people: runs and a dataset through the same analyses, the page and its fits
    people    human free-recall data from psifr or a file
"""

from primacy import moved


def __getattr__(name: str) -> object:  # names of the module primacy.workflows.humans was before it became this package
    return moved.old_name(__name__, name)
