"""The wafer: a 2D mesh of PEs (router + CE + SRAM each) running a :class:`pe.program.Layout`.

Building a wafer creates every PE's router and compute engine, runs each tile's PE code (which
allocates SRAM, makes DSDs, binds tasks and routes), links the routers into a mesh, adds the edge
ports and checks the routes. Starting it activates each PE's start tasks.

The wafer is the component that owns the wafer clock domain and its
:class:`simcore.stepping.CycleScheduler` (step groups ``routers``, then ``endpoints``: compute
engines and edge ports). Each PE is a component (``wafer/pe[x,y]``) holding its router and compute
engine as parts the scheduler steps; they are not components of their own, which keeps a
full-size wafer's 745,500 PEs affordable. Edge ports are components with kernel ports
(:mod:`fabric.edge`): another model connects to the wafer with ``sim.connect``.
"""

from __future__ import annotations

import dataclasses
import gc
import operator
from typing import Literal

from fabric.config import FabricConfig
from fabric.edge import EdgeInput, EdgeOutput, EdgePort
from fabric.engine import FabricEngine
from fabric.routes import check_routes, check_switch_positions, distinct_positions, pe_name
from pe.ce import ComputeEngine
from pe.config import PeConfig
from pe.isa import TensorUnit
from pe.memory import Sram, SramArena
from pe.ops import AsyncOp
from pe.program import Layout, PeBuilder
from simcore.component import Component
from simcore.config import param, section
from simcore.errors import BuildError
from simcore.sim import Simulation
from simcore.stepping import CycleScheduler
from simcore.tracing import TraceLevel
from wafer.lockstep import LockstepPhase, VectorPhase

MAX_WIDTH, MAX_HEIGHT = 750, 994  # the SDK's usable PE array (docs/wafer/hardware.md)
_YX = operator.itemgetter(1, 0)  # (x, y) -> (y, x): the PEs' build order, row by row


@dataclasses.dataclass(frozen=True, kw_only=True)
class CeTiming:
    """Costs of the CE's non-tensor work (unknowns; defaults: docs/wafer/hardware.md)."""

    route_write_cycles: int = param(
        10,
        "cycles the CE spends issuing one router configuration register write (spec unknown; "
        "set with route_write_latency_cycles from the broadcast micro-benchmark's constant and "
        "SUMMA's per-step control, docs/wafer/summa.md)",
        min=0,
    )
    route_write_latency_cycles: int = param(
        120,
        "cycles from the CE issuing a router configuration write to the router applying it; the "
        "CE goes on meanwhile (a posted write). 0: the write lands when issued "
        "(docs/wafer/summa.md, 'The broadcast constant: CE work and latency')",
        min=0,
    )
    control_op_cycles: int = param(1, "cycles of an activate / block / unblock", min=0)
    timestamp_cycles: int = param(1, "cycles to read the timestamp counter", min=0)


#: The wafer's engines, each a value of ``WaferConfig.fidelity`` (see its description): every
#: one gives the same cycles, marks and data (tests/test_conformance.py). ``fast``, the
#: default, is not an engine of its own but a choice among them (express, plus the array phase
#: where the program says it pays).
ENGINES = ("reference", "express", "lockstep-scalar", "lockstep-array")
Fidelity = Literal["fast", "reference", "express", "lockstep-scalar", "lockstep-array"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class WaferConfig:
    clock_hz: int = param(
        850_000_000, "wafer clock (the SDK measurements ran at 850 MHz; design 1.1 GHz)", min=1
    )
    fidelity: Fidelity = param(
        "fast",
        "how the fabric is simulated (the same cycles, marks and data whichever: speed only): "
        "'reference' steps every wavelet through every router; 'express' moves an uncontended "
        "stream as one express stream and the rest wavelet by wavelet; 'lockstep-scalar' and "
        "'lockstep-array' add the lock-step phase (written out per part, or on arrays) for the "
        "broadcasts on the colours the program declares (Layout.lockstep_colours); 'fast' is "
        "'express' plus the array phase where the program says it pays (docs/design.md, "
        "'Fidelities: one answer, several engines')",
    )
    fabric: FabricConfig = section(FabricConfig, "routers, links and ramps")
    pe: PeConfig = section(PeConfig, "processing element: SRAM, pipeline, instruction costs")
    ce: CeTiming = section(CeTiming, "costs of task control and router writes")


class Pe(Component):
    """One PE of the mesh: holds its router and compute engine."""

    def __init__(self, wafer: Wafer, xy: tuple[int, int], index: int) -> None:
        super().__init__(wafer, pe_name(xy))
        self.xy = xy
        self.router = wafer.engine.add_router(xy)
        self.sram = Sram(wafer.cfg.pe, owner=self.path, arena=wafer.sram_arena)
        self.ce = ComputeEngine(wafer, xy, index, self.path, self.sram, wafer.cfg.pe)
        self.ce.router = self.router
        self.router.ce = self.ce
        self.start_tasks: list[int] = []

    def pending(self) -> list[str] | None:
        notes = self.ce.pending()
        held = self.router.describe()
        if held:
            notes.append(f"router holds {held}")
        return notes or None


class Wafer(Component):
    """The PE mesh of one layout. ``pes[(x, y)]`` gives a PE."""

    def __init__(self, sim: Simulation, cfg: WaferConfig, layout: Layout) -> None:
        if layout.width > MAX_WIDTH or layout.height > MAX_HEIGHT:
            raise BuildError(
                f"layout {layout.width}x{layout.height} exceeds the wafer's usable "
                f"{MAX_WIDTH}x{MAX_HEIGHT} PEs"
            )
        dom = sim.domain("wafer", cfg.clock_hz)
        super().__init__(sim, "wafer", domain=dom)
        self.cfg = cfg
        self.layout = layout
        self.sched = CycleScheduler(self, ("routers", "endpoints"))
        self.engine: FabricEngine[ComputeEngine, AsyncOp] = FabricEngine(
            self.sched, cfg.fabric, layout.width, layout.height
        )
        self.engine.fast = cfg.fidelity != "reference"  # express streams
        self.tensor_unit = TensorUnit(cfg.pe)  # one for all compute engines: it holds no state
        self.flows_issued = 0  # trace flow ids handed out by the compute engines (tracing only)
        self.sram_arena = SramArena()  # the PEs' SRAMs: packed, or only touched pages
        self.pes: dict[tuple[int, int], Pe] = {}
        # The cyclic garbage collector is off while the PEs are built: they are a few hundred
        # long-lived objects each, and its full collections, each rescanning everything built
        # so far, took 37 % of a 96 x 96 build's CPU (more the larger the wafer). Once built,
        # they are frozen out of its scans (gc.freeze): else the first young collection after
        # the build scans every object the build made (a third of a 192 x 192 build's CPU);
        # a run's end unfreezes them (simcore.sim), and what the build left as garbage is
        # collected from then on. Changes nothing simulated.
        enabled = gc.isenabled()
        gc.disable()
        try:
            self._build(sim, cfg, layout)
        except BaseException:
            if enabled:
                gc.enable()
            raise
        if enabled:
            gc.freeze()
            gc.enable()
        self.engine.lockstep = self.lockstep_phase()

    def _build(self, sim: Simulation, cfg: WaferConfig, layout: Layout) -> None:
        """Every PE, its program, the routes, edge ports and filters (see the module doc)."""
        for y in range(layout.height):
            for x in range(layout.width):
                self.pes[(x, y)] = Pe(self, (x, y), len(self.pes))
        self.engine.link_neighbours()
        # Each PE's code writes into the arena's scratch SRAM; then its SRAM is packed to the
        # bytes its buffers take (pe.memory.SramArena): a PE holding a few hundred bytes
        # shares a page with its neighbours instead of taking one of its own.
        arena = self.sram_arena
        arena.building = True
        colours = cfg.fabric.colours
        pes, tiles = self.pes, layout.tiles
        try:
            for xy in sorted(tiles, key=_YX):
                tile = tiles[xy]
                pe = pes[xy]
                builder = PeBuilder(pe.ce, layout, tile.params, colours)
                tile.code(builder)
                pe.start_tasks = builder.start_tasks
                pe.sram.settle()
        finally:
            arena.building = False
        for xy, colours in layout.routes.items():
            router = self.pes[xy].router
            if router.routes:
                router.routes.update(colours)
            else:  # the layout's table itself (its routes are the router's objects anyway)
                router.routes = colours
        self.edges: list[EdgePort] = []
        for x, y, side, colour, kind, data, start in layout.edges:
            router = self.pes[(x, y)].router
            port: EdgePort
            if kind == "input":
                port = EdgeInput(
                    self, self.engine, router, side, colour, index=len(self.edges), data=data,
                    start_cycle=start,
                )  # fmt: skip
            else:
                port = EdgeOutput(self, self.engine, router, side, colour, index=len(self.edges))
            self.edges.append(port)
        for xy, filters in layout.filters.items():
            if len(filters) > cfg.fabric.filters_per_pe:
                raise BuildError(
                    f"{self.pes[xy].path}: {len(filters)} wavelet filters on colours "
                    f"{sorted(filters)}, but a PE has {cfg.fabric.filters_per_pe} "
                    "(fabric.filters_per_pe)"
                )
            self.pes[xy].router.filters.update(filters)

    def lockstep_phase(self) -> LockstepPhase | None:
        """The lock-step phase the fidelity asks for, on the colours the program declares
        (none if it declares none): both forms in their fidelities, the array form in 'fast'
        if the program says it pays there (``Layout.lockstep_pays``: a speed hint)."""
        colours = self.layout.lockstep_colours
        fidelity = self.cfg.fidelity
        if not colours or fidelity in ("reference", "express"):
            return None
        if fidelity == "lockstep-scalar":
            return LockstepPhase(self, colours)
        if fidelity == "fast" and not self.layout.lockstep_pays:
            return None
        return VectorPhase(self, colours)

    def region_pes(self) -> list[Pe]:
        """The PEs inside the run's trace region (:attr:`Simulation.trace_region`), or all."""
        region = self.sim.trace_region
        if region is None:
            return list(self.pes.values())
        x0, x1, y0, y1 = region
        w, h = self.layout.width, self.layout.height
        return [self.pes[(x, y)] for y in range(y0, min(y1, h)) for x in range(x0, min(x1, w))]

    def check(self) -> None:
        region = self.sim.trace_region
        if region is not None and not self.region_pes():
            x0, x1, y0, y1 = region
            raise BuildError(
                f"--trace-region {x0}:{x1},{y0}:{y1} holds no PE of the {self.layout.width} x "
                f"{self.layout.height} array; give x0 < {self.layout.width} and y0 < "
                f"{self.layout.height}"
            )
        limit = self.cfg.fabric.switch_positions
        routes = self.layout.routes
        distinct = distinct_positions(routes)  # (a full array's routes share a handful)
        over = []
        if any(len(positions) > limit for positions in distinct):
            over = [
                (xy, colour)
                for xy, colours in routes.items()
                for colour, route in colours.items()
                if len(route.positions) > limit
            ]
        if over:  # the first in PE and colour order
            xy, colour = min(over)
            check_switch_positions(
                self.pes[xy].path, colour, len(routes[xy][colour].positions), limit
            )
        edges = {((p.router.xy, p.side), p.kind) for p in self.edges}
        check_routes(
            self.layout.routes, self.layout.width, self.layout.height, edges, distinct=distinct
        )

    def start(self) -> None:
        level = self.sim.trace_level
        self.engine.detail = level >= TraceLevel.DETAIL
        if self.engine.detail and self.sim.trace_region is not None:
            # Detail events (wavelets, stalls, buffer and queue occupancy) of the region only.
            self.engine.detail_paths = frozenset(
                path for pe in self.region_pes() for path in (pe.router.path, f"{pe.path}/ce")
            )
        for pe in self.pes.values():
            pe.ce.trace_level = level
            for task in pe.start_tasks:
                pe.ce.activate_at_start(task)

    def progress_count(self) -> int:
        """Wavelets forwarded, instructions run, operations finished (edge ports count their
        own words)."""
        total = 0
        for pe in self.pes.values():
            ce = pe.ce
            total += pe.router.forwarded + ce.instructions + ce.ops_finished
        return total

    def activity(self) -> dict[str, tuple[int, str]]:
        out = {}
        for pe in self.pes.values():
            last = pe.ce.last_task
            if last is not None:
                out[pe.path] = (pe.ce.tasks_run, f"task '{last.name}' (id {last.id})")
        return out

    def edge(self, x: int, y: int, side: str) -> EdgePort:
        for port in self.edges:
            if port.router.xy == (x, y) and port.side.name == side.upper():
                return port
        raise BuildError(f"no edge port at PE ({x},{y}) side {side}")

    def ce(self, x: int, y: int) -> ComputeEngine:
        return self.pes[(x, y)].ce

    def span_cycles(self, start: str = "start", end: str = "end") -> int:
        """max(end) - min(start) over the PEs that recorded both marks (the SDK's measure)."""
        starts = [pe.ce.marks[start] for pe in self.pes.values() if start in pe.ce.marks]
        ends = [pe.ce.marks[end] for pe in self.pes.values() if end in pe.ce.marks]
        if not starts or not ends:
            raise BuildError(f"no PE recorded both '{start}' and '{end}' marks")
        return max(ends) - min(starts)
