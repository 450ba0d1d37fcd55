"""Checked argparse types for the command line's numeric options (and ``--trace-region``).

Every numeric option uses one of these (a test walks the parser for raw ``int``/``float``), so a
negative count, a zero worker count or a NaN time limit is refused by argparse with a message
saying what to give, instead of being accepted and misbehaving later.
"""

from __future__ import annotations

import argparse
import math

from simcore import config as cfg


def _whole(text: str, minimum: int) -> int:
    try:
        value = int(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative; give a number >= {minimum}")
    if value < minimum:
        raise argparse.ArgumentTypeError(f"{value} is too small; give a number >= {minimum}")
    return value


def count(text: str) -> int:
    """A whole number >= 0."""
    return _whole(text, 0)


def positive(text: str) -> int:
    """A whole number >= 1."""
    return _whole(text, 1)


def region(text: str) -> tuple[int, int, int, int]:
    """``x0:x1,y0:y1``: a block of a PE array, half-open (x0 <= x < x1, y0 <= y < y1)."""
    try:
        return cfg.parse_region(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def seconds(text: str) -> float:
    """A finite number of seconds > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number of seconds")
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value:g} is negative; give seconds > 0")
    if value == 0:
        raise argparse.ArgumentTypeError("0 seconds is too small; give seconds > 0")
    return value


def detail_region(text: str) -> str:
    """A PE region as :func:`region` reads it, or ``all``; the text is returned as given
    (``traces.perfetto.parse_region`` reads it)."""
    if text.strip() != "all":
        try:
            region(text)
        except argparse.ArgumentTypeError as e:
            raise argparse.ArgumentTypeError(f"{e}; or all (every PE)") from None
    return text
