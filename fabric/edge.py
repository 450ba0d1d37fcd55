"""Edge I/O ports: where streams enter and leave the wafer (weights from MemoryX, host I/O).

An edge port is a component (``wafer/edge[x,y,SIDE]``) on the outward side of a border router, in
place of the neighbour that side lacks, and looks to that router exactly like a neighbour router:
the link between them has the hop latency and the router's per-colour buffer credits. On its
other side it has a kernel port, so another model (a MemoryX, a SwarmX link, a host) connects to
the wafer with ``sim.connect``, in its own clock domain if it likes. The port bridges a
:class:`simcore.Channel` to router credits:

- An **input** port (:class:`EdgeInput`, port ``in``) injects one wavelet per wafer cycle on its
  colour while it holds a credit for the router's buffer. Its wavelets come either through its
  ``in`` port (any items: numbers become data wavelets, :class:`fabric.wavelet.Wavelet` objects
  pass as they are, e.g. control wavelets naming a control task) or, for a stand-alone wafer,
  from ``data`` preloaded at build time and released from ``start_cycle`` (the port is then
  unused). Through the port, the edge takes the next item from the channel only once it has
  injected the previous one (a one-wavelet register): back-pressure from the router reaches the
  channel's credits. An item the channel delivers at kernel time T is injected no earlier than
  the first wafer cycle that starts after T (the register's clock-domain crossing), whatever
  the sender's clock.
- An **output** port (:class:`EdgeOutput`, port ``out``, optional) accepts every wavelet the
  router sends off the edge on its colour and records each data wavelet's cycle and value. With
  the port connected it also puts each wavelet (data and control) into the channel, and returns
  the router's credit only when the channel has accepted it (``hop_credit_latency_cycles``
  later): a slow receiver back-pressures the fabric. Unconnected, it returns the credit at once
  (after the credit latency), as a sink that never fills.

``bytes_per_cycle`` reports the I/O bandwidth a run needed. A stream from the edge has no sending
compute engine, so it is never an express stream (both fidelities move it wavelet by wavelet).
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

import numpy as np

from fabric.routes import Dir, RouteError, pe_name
from fabric.wavelet import Wavelet
from simcore.component import Component
from simcore.errors import BuildError

if TYPE_CHECKING:
    from fabric.engine import FabricEngine, Router

EDGE_INDEX_BASE = 1 << 40  # edge ports step after every compute engine in the endpoints group


class EdgePort(Component):
    """What both kinds of edge port share: their router, side, colour and counts."""

    kind = ""

    def __init__(
        self, parent: Component, engine: FabricEngine, router: Router, side: Dir, colour: int,
        *, index: int,
    ) -> None:  # fmt: skip
        if side is Dir.RAMP:
            raise BuildError("an edge port needs a side N, E, S or W, not RAMP")
        if router.nbr.get(side) is not None:
            raise BuildError(
                f"edge port at {pe_name(router.xy)} side {side.name}: that side is not on the "
                "edge of the mesh (a neighbour PE is there)"
            )
        super().__init__(parent, f"edge[{router.xy[0]},{router.xy[1]},{side.name}]")
        self.engine = engine
        self.router = router
        self.side = side
        self.colour = colour
        self.index = EDGE_INDEX_BASE + index
        self.words = 0  # wavelets that crossed the port (data wavelets for an output)
        self.first_cycle = -1  # the first and last cycle one did
        self.last_cycle = -1
        router.nbr[side] = self

    def bytes_per_cycle(self) -> float:
        """Average I/O bandwidth over this port's active span (4-byte wavelets)."""
        if self.first_cycle < 0 or self.words == 0:
            return 0.0
        span = self.last_cycle - self.first_cycle + 1
        return 4.0 * self.words / span

    def progress_count(self) -> int:
        return self.words


class EdgeInput(EdgePort):
    """Injects a stream into the router (see the module docstring)."""

    kind = "input"

    def __init__(
        self, parent: Component, engine: FabricEngine, router: Router, side: Dir, colour: int,
        *, index: int, data: Any = None, start_cycle: int = 1,
    ) -> None:  # fmt: skip
        super().__init__(parent, engine, router, side, colour, index=index)
        self.inp = self.in_port("in", optional=data is not None)
        self.preloaded: int | None = None
        self.staged: deque[Any] = deque()
        if data is not None:
            mixed = any(isinstance(d, Wavelet) for d in data)
            values = list(data) if mixed else np.asarray(data, dtype=np.float32).tolist()
            self.staged.extend(values)
            self.preloaded = len(values)
        self.start_cycle = start_cycle
        self.credits = engine.cfg.router_buffer_wavelets
        self._fetching = False

    def check(self) -> None:
        if self.preloaded is not None and self.inp.channel is not None:
            raise BuildError(
                f"{self.path}: has preloaded data and a connected 'in' port; feed it one way "
                "(drop the data from add_edge_input, or do not connect the port)"
            )

    def start(self) -> None:
        if self.preloaded is not None:
            self.engine.at(self.start_cycle, self._begin)
        else:
            self._fetch()

    def _begin(self) -> None:
        self.engine.activate_endpoint(self)

    # -- the channel side ----------------------------------------------------------------------
    def _fetch(self) -> None:
        """Take the next item from the channel (once it has arrived)."""
        if self._fetching:
            return
        self._fetching = True
        self.inp.get().callbacks.append(self._arrived)

    def _arrived(self, ev: Any) -> None:
        self._fetching = False
        self.staged.append(ev.value)
        self.engine.later(1, self.engine.activate_endpoint, self)

    # -- the router side -----------------------------------------------------------------------
    def step(self, t: int) -> bool:
        """Inject the next wavelet if the router's buffer has a slot for it."""
        if not self.staged or self.credits <= 0:
            return False
        item = self.staged.popleft()
        w = item if isinstance(item, Wavelet) else Wavelet(float(item))
        self.words += 1
        self.credits -= 1
        if self.first_cycle < 0:
            self.first_cycle = t
        self.last_cycle = t
        engine = self.engine
        engine.later(engine.hop_latency, self.router.receive, self.side, self.colour, w)
        if self.preloaded is None and not self.staged:
            self._fetch()
        return bool(self.staged) and self.credits > 0

    def return_credit(self, port: Dir, colour: int) -> None:
        self.credits += 1
        if self.staged:
            self.engine.activate_endpoint(self)

    def receive(self, port: Dir, colour: int, w: Wavelet) -> None:
        raise RouteError(
            f"colour {colour}: {self.router.name} sends {self.side.name} into {self.path}, an "
            "edge input (make that side an edge output, or route the colour elsewhere)"
        )

    def describe(self) -> str:
        if self.preloaded is not None:
            return f"input on colour {self.colour}, {self.words} of {self.preloaded} sent"
        return f"input on colour {self.colour}, {self.words} sent, {len(self.staged)} waiting"

    def pending(self) -> str | None:
        if self.staged:
            return f"{self.describe()} (the router is not accepting colour {self.colour})"
        return None


class EdgeOutput(EdgePort):
    """Takes what the router sends off the edge (see the module docstring)."""

    kind = "output"

    def __init__(
        self, parent: Component, engine: FabricEngine, router: Router, side: Dir, colour: int,
        *, index: int,
    ) -> None:  # fmt: skip
        super().__init__(parent, engine, router, side, colour, index=index)
        self.out = self.out_port("out", optional=True)
        self.received: list[float] = []
        self.cycles: list[int] = []
        self.unaccepted = 0  # wavelets put into the channel and not yet accepted

    @property
    def data(self) -> np.ndarray:
        """The data wavelets received, in arrival order."""
        return np.asarray(self.received, dtype=np.float32)

    def receive(self, port: Dir, colour: int, w: Wavelet) -> None:
        engine = self.engine
        if not w.ctrl:  # control wavelets leave the wafer too; they carry no data
            t = engine.now_cycle()
            if self.first_cycle < 0:
                self.first_cycle = t
            self.last_cycle = t
            self.received.append(w.data)
            self.cycles.append(t)
            self.words += 1
        if self.out.channel is None:
            engine.later(engine.hop_credit_latency, self.router.return_credit, self.side, colour)
            return
        ev = self.out.put(w)
        if ev.triggered:
            engine.later(engine.hop_credit_latency, self.router.return_credit, self.side, colour)
        else:
            self.unaccepted += 1
            ev.callbacks.append(self._accepted)

    def _accepted(self, ev: Any) -> None:
        self.unaccepted -= 1
        engine = self.engine
        engine.later(engine.hop_credit_latency, self.router.return_credit, self.side, self.colour)

    def return_credit(self, port: Dir, colour: int) -> None:
        raise RouteError(f"{self.path}: an edge output never sends into the wafer")

    def describe(self) -> str:
        return f"output on colour {self.colour}, {len(self.received)} received"

    def pending(self) -> str | None:
        if self.unaccepted:
            return f"{self.describe()}, {self.unaccepted} not yet accepted by its channel"
        return None
