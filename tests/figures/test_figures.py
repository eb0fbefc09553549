"""Figures show the numbers they are given: the cells of a heatmap are the matrix, its marginal curves the row and
column means, and every panel of the Fig. 3 page the matrix of its run in one colour scale."""

import matplotlib.pyplot as plt
import numpy as np
import pytest
from matplotlib.collections import QuadMesh

from primacy import figures


def meshes(fig) -> list[np.ndarray]:
    """The values of every grid of coloured cells in ``fig`` but the colour bars' (one column), NaN where blank."""
    grids = [np.ma.filled(c.get_array(), np.nan) for ax in fig.axes for c in ax.collections if isinstance(c, QuadMesh)]
    return [grid for grid in grids if grid.ndim == 2 and grid.shape[1] > 1]


@pytest.fixture
def matrix() -> np.ndarray:
    values = np.arange(16, dtype=float).reshape(4, 4) / 16  # study x query: no symmetry, rows and columns differ
    values[3, 0] = np.nan  # a cell never asked
    return values


def test_the_heatmap_cells_and_marginal_curves_are_the_matrix_it_shows(matrix):
    distractor = np.array([0.9, 0.8, 0.7, 0.6])
    fig = figures.accuracy.heatmap(matrix, distractor, "title")
    try:
        new, cells = meshes(fig)  # the distractor row on top, then the matrix
        np.testing.assert_array_equal(cells, matrix)
        np.testing.assert_array_equal(new, distractor[None])
        assert {c.get_clim() for ax in fig.axes for c in ax.collections if isinstance(c, QuadMesh)} == {(0.0, 1.0)}
        row_axes, = (ax for ax in fig.axes if ax.get_xlabel() == "row mean")
        col_axes, = (ax for ax in fig.axes if ax.get_ylabel() == "col. mean")
        np.testing.assert_allclose(row_axes.lines[0].get_xdata(), np.nanmean(matrix, axis=1))
        np.testing.assert_allclose(col_axes.lines[0].get_ydata(), np.nanmean(matrix, axis=0))
    finally:
        plt.close(fig)


def test_every_panel_of_the_fig3_page_shows_its_own_matrix_in_one_colour_scale(matrix):
    other = np.array([[0.25, 0.5, 0.75], [1.0, 0.0, 0.5], [0.5, 0.5, 0.25]])
    fig = figures.accuracy.fig3_page([("A", "first", matrix, np.full(4, 0.5)), ("B", "second", other, np.ones(3))])
    try:
        cells = [grid for grid in meshes(fig) if grid.shape[0] > 1]  # the matrices, not the distractor rows
        assert len(cells) == 2
        np.testing.assert_array_equal(cells[0], matrix)
        np.testing.assert_array_equal(cells[1], other)
        # one scale for every panel: from 0.5, or the lowest value rounded down to 0.05, to 1
        assert {c.get_clim() for ax in fig.axes for c in ax.collections if isinstance(c, QuadMesh)} == {(0.0, 1.0)}
    finally:
        plt.close(fig)


def test_the_fig3_pages_marginal_curves_carry_their_standard_error_bands(matrix):
    """A panel given the standard errors over seeds of its serial- and query-position curves draws them as bands
    around the curves: curve ± SE at every position."""
    row_se, col_se = np.array([0.01, 0.02, 0.03, 0.04]), np.array([0.05, 0.0, 0.05, 0.0])
    fig = figures.accuracy.fig3_page([("A", "first", matrix, np.full(4, 0.5), (row_se, col_se))])
    try:
        row_axes, = (ax for ax in fig.axes if ax.get_xlabel() == "row mean")
        col_axes, = (ax for ax in fig.axes if ax.get_ylabel() == "col. mean")
        for ax, curve, se, axis in ((row_axes, np.nanmean(matrix, axis=1), row_se, 0),
                                    (col_axes, np.nanmean(matrix, axis=0), col_se, 1)):
            band, = ax.collections
            edge = band.get_paths()[0].vertices[:, axis]  # the polygon's accuracy coordinates: both edges
            np.testing.assert_allclose(sorted({round(v, 12) for v in edge}),
                                       sorted({round(v, 12) for v in np.concatenate([curve - se, curve + se])}))
    finally:
        plt.close(fig)


def test_a_ceiling_panels_marginal_axes_stay_on_the_accuracy_scale():
    """At the ceiling the marginal axes end just above 1 (they ended at 1.17) with every value shown, and the narrow
    row-mean axis carries few enough labels not to overlap (it printed 0.9 1.0 1.1 in a tenth of the panel)."""
    matrix = np.full((8, 8), 0.999)
    matrix[0, 0] = 1.0
    fig = figures.accuracy.heatmap(matrix, np.ones(8), "ceiling")
    try:
        row_axes, = (ax for ax in fig.axes if ax.get_xlabel() == "row mean")
        col_axes, = (ax for ax in fig.axes if ax.get_ylabel() == "col. mean")
        for low, high in (row_axes.get_xlim(), col_axes.get_ylim()):
            assert high == pytest.approx(1.02) and low < 0.999 - 0.02 and high - low >= 0.3
        fig.canvas.draw()
        labels = [t for t in row_axes.get_xticklabels() if t.get_text() and t.get_visible()]
        ticks = [t for t in row_axes.get_xticks() if row_axes.get_xlim()[0] <= t <= row_axes.get_xlim()[1]]
        assert 1 <= len(ticks) <= 3 and len(labels) >= len(ticks)
    finally:
        plt.close(fig)


def marginal_axes(fig) -> list:
    """The row-mean (x) and column-mean (y) accuracy axes of every heatmap panel in ``fig``."""
    return ([ax.xaxis for ax in fig.axes if ax.get_xlabel() == "row mean"]
            + [ax.yaxis for ax in fig.axes if ax.get_ylabel() == "col. mean"])


@pytest.mark.parametrize("value", [1.0, 0.5])
@pytest.mark.parametrize("page", [False, True], ids=["heatmap", "fig3_page"])
def test_the_marginal_axes_label_accuracies_in_0_1_without_overlap(value, page):
    """A flat panel (at the ceiling, or at chance) labels its row- and column-mean axes with at most three accuracies,
    each within [0, 1] and inside the axis's limits, whose drawn labels do not touch (they printed 0.9 1.0 1.1 on top
    of each other); on the Fig. 3 page too, whose panels are narrower and label in a smaller font."""
    matrix = np.full((8, 8), value)
    fig = (figures.accuracy.fig3_page([("A", "flat", matrix, np.full(8, value))]) if page  # panels 3.6 in wide
           else figures.accuracy.heatmap(matrix, np.full(8, value), "flat"))
    try:
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        axes = marginal_axes(fig)
        assert len(axes) == 2
        for axis in axes:
            low, high = sorted(axis.get_view_interval())
            ticks = axis.get_majorticklocs()
            assert 1 <= len(ticks) <= 3
            assert all(max(low, 0.0) <= t <= min(high, 1.0) for t in ticks), (ticks, low, high)
            labels = [t.label1 for t in axis.get_major_ticks() if t.label1.get_visible()]
            assert [float(label.get_text()) for label in labels] == pytest.approx(list(ticks))
            boxes = [label.get_window_extent(renderer) for label in labels]
            assert not any(a.overlaps(b) for k, a in enumerate(boxes) for b in boxes[k + 1:])
    finally:
        plt.close(fig)


def test_every_format_of_a_save_shows_the_page_the_first_ones_layout_gave_and_is_drawn_once(matrix, tmp_path,
                                                                                             monkeypatch):
    """The constrained layout is solved for the first format only: the axes of the PDF sit where the PNG's layout put
    them, and the PDF is drawn once (the PNG twice: matplotlib lays the page out in a draw without rendering; with
    any layout engine left on the figure, even a placeholder, it does so again for every later format)."""
    fig = figures.accuracy.heatmap(matrix, np.full(4, 0.5))
    draws, positions = [], []
    draw, save_figure = type(fig).draw, figures.files.save_figure
    monkeypatch.setattr(type(fig), "draw", lambda self, renderer: (draws.append(1), draw(self, renderer))[1])

    def saved(fig, path, **kwargs):
        before = len(draws)
        save_figure(fig, path, **kwargs)
        positions.append([ax.get_position().bounds for ax in fig.axes])
        return len(draws) - before
    monkeypatch.setattr(figures.files, "save_figure", lambda fig, path, **kwargs: (path, saved(fig, path, **kwargs)))
    written = figures.save(fig, tmp_path / "page", ["png", "pdf"])
    assert [(path.name, drawn) for path, drawn in written] == [("page.png", 2), ("page.pdf", 1)]
    assert positions[0] == positions[1]


def atlas_panels(fig) -> tuple[list, dict]:
    """The atlas page's curve panels (their x label names the position) and its index panels by title."""
    curves = [ax for ax in fig.axes if ax.get_xlabel().endswith("position")]
    return curves, {ax.get_title(): ax for ax in fig.axes if ax not in curves}


def index_dots(ax) -> dict[int, float]:
    """An index panel's dots drawn on its scale, by row (top 0): the value of each."""
    return {int(line.get_ydata()[0]): line.get_xdata()[0] for line in ax.lines
            if line.get_marker() in figures.atlas.MARKERS}


def atlas_row(label, backbone, seeds, **indices):
    curve = (np.array([0.8, 0.7, 0.75]), np.full(3, 0.01))
    return figures.atlas.AtlasCurves(label, curve, curve, {key: indices.get(key, (0.01, 0.005))
                                                           for key in figures.atlas.INDICES}, backbone, seeds)


def test_the_atlas_page_shows_each_rows_indices_and_leaves_an_undefined_one_blank():
    """A list of 2 has no middle, so its primacy and recency indices are None (the table's "—"): no dot, no error."""
    curve = (np.array([0.4, 0.3]), np.array([0.01, 0.02]))
    rows = [figures.atlas.AtlasCurves("long", curve, curve, {key: (0.25, 0.05) for key in figures.atlas.INDICES}),
            figures.atlas.AtlasCurves("two items", curve, curve, {"primacy_index": (None, None),
                                                                  "recency_index": (None, None),
                                                                  "early_minus_late": (0.35, None),
                                                                  "early_query_decay": (0.29, 0.01)})]
    fig = figures.atlas.atlas_page(rows, "title")
    try:
        _, panels = atlas_panels(fig)
        assert index_dots(panels["primacy index"]) == {0: 0.25}
        assert index_dots(panels["early minus late"]) == {0: 0.25, 1: 0.35}
    finally:
        plt.close(fig)


def test_the_atlas_page_leaves_out_a_panel_that_would_repeat_another_or_stay_empty():
    """Selective copying asks each token in its own place: its query-position curve is its study-position curve and
    its early query decay is undefined in every row, so those two panels go; a row whose curves differ keeps both."""
    study, query = (np.array([0.9, 0.5, 0.8]), np.full(3, 0.01)), (np.array([0.9, 0.7, 0.6]), np.full(3, 0.01))
    undefined = {**{key: (0.1, 0.01) for key in figures.atlas.INDICES}, "early_query_decay": (None, None)}
    shown = {}
    for name, rows in (("diagonal", [figures.atlas.AtlasCurves("copy", study, study, undefined)]),
                       ("recall", [figures.atlas.AtlasCurves("copy", study, study, undefined),
                                   figures.atlas.AtlasCurves("recall", study, query, {
                                       key: (0.1, 0.01) for key in figures.atlas.INDICES})])):
        fig = figures.atlas.atlas_page(rows, "title")
        curves, indices = atlas_panels(fig)
        shown[name] = [ax.get_xlabel() for ax in curves], list(indices)
        plt.close(fig)
    assert shown["diagonal"] == (["study position"], ["primacy index", "recency index", "early minus late"])
    assert shown["recall"] == (["study position", "query position"],
                               ["primacy index", "recency index", "early minus late", "early query decay"])


def test_the_atlas_page_draws_a_row_outside_the_band_dashed_with_its_accuracy_and_counts_the_rows_inside():
    """Every seed inside the band: a solid line under the row's own label. No seed inside: dashed, hollow markers,
    its mean accuracy and side in its label (MQAR's S4 at 0.38 must not read as a row at matched difficulty). Some
    seeds inside: solid, with its accuracy and how many. The title counts each kind."""
    rows = [atlas_row("S4D", "S4DBackbone", (0.75, 0.74, 0.76)), atlas_row("S4", "S4Backbone", (0.39, 0.37, 0.38)),
            atlas_row("GLA", "GLABackbone", (0.855, 0.766, 0.832)),
            atlas_row("Window", "TransformerBackbone", (1.0, 0.669, 0.999))]
    fig = figures.atlas.atlas_page(rows, "MQAR", band=(0.70, 0.80), metric="overall accuracy")
    try:
        curves, _ = atlas_panels(fig)
        lines = {line.get_label(): line for ax in curves for line in ax.lines}
        assert set(lines) == {"S4D", "S4 — 0.38, below band", "GLA — 0.82, 1/3 in band",
                              "Window — 0.89, none in band"}
        assert {label: line.get_linestyle() for label, line in lines.items()} == {
            "S4D": "-", "S4 — 0.38, below band": "--", "GLA — 0.82, 1/3 in band": "-",
            "Window — 0.89, none in band": "--"}
        assert lines["S4 — 0.38, below band"].get_markerfacecolor() == "white"
        assert lines["S4D"].get_markerfacecolor() != "white"
        assert fig._suptitle.get_text() == ("MQAR\n1 of 4 rows with every seed in the band (overall accuracy "
                                            "0.70–0.80), 1 more with some; dashed, hollow: the 2 with none")
    finally:
        plt.close(fig)


def test_the_atlas_page_groups_rows_by_family_in_a_panel_each():
    """Thirteen lines in one panel tangle: each family of backbones has its own panel (one y scale for all), and the
    index panels list the rows family by family."""
    rows = [atlas_row("LSTM", "LSTMBackbone", ()), atlas_row("S4D", "S4DBackbone", ()),
            atlas_row("GLA", "GLABackbone", ()), atlas_row("Mamba", "MambaBackbone", ())]
    fig = figures.atlas.atlas_page(rows, "title")
    try:
        curves, indices = atlas_panels(fig)
        assert [(ax.get_title(), [line.get_label() for line in ax.lines]) for ax in curves] == [
            ("state space", ["S4D", "Mamba"]), ("recurrent", ["LSTM"]), ("linear recurrent", ["GLA"])]
        assert len({ax.get_ylim() for ax in curves}) == 1
        assert [tick.get_text() for tick in indices["primacy index"].get_yticklabels()] == ["S4D", "Mamba", "LSTM",
                                                                                          "GLA"]
    finally:
        plt.close(fig)


def test_an_atlas_index_axis_is_not_squashed_by_one_outlier_but_still_shows_every_value():
    """The sliding window's early − late (−0.59) against the rest's few hundredths: the axis spans the rest, so a
    difference of 0.03 with its SE stays readable, and the outlier is a triangle at the edge with its value. A row
    with no seed in the band does not set the axis either; a spread the axis can hold (up to ``SPAN``) is kept whole."""
    effects = [(0.03, 0.004), (-0.03, 0.005), (0.0, 0.003), (0.012, 0.008), (-0.047, 0.001), (0.071, 0.012),
               (0.038, 0.004)]
    rows = [atlas_row(f"row {i}", "RetNetBackbone", (0.75,), early_minus_late=effect)
            for i, effect in enumerate(effects)]
    rows += [atlas_row("window", "TransformerBackbone", (0.76,), early_minus_late=(-0.585, 0.048)),
             atlas_row("S4", "S4Backbone", (0.38,), early_minus_late=(0.352, 0.008)),
             atlas_row("SSM", "S4DBackbone", (0.74,), primacy_index=(0.27, 0.01)),
             atlas_row("GLA", "GLABackbone", (0.72,), primacy_index=(-0.05, 0.01))]
    fig = figures.atlas.atlas_page(rows, "title", band=(0.70, 0.80))
    try:
        _, panels = atlas_panels(fig)
        lo, hi = panels["early minus late"].get_xlim()
        assert lo <= -0.048 and hi >= 0.083  # every row in the band but the outlier, with its SE
        assert hi - lo < 0.2  # a difference of 0.03 is a seventh of the axis or more, not a thirtieth
        texts = [text.get_text() for text in panels["early minus late"].texts]
        assert sorted(texts) == ["+0.35 ± 0.01", "−0.58 ± 0.05"]  # the window's, and S4's outside the band
        lo, hi = panels["primacy index"].get_xlim()
        assert lo <= -0.06 and hi >= 0.28 and not panels["primacy index"].texts
    finally:
        plt.close(fig)
