"""The schedule of a stream's source: when a sending CE issues each wavelet and its router
forwards it, from the credit-loop rules alone.

The sender issues up to its SIMD width of wavelets per cycle while it holds up-ramp credits; the
root router forwards one wavelet per cycle once it has arrived (``ramp_latency_cycles`` later)
and the next router holds a free slot; a credit comes home ``ramp_credit_latency_cycles`` (or
``hop_credit_latency_cycles``) after its wavelet leaves (or is consumed). These are the rules the
wavelet-exact engine applies cycle by cycle; :mod:`fabric.express` uses the schedule to move an
uncontended stream at once.
"""

from __future__ import annotations

from collections import deque

import numpy as np


class SourceSchedules:
    """Issue and forward cycles of express streams, per parameter set (see :meth:`get`).

    Owned by one fabric engine (one configuration): relative to the stream's first cycle the
    schedule depends only on the mechanism parameters, and a shorter stream's schedule is a
    prefix of a longer one's, so each parameter set's is computed once (grown by doubling) and
    sliced."""

    def __init__(self) -> None:
        self._cache: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray]] = {}

    def get(
        self, n: int, begin: int, width: int, n_credits: int, lr: int, lc: int, b: int,
        hop: int, lch: int, hold: int = 0,
    ) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
        """Issue cycles ``s`` at the sending CE and forward cycles ``f`` at the root router.
        ``hold``: the root forwards nothing before ``begin + hold`` (its colour leaves teardown
        then; the wavelets issued meanwhile wait in its buffer)."""
        key = (width, n_credits, lr, lc, b, hop, lch, hold)
        cached = self._cache.get(key)
        if cached is None or len(cached[0]) < n:
            size = max(n, 2 * len(cached[0]) if cached else 1024)
            s_list, f_list = _recurrence(size, width, n_credits, lr, lc, b, hop, lch, hold)
            cached = (np.asarray(s_list, np.int64), np.asarray(f_list, np.int64))
            self._cache[key] = cached
        return cached[0][:n] + begin, cached[1][:n] + begin


def _recurrence(
    n: int, width: int, n_credits: int, lr: int, lc: int, b: int, hop: int, lch: int, hold: int = 0
) -> tuple[list[int], list[int]]:
    """The cycle-by-cycle rules of the sender and its router, from cycle 0 (see the module)."""
    begin = 0
    s = [0] * n
    f = [0] * n
    back: deque[int] = deque()
    avail = n_credits
    t = begin
    k = 0
    while k < n:
        while back and back[0] <= t:
            back.popleft()
            avail += 1
        if avail == 0:
            t = back[0]
            continue
        for _ in range(min(width, avail, n - k)):
            s[k] = t
            fk = t + lr if t + lr > hold else hold
            if k and f[k - 1] + 1 > fk:
                fk = f[k - 1] + 1
            if k >= b and f[k - b] + hop + lch > fk:
                fk = f[k - b] + hop + lch
            f[k] = fk
            back.append(fk + lc)
            avail -= 1
            k += 1
        t += 1
    return s, f
