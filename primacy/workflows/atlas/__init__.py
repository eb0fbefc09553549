"""The memory atlas (``primacy atlas``): each row's knob searched until its accuracy falls in a band, its seeds at
that difficulty, and the table and figure of every row. ``primacy.workflows.atlas`` was one module until issue 70: its
names (``Planner``, ``draw``, ``search``, ...) still import from here, with a FutureWarning naming where they are now.

Modules:
    cost         what an atlas still needs and its time (--status)
    knob_search  a row's bisection over its knob, replayed from its runs
    planner      the rows' runs planned and measured, and the atlas's table and figure
    spec         atlas files: rows, knobs and their task configs, checked
"""

from primacy import moved


def __getattr__(name: str) -> object:  # names of the module primacy.workflows.atlas was before it became this package
    return moved.old_name(__name__, name)
