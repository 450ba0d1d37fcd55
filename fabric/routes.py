"""Static routes: directions, per-colour router configurations, and the route check.

A router has five ports: N, E, S, W and RAMP (to its own CE). For each colour a router holds up
to four *switch positions*; position 0 is a full (rx set, tx set) pair and each later position
changes one input or one output. Control wavelets advance (SWITCH_ADV) or reset (SWITCH_RST) the
position after they have passed; TEARDOWN puts the colour in teardown mode (all its traffic held)
and runs the PE's teardown handler. Several tx ports multicast.

Coordinates follow the SDK: x grows to the East, y grows to the South; N is y-1.

:func:`check_routes` runs before a run: for every colour and every source (a router whose rx
includes RAMP), the set of routers a wavelet can reach must form a tree (no router reached twice,
no cycle), every hop must land on a router that accepts from that side, stay on the mesh, and
several rx on one router are rejected where wavelets could arrive from two sides at once.
Violations are :class:`RouteError` messages that name the PEs and the colour.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable, Sequence

from simcore.errors import BuildError


class RouteError(BuildError):
    """Routes that cannot work: named PEs, colour and the reason."""


class Dir(enum.IntEnum):
    N = 0
    E = 1
    S = 2
    W = 3
    RAMP = 4

    @property
    def opposite(self) -> Dir:
        return _OPPOSITE[self]


_OPPOSITE = {Dir.N: Dir.S, Dir.S: Dir.N, Dir.E: Dir.W, Dir.W: Dir.E, Dir.RAMP: Dir.RAMP}
STEP = {Dir.N: (0, -1), Dir.S: (0, 1), Dir.E: (1, 0), Dir.W: (-1, 0)}


def dirs(spec: Iterable[Dir | str]) -> frozenset[Dir]:
    out = set()
    for d in spec:
        out.add(d if isinstance(d, Dir) else Dir[d.upper()])
    return frozenset(out)


@dataclasses.dataclass(frozen=True)
class Position:
    """One switch position of a colour: the ports it accepts from and the ports it sends to."""

    rx: frozenset[Dir]
    tx: tuple[Dir, ...]

    @staticmethod
    def make(rx: Iterable[Dir | str], tx: Iterable[Dir | str]) -> Position:
        rx, tx = tuple(rx), tuple(tx)
        pos = _POSITIONS.get((rx, tx))
        if pos is None:
            pos = _POSITIONS[(rx, tx)] = Position(dirs(rx), tuple(sorted(dirs(tx))))
        return pos

    def describe(self) -> str:
        rx = ",".join(d.name for d in sorted(self.rx)) or "-"
        tx = ",".join(d.name for d in self.tx) or "-"
        return f"rx={{{rx}}} tx={{{tx}}}"


@dataclasses.dataclass(slots=True)
class ColourRoute:
    """The switch positions of one colour on one router, its current position and teardown."""

    positions: Sequence[Position]  # (a tuple may be shared by routes: replaced, never changed)
    pos: int = 0
    teardown: bool = False
    ring: bool = True  # SWITCH_ADV past the last position wraps to pos0

    @property
    def current(self) -> Position:
        return self.positions[self.pos]

    def advance(self) -> None:
        if self.pos + 1 < len(self.positions):
            self.pos += 1
        elif self.ring:
            self.pos = 0

    def reset(self) -> None:
        self.pos = 0


_POSITIONS: dict[tuple[tuple, tuple], Position] = {}  # Position is frozen: safe to share


@dataclasses.dataclass
class WaveletFilter:
    """A router's wavelet filter on one colour: which data wavelets go down the RAMP.

    Wavelets of the colour are counted from the last reset (``clear_filters``). A ``counter``
    filter lets wavelet i down when ``i % period == index`` (e.g. a scatter: PE k keeps every
    n-th word); a ``range`` filter when ``lo <= i <= hi``. Filtered wavelets are still forwarded
    on the colour's other tx ports; control wavelets always pass.
    """

    kind: str
    period: int = 1
    index: int = 0
    lo: int = 0
    hi: int = 2**62
    count: int = 0

    def __post_init__(self) -> None:
        if self.kind not in ("counter", "range"):
            raise BuildError(f"wavelet filter kind {self.kind!r} is not 'counter' or 'range'")
        if self.period < 1 or not 0 <= self.index < self.period or self.lo > self.hi:
            raise BuildError(
                f"wavelet filter ({self.kind}, period={self.period}, index={self.index}, "
                f"lo={self.lo}, hi={self.hi}) admits nothing: need period >= 1, "
                "0 <= index < period and lo <= hi"
            )

    def admit(self) -> bool:
        i = self.count
        self.count = i + 1
        if self.kind == "counter":
            return i % self.period == self.index
        return self.lo <= i <= self.hi


def check_switch_positions(where: str, colour: int, n: int, limit: int) -> None:
    """A colour may have at most ``limit`` switch positions (``fabric.switch_positions``)."""
    if n > limit:
        raise RouteError(
            f"{where}: colour {colour} has {n} switch positions, but a router has {limit} per "
            "colour (fabric.switch_positions); use fewer positions or another colour"
        )


def pe_name(xy: tuple[int, int]) -> str:
    return f"pe[{xy[0]},{xy[1]}]"


def distinct_positions(
    routes: dict[tuple[int, int], dict[int, ColourRoute]],
) -> list[Sequence[Position]]:
    """The distinct positions sequences (by identity) of all the routes: a full array's
    millions of routes share a handful (one-position routes share their tuple)."""
    return list(
        {id(cr.positions): cr.positions for rs in routes.values() for cr in rs.values()}.values()
    )


def check_routes(
    routes: dict[tuple[int, int], dict[int, ColourRoute]],
    width: int,
    height: int,
    edges: set[tuple[tuple[tuple[int, int], Dir], str]] = frozenset(),  # type: ignore[assignment]
    *,
    distinct: list[Sequence[Position]] | None = None,
) -> None:
    """Reject route configurations that cannot work (see the module docstring).

    ``edges`` holds ((xy, side), 'input'|'output') for the wafer's edge ports: a tx off the mesh
    is allowed onto an output port, and a router fed by an input port is a source.
    ``distinct``: :func:`distinct_positions` of ``routes`` if the caller has it."""
    # Only a hop off a router can be wrong (a hop off the mesh, into a router that does not
    # take it, two ways in, a loop): when no route's positions hop anywhere (a full array's
    # routes: the colours' initial teardown routes), there is nothing to check.
    if distinct is None:
        distinct = distinct_positions(routes)
    if not any(d is not Dir.RAMP for ps in distinct for p in ps for d in p.tx):
        return
    by_colour: dict[int, dict[tuple[int, int], ColourRoute]] = {}
    for xy in sorted(routes):  # (each colour's table in PE order; the colours sorted below)
        for colour, cr in routes[xy].items():
            by_colour.setdefault(colour, {})[xy] = cr
    for colour in sorted(by_colour):
        table = by_colour[colour]
        for pos_index in range(max(len(cr.positions) for cr in table.values())):
            _check_position(colour, table, pos_index, width, height, edges)


def _position(cr: ColourRoute, i: int) -> Position:
    return cr.positions[min(i, len(cr.positions) - 1)]


def _check_position(
    colour: int,
    table: dict[tuple[int, int], ColourRoute],
    pos_index: int,
    width: int,
    height: int,
    edges: set[tuple[tuple[tuple[int, int], Dir], str]],
) -> None:
    import networkx as nx  # checking routes needs it; describing a kind's parameters does not

    graph = nx.DiGraph()
    # Per distinct switch position (a full array has a handful for millions of routes): its
    # hops off the router, and whether it is a source (rx from the RAMP or an edge input).
    hops: dict[Position, tuple[Dir, ...]] = {}
    ramp_in: dict[Position, bool] = {}
    sources: list[tuple[int, int]] = []
    edge_inputs = {side_of[0] for side_of, kind in edges if kind == "input"}
    for xy, cr in table.items():  # (in PE order: check_routes builds it so)
        positions = cr.positions
        p = positions[pos_index] if pos_index < len(positions) else positions[-1]
        out = hops.get(p)
        if out is None:
            out = hops[p] = tuple(d for d in p.tx if d is not Dir.RAMP)
            ramp_in[p] = Dir.RAMP in p.rx
        if ramp_in[p] or (xy in edge_inputs and any(((xy, d), "input") in edges for d in p.rx)):
            sources.append(xy)
        for d in out:
            dx, dy = STEP[d]
            nxy = (xy[0] + dx, xy[1] + dy)
            if not (0 <= nxy[0] < width and 0 <= nxy[1] < height):
                if ((xy, d), "output") in edges:
                    continue
                raise RouteError(
                    f"colour {colour}: {pe_name(xy)} sends {d.name} off the edge of the "
                    f"{width}x{height} mesh (position {pos_index}: {p.describe()})"
                )
            other = table.get(nxy)
            if other is None or d.opposite not in _position(other, pos_index).rx:
                got = _position(other, pos_index).describe() if other else "no route"
                raise RouteError(
                    f"colour {colour}: {pe_name(xy)} sends {d.name} to {pe_name(nxy)}, which does "
                    f"not accept from {d.opposite.name} (it has {got}); add {d.opposite.name} to "
                    f"its rx or remove {d.name} from {pe_name(xy)}'s tx"
                )
            graph.add_edge(xy, nxy)
    for src in sources:
        if src not in graph:
            continue
        reach = nx.bfs_tree(graph, src)
        for node in sorted(reach):
            preds = [p for p in graph.predecessors(node) if p in reach]
            if len(preds) > 1:
                names = " and ".join(pe_name(p) for p in sorted(preds))
                raise RouteError(
                    f"colour {colour}: wavelets from {pe_name(src)} reach {pe_name(node)} from "
                    f"both {names}; several rx are only safe when wavelets never arrive from two "
                    "sides at once (use another colour for one of the paths)"
                )
        try:
            cycle = nx.find_cycle(graph.subgraph(reach.nodes), src)
        except nx.NetworkXNoCycle:
            cycle = None
        if cycle:
            path = " -> ".join(pe_name(a) for a, _ in cycle)
            raise RouteError(
                f"colour {colour}: the route from {pe_name(src)} loops ({path}); "
                "a colour's routes must form a tree"
            )
