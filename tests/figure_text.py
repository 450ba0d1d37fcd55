"""What the plot tests look at in a drawn figure: its texts' extents and the pairs that
overlap (the renderer's extents, so labels, ticks, titles and legends all count)."""

from __future__ import annotations

from matplotlib.text import Text


def text_boxes(fig):
    """Extents of every visible, non-empty text of ``fig`` once drawn (the renderer's)."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    return [(t.get_text(), t.get_window_extent(renderer)) for t in fig.findobj(Text)
            if t.get_visible() and t.get_text().strip()]  # fmt: skip


def overlapping_texts(fig) -> list[tuple[str, str]]:
    """The pairs of ``fig``'s texts whose extents overlap."""
    boxes = text_boxes(fig)
    return [(a, b) for i, (a, box_a) in enumerate(boxes) for b, box_b in boxes[i + 1 :]
            if box_a.overlaps(box_b)]  # fmt: skip
