"""Every figure builder: pure functions from results to matplotlib figures, one module per kind of figure, and
``save``, the one way a figure reaches files.

Modules:
    accuracy     the study x query heatmap and its page, curves by delay, contiguity
    atlas        the memory atlas: curves and indices of every row
    dt           Delta t over training and by position (Fig. 4)
    free_recall  recall probability, first recall, the lag-CRP with CMR fits
    heads        induction heads, lag-CRPs, CMR fits, probes, ablation, emergence
    humans       models beside people
    kernels      continuous against discretised HiPPO impulse responses (Fig. 1)
    logged       a model's logged test values over seeds
    style        what every figure shares: colours, ticks, titles
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # figures are written to files; no display is needed

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from primacy import files  # noqa: E402

FORMATS = ("png", "pdf")  # what results and pages are written in unless asked otherwise
DPI = 150


def save(fig: Figure, stem: str | Path, formats: Sequence[str] | None = None, dpi: int = DPI) -> list[Path]:
    """``fig`` written atomically to ``stem``.<format> for every format (None: ``FORMATS``, read at the call), then
    closed (also when a write fails). The layout (constrained or tight) is computed for the first format and kept for
    the others: the same page in each, and a PDF after a PNG costs half as much (the layout solver was as much time
    as drawing the page). Without any engine, not even matplotlib's placeholder, a later format is drawn once: with
    one, matplotlib draws it twice, first without rendering, for a layout that has nothing left to do."""
    stem, formats = Path(stem), FORMATS if formats is None else formats
    written = []
    try:
        for fmt in formats:
            written.append(files.save_figure(fig, stem.parent / f"{stem.name}.{fmt}", dpi=dpi))
            with matplotlib.rc_context({"figure.autolayout": False, "figure.constrained_layout.use": False}):
                fig.set_layout_engine(None)  # the axes keep the positions the first format's layout gave them
        return written
    finally:
        plt.close(fig)


# the builders, one module per kind of figure: figures.accuracy.heatmap(...), figures.style.describe(...), ...
from primacy.figures import accuracy, atlas, dt, free_recall, heads, humans, kernels, logged, style  # noqa: E402, F401
