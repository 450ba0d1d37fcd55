"""Plots are legible whatever their shape: a test per class of layout defect.

- No two labels overlap (cell values of a mesh of any shape, one row included; tick labels).
- Titles stay inside the figure (long ones wrap).
- Separate cases are not joined by lines (a comparison's points are categorical).
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pytest

from traces.plots import comparison_figure, mesh_figure

LONG = "busy fraction per PE: " + "a-very-long-trace-file-name-" * 6 + ".arrows"


def _boxes(artists, renderer):
    return [a.get_window_extent(renderer) for a in artists if a.get_visible() and a.get_text()]


def _overlapping(boxes):
    """Pairs of boxes that overlap by more than half a pixel (a sweep over x)."""
    boxes = sorted(boxes, key=lambda b: b.x0)
    found = []
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            if b.x0 >= a.x1 - 0.5:
                break
            if a.y0 < b.y1 - 0.5 and b.y0 < a.y1 - 0.5:
                found.append((a, b))
    return found


def _inside(fig, box) -> bool:
    f = fig.bbox
    return box.x0 >= f.x0 - 1 and box.x1 <= f.x1 + 1 and box.y0 >= f.y0 - 1 and box.y1 <= f.y1 + 1


@pytest.mark.parametrize("shape", [(1, 2), (1, 16), (1, 40), (1, 64), (1, 750), (4, 4),
                                   (16, 16), (2, 100), (20, 20), (40, 10)])  # fmt: skip
def test_mesh_labels_never_overlap_and_title_fits(shape):
    grid = np.random.default_rng(0).random(shape)
    fig = mesh_figure(grid, "busy fraction", LONG)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    assert not _overlapping(_boxes(ax.texts, renderer)), f"cell labels overlap at {shape}"
    assert not _overlapping(_boxes(ax.get_xticklabels(), renderer))
    assert not _overlapping(_boxes(ax.get_yticklabels(), renderer))
    assert _inside(fig, ax.title.get_window_extent(renderer)), "title clipped"
    if shape[0] * shape[1] <= 64 and shape[1] <= 16:
        assert ax.texts, f"a small mesh {shape} should show its values"
    plt.close(fig)


@pytest.mark.parametrize("n", [3, 12, 40])
def test_comparison_points_are_not_joined_and_title_fits(n):
    labels = [f"fwd H1=32 H0=32 BS=32 4x2 D=0.{i} nnz={100 + i}" for i in range(n)]
    values = list(np.linspace(100, 200, n))
    fig = comparison_figure(labels, values, values[::-1], [None] * n, "ws-matmul: " + LONG * 2)
    fig.canvas.draw()
    ax = fig.axes[0]
    assert ax.lines and all(line.get_linestyle() == "None" for line in ax.lines)
    assert _inside(fig, ax.title.get_window_extent(fig.canvas.get_renderer()))
    plt.close(fig)


@pytest.mark.parametrize("n", [4, 12, 40])
@pytest.mark.parametrize("short", [True, False])
def test_comparison_labels_leave_the_plot_its_room(n, short):
    """Long point labels (a gpt-ws-tree case's) go beside the plot, one a line: the plot area
    keeps at least a third of the figure, no two labels overlap, the axis names its unit."""
    labels = [f"p={i}" if short else f"tree fan-in {i} x {i + 1} systems, {2**i} B chunks"
              for i in range(n)]  # fmt: skip
    values = list(np.linspace(1e-3, 2e-3, n))
    fig = comparison_figure(labels, values, values[::-1], [None] * n, "gpt-ws-tree: " + LONG,
                            "s")  # fmt: skip
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    area = ax.get_window_extent(renderer)
    figure = fig.bbox
    assert area.width * area.height >= (figure.width * figure.height) / 3, (n, short)
    ticks = ax.get_xticklabels() if short else ax.get_yticklabels()
    assert not _overlapping(_boxes(ticks, renderer))
    assert "value (s)" in (ax.get_xlabel(), ax.get_ylabel())
    assert _inside(fig, ax.title.get_window_extent(renderer))
    plt.close(fig)
