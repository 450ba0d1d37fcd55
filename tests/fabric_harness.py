"""A bare fabric for per-cycle router tests: routers on a cycle scheduler, with hand-written ramp
endpoints instead of compute engines (the fabric knows them only through
:class:`fabric.endpoints.RampEndpoint`).

``Bench(width, height, **fabric_params)`` builds the mesh; ``bench.route(x, y, colour, rx, tx)``
configures it; ``bench.inject(x, y, colour, items, at=cycle)`` makes the endpoint at (x, y) send
items up its ramp (one per cycle while it holds up-ramp credits, as a compute engine's
microthread would); ``bench.run()`` returns the log of what crossed which port in which cycle:
``(cycle, "x,y", port, colour, what)`` for every router send (``what`` is the wavelet's data, or
``"ctrl"``), and ``(cycle, "x,y", "deliver", colour, what)`` when a wavelet reaches an endpoint.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from fabric.config import FabricConfig
from fabric.engine import FabricEngine, Router
from fabric.routes import ColourRoute, Dir, Position
from fabric.wavelet import Wavelet
from simcore import Component, Simulation
from simcore.stepping import CycleScheduler
from simcore.tracing import ListTracer, TraceLevel


class Endpoint:
    """A ramp endpoint: sends what it is given, receives into a log, and gives back each ramp
    slot ``hold_cycles`` after a wavelet arrived (``None``: only when :meth:`release` is
    called)."""

    def __init__(self, bench: Bench, router: Router, hold_cycles: int | None) -> None:
        self.bench = bench
        self.engine = bench.engine
        self.router = router
        self.index = router.index
        self.path = router.path
        self.hold_cycles = hold_cycles
        self.outbox: deque[tuple[int, Wavelet]] = deque()
        self.up: dict[int, int] = {}
        self.held: list[int] = []  # colours of wavelets whose ramp slot is still held
        self.torn_down: list[tuple[int, int]] = []

    # -- RampEndpoint ----------------------------------------------------------------------------
    def down_credits(self, colour: int) -> int:
        return self.bench.down_credits

    def fabric_deliver(self, colour: int, w: Wavelet) -> None:
        t = self.engine.now_cycle()
        self.bench.log.append((t, self.name, "deliver", colour, "ctrl" if w.ctrl else w.data))
        if self.hold_cycles is None:
            self.held.append(colour)
        else:
            self.engine.later(self.hold_cycles, self.router.ramp_credit, colour)

    def up_credit(self, colour: int) -> None:
        self.up[colour] += 1
        if self.outbox:
            self.engine.activate_endpoint(self)

    def teardown_signal(self, colour: int, flow: int | None = None) -> None:
        self.torn_down.append((self.engine.now_cycle(), colour))

    def step(self, cycle: int) -> bool:
        if not self.outbox:
            return False
        colour, w = self.outbox[0]
        if self.up[colour] == 0:
            return False
        self.outbox.popleft()
        self.up[colour] -= 1
        self.engine.later(self.engine.ramp_latency, self.router.receive, Dir.RAMP, colour, w)
        return bool(self.outbox)

    # -- test controls ---------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return f"{self.router.xy[0]},{self.router.xy[1]}"

    def release(self) -> None:
        """Give back every held ramp slot (as a due action: the router sees it next cycle)."""
        for colour in self.held:
            self.engine.later(1, self.router.ramp_credit, colour)
        self.held.clear()


class Bench:
    def __init__(
        self, width: int, height: int, *, hold_cycles: int | None = 1, down_credits: int = 4,
        **fabric: Any,
    ) -> None:  # fmt: skip
        self.tracer = ListTracer(TraceLevel.DETAIL)
        self.sim = Simulation(tracer=self.tracer)
        top = Component(self.sim, "mesh", domain=self.sim.domain("mesh", 1_000_000_000))
        self.sched = CycleScheduler(top, ("routers", "endpoints"))
        self.cfg = FabricConfig(**fabric)
        self.engine = FabricEngine(self.sched, self.cfg, width, height)
        self.engine.detail = True
        self.down_credits = down_credits
        self.log: list[tuple[int, str, str, int, Any]] = []
        for y in range(height):
            for x in range(width):
                self.engine.add_router((x, y))
        self.engine.link_neighbours()
        self.ends = {}
        for r in self.engine.routers:
            r.ce = self.ends[r.xy] = Endpoint(self, r, hold_cycles)
        self.sim.check()

    def router(self, x: int, y: int) -> Router:
        return self.engine.by_xy[(x, y)]

    def route(
        self, x: int, y: int, colour: int, rx: list[str], tx: list[str], *more: tuple
    ) -> None:
        """Switch position 0 is (rx, tx); ``more`` are further positions (rx, tx)."""
        positions = [Position.make(rx, tx)] + [Position.make(r, t) for r, t in more]
        self.router(x, y).routes[colour] = ColourRoute(positions)

    def inject(self, x: int, y: int, colour: int, items: list, *, at: int = 1) -> None:
        end = self.ends[(x, y)]
        end.up.setdefault(colour, self.cfg.ramp_credits)
        for item in items:
            w = item if isinstance(item, Wavelet) else Wavelet(float(item))
            end.outbox.append((colour, w))
        self.sched.at(at, self.engine.activate_endpoint, end)

    def at(self, cycle: int, fn: Any, *args: Any) -> None:
        self.sched.at(cycle, fn, *args)

    def run(self) -> list[tuple[int, str, str, int, Any]]:
        self.sim.run()
        sends = [
            (e["cycle"], e["component"].split("[")[1].split("]")[0], e["args"]["port"],
             e["args"]["colour"], e["name"])
            for e in self.tracer.events
            if e["category"] == "wavelet"
        ]  # fmt: skip
        return sorted(sends + self.log, key=lambda e: (e[0], e[1], e[2]))

    def sends(self, name: str | None = None) -> list[tuple]:
        return [e for e in self.run() if name is None or e[1] == name]
