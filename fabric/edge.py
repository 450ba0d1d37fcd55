"""Edge I/O ports: where streams enter and leave the wafer (weights from MemoryX, host I/O).

An edge port sits on the outward side of a border router, in place of the neighbour that side
lacks, and looks to that router exactly like a neighbour router: the link between them has the
hop latency and the router's per-colour buffer credits.

- An **input** port streams ``data`` on one colour into its router from ``start_cycle``: one
  wavelet per cycle while it holds a credit for the router's buffer. ``data`` is an array of
  FP32 values, or a sequence mixing numbers and :class:`fabric.wavelet.Wavelet` objects (control
  wavelets naming a control task, e.g. the PSUM/FSUM commands of weight streaming).
- An **output** port accepts every wavelet the router sends off the edge on its colour, records
  its cycle and value, and returns the credit after the hop credit latency.

Both run in the wavelet-exact engine (a stream from the edge has no sending CE, so it is never
an express stream); ``bytes_per_cycle`` reports the I/O bandwidth a run needed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from fabric.routes import Dir, pe_name
from fabric.wavelet import Wavelet
from simcore.errors import BuildError

if TYPE_CHECKING:
    from fabric.engine import FabricEngine, Router

EDGE_INDEX_BASE = 1 << 40  # edge ports share the engine's "active steppers" table with CEs


class EdgePort:
    """One edge port. ``kind`` is 'input' or 'output'."""

    def __init__(
        self,
        engine: FabricEngine,
        router: Router,
        side: Dir,
        colour: int,
        kind: str,
        *,
        data: np.ndarray | None = None,
        start_cycle: int = 1,
        index: int = 0,
    ) -> None:
        if side is Dir.RAMP:
            raise BuildError("an edge port needs a side N, E, S or W, not RAMP")
        if router.nbr.get(side) is not None:
            raise BuildError(
                f"edge port at {pe_name(router.xy)} side {side.name}: that side is not on the "
                "edge of the mesh (a neighbour PE is there)"
            )
        self.engine = engine
        self.router = router
        self.side = side
        self.colour = colour
        self.kind = kind
        self.index = EDGE_INDEX_BASE + index
        self.path = f"wafer/edge[{router.xy[0]},{router.xy[1]},{side.name}]"
        self.values: Any = None
        if data is not None:
            mixed = any(isinstance(d, Wavelet) for d in data)
            self.values = list(data) if mixed else np.asarray(data, dtype=np.float32)
        self.start_cycle = start_cycle
        self.sent = 0
        self.credits = engine.cfg.router_buffer_wavelets
        self.received: list[float] = []
        self.cycles: list[int] = []
        self.first_cycle = -1
        self.last_cycle = -1

    @property
    def name(self) -> str:
        return self.path

    # -- input side --------------------------------------------------------------------------------
    def begin(self) -> None:
        self.first_cycle = self.engine.now_cycle()
        self.engine.activate_ce(self)

    def fabric_step(self, t: int) -> bool:
        """Inject the next wavelet if the router's buffer has a slot for it."""
        if self.values is None or self.sent >= len(self.values) or self.credits <= 0:
            return False
        item = self.values[self.sent]
        w = item if isinstance(item, Wavelet) else Wavelet(float(item))
        self.sent += 1
        self.credits -= 1
        self.last_cycle = t
        engine = self.engine
        engine.later(engine.hop_latency, self.router.receive, self.side, self.colour, w)
        return self.sent < len(self.values) and self.credits > 0

    def return_credit(self, port: Dir, colour: int) -> None:
        self.credits += 1
        if self.values is not None and self.sent < len(self.values):
            self.engine.activate_ce(self)

    # -- output side -------------------------------------------------------------------------------
    def receive(self, port: Dir, colour: int, w: Wavelet) -> None:
        if w.ctrl:
            pass  # control wavelets leave the wafer too; they carry no data
        else:
            t = self.engine.now_cycle()
            if self.first_cycle < 0:
                self.first_cycle = t
            self.last_cycle = t
            self.received.append(w.data)
            self.cycles.append(t)
        engine = self.engine
        engine.later(engine.hop_credit_latency, self.router.return_credit, self.side, colour)

    # -- results -----------------------------------------------------------------------------------
    @property
    def data(self) -> np.ndarray:
        """What an output port received, in arrival order."""
        return np.asarray(self.received, dtype=np.float32)

    @property
    def words(self) -> int:
        return self.sent if self.kind == "input" else len(self.received)

    def bytes_per_cycle(self) -> float:
        """Average I/O bandwidth over this port's active span (4-byte wavelets)."""
        if self.first_cycle < 0 or self.words == 0:
            return 0.0
        span = self.last_cycle - self.first_cycle + 1
        return 4.0 * self.words / span

    def describe(self) -> str:
        if self.kind == "input":
            total = 0 if self.values is None else len(self.values)
            return f"{self.path}: input on colour {self.colour}, {self.sent} of {total} sent"
        return f"{self.path}: output on colour {self.colour}, {len(self.received)} received"

    def pending_note(self) -> Any:
        if self.kind == "input" and self.values is not None and self.sent < len(self.values):
            return f"{self.describe()} (the router is not accepting colour {self.colour})"
        return None
