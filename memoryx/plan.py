"""The execution plan: what MemoryX streams, in which order, and what it expects back.

The plan is data (the habit of disaggregated-training simulators): a list of :class:`Entry`, one
per *chunk* of a stream, in the order MemoryX sends them. MemoryX's coordinator walks it; each
chunk carries its entry down to the wafers as the command telling them what to compute; the
wafers send gradient chunks back in plan order; the analytical model and the trace are read
from the same list. The plan says nothing about time: times come from the mechanisms that carry
out each entry (tiers, links, the wafer's compute).

One entry is one transaction per link: a 64-system GPT-3 step is a few thousand entries, not
175 billion weights.
"""

from __future__ import annotations

import dataclasses
from typing import Any

#: Bytes of the command header every chunk carries (entry, sizes, layer).
COMMAND_BYTES = 64


@dataclasses.dataclass(frozen=True)
class Entry:
    """One chunk of one stream.

    - ``step``, ``pass_``: the training step and ``fwd`` or ``bwd``;
    - ``tensor``: the weight tensor streamed (``""`` for a command without weights, such as
      attention); ``order``: ``fwd`` (rows of W) or ``bwd`` (rows of W^T);
    - ``lo``, ``hi``: the rows of the stream order this chunk covers; ``glo``, ``ghi``: the rows
      of W whose gradients it requests (bwd chunks), in forward order;
    - ``stream_bytes``: what MemoryX reads and sends (values, indices, mask, header);
    - ``grad_bytes``: what comes back (FP32 gradients of the requested entries), 0 if nothing;
    - ``needs``: update keys ``(tensor, chunk)`` of the previous step this chunk waits for;
    - ``key``: the update key of the gradient it returns (``(tensor, chunk)``), or None;
    - ``work``: what the wafer computes (opaque here; the workload reads it);
    - ``params``: parameters the returned gradient updates; ``weights``: whether the chunk
      carries rows of ``tensor`` (False for a gradient request alone).
    """

    index: int
    step: int
    pass_: str
    tensor: str
    order: str
    lo: int
    hi: int
    stream_bytes: int
    grad_bytes: int = 0
    glo: int = 0
    ghi: int = 0
    needs: tuple[tuple[str, int], ...] = ()
    key: tuple[str, int] | None = None
    work: Any = None
    params: int = 0  # parameters whose update this chunk's gradient drives
    weights: bool = True  # the chunk carries rows of ``tensor`` (False: a request only)

    @property
    def returns_gradient(self) -> bool:
        return self.key is not None


@dataclasses.dataclass
class Chunk:
    """What travels: an entry (the command) and its payload, or None in size-only runs. On the
    way back, ``payload`` is the gradient rows (FP32) of ``entry.key``."""

    entry: Entry
    nbytes: int
    payload: Any = None
    flow: int | None = None  # trace flow id of the send that carried it last (None: untraced)

    def sent_by(self, code: int, *, back: bool = False) -> Chunk:
        """This chunk as sent on by the component whose ``flow_code`` is ``code`` (below
        2**23), on the way back (gradients) if ``back``: its flow id is unique per (plan entry,
        sender, direction), so the trace can draw each hop as a flow."""
        return dataclasses.replace(self, flow=(self.entry.index + 1) << 24 | int(back) << 23 | code)
