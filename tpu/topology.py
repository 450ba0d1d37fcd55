"""Slices of a TPU pod as graphs: which chips exist, which are linked, where axes wrap around.

A slice is a box of chips ``shape = (X, Y[, Z])`` cut from a generation's pod. Chips are named
by coordinates; ICI links join nearest neighbours only (far chips are reached by hops through
the chips between). Whether an axis closes into a ring is each generation's rule:

- v4p, v5p (``"cubes"``): pods are made of 4x4x4 cubes joined by optical switches; a slice made of
  whole cubes (every axis a multiple of 4) wraps on every axis, a smaller one wraps on none;
- v3, v5e, v6e (``"full-axis"``): one fixed torus; an axis wraps only when it spans the whole pod
  axis (16 on v5e/v6e: an 8x16 slice wraps on its long axis only).

The links are edges (:class:`Edge`), one per link *direction* (a link is two channels), each
carrying its axis, its sign (+1 or -1) and whether it is a wraparound edge (also as a
``networkx.DiGraph``, :attr:`Slice.graph`, made on demand). Axes of size 1 have no links; an axis
of size 2 that wraps has one link pair (the two directions), not two parallel ones. Routes:
dimension order (x, then y, then z; on each axis the shorter way, the positive one on a tie),
the set of all minimal dimension-ordered paths, and one minimal path through each of a chip's
ports that leads towards a destination (:meth:`Slice.port_paths`), for splitting a transfer over
every useful port.

Multi-slice: :class:`DcnPath` is the chain a byte takes between slices (HBM -> PCIe -> host NIC ->
network -> host -> PCIe -> HBM) with the spec's bandwidths; the bottleneck sets its rate.

Bad shapes are :class:`ConfigError` naming the rule broken.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

from simcore.errors import ConfigError
from tpu.chips import DCN_BYTES_PER_S, PCIE_BYTES_PER_S, ChipSpec

if TYPE_CHECKING:
    import networkx as nx

AXES = "xyz"
Coord = tuple[int, ...]


def parse_shape(text: str, key: str = "topology") -> tuple[int, ...]:
    """``"4x4"`` -> ``(4, 4)``; anything else is a ConfigError on ``key``."""
    parts = str(text).lower().split("x")
    try:
        shape = tuple(int(p) for p in parts)
    except ValueError:
        raise ConfigError(
            key, text, "not a slice shape", allowed="X x Y or X x Y x Z, e.g. 4x4 or 4x4x8",
            hint=f"set it with --set {key}=4x4",
        ) from None  # fmt: skip
    return shape


def wraps(spec: ChipSpec, shape: Sequence[int]) -> tuple[bool, ...]:
    """Which axes of a slice of ``shape`` close into rings, by the generation's rule."""
    if spec.wrap_rule == "cubes":
        whole = all(a % 4 == 0 for a in shape)
        return tuple(whole and a > 1 for a in shape)
    return tuple(a == p and a > 1 for a, p in zip(shape, spec.pod, strict=True))


def check_shape(spec: ChipSpec, shape: Sequence[int], key: str = "topology") -> None:
    """Reject a shape the generation cannot have, naming the rule."""
    text = "x".join(str(a) for a in shape)
    if len(shape) != spec.dims:
        raise ConfigError(
            key, text, f"{spec.name} slices are {spec.dims}-D ({spec.name}'s ICI is a "
            f"{spec.dims}-D torus with {2 * spec.dims} neighbours per chip)",
            allowed=f"{spec.dims} axes up to {'x'.join(map(str, spec.pod))}",
        )  # fmt: skip
    if any(a < 1 for a in shape):
        raise ConfigError(key, text, "every axis needs at least one chip", allowed=">= 1 per axis")
    for name, a, p in zip(AXES, shape, spec.pod, strict=False):
        if a > p:
            raise ConfigError(
                key, text, f"axis {name} has {a} chips but a {spec.name} pod has {p} on it",
                allowed=f"1 .. {p} on axis {name} (pod {'x'.join(map(str, spec.pod))})",
            )  # fmt: skip


class Edge(NamedTuple):
    """One direction of one ICI link."""

    src: Coord
    dst: Coord
    axis: int
    sign: int
    wrap: bool


class Slice:
    """A slice of ``shape`` on generation ``spec``: coordinates, links, wraparound, routes.

    With ``slices = S > 1``, S such slices joined over DCN: a leading axis ``s`` (coordinates
    ``(s, x, y[, z])``) whose "links" are DCN paths (:class:`DcnPath`), a ring when S > 2
    (every host reaches every other one over the data-centre network).
    """

    def __init__(
        self, spec: ChipSpec, shape: Sequence[int], key: str = "topology", *, slices: int = 1
    ) -> None:
        check_shape(spec, shape, key)
        self.spec = spec
        self.slices = slices
        self.ici_shape = tuple(shape)
        self.dcn_axis = slices > 1
        self.axis_names = ("s" if self.dcn_axis else "") + AXES[: len(shape)]
        self.shape = ((slices,) if self.dcn_axis else ()) + self.ici_shape
        self.wrap = ((slices > 2,) if self.dcn_axis else ()) + wraps(spec, self.ici_shape)
        self.coords: list[Coord] = list(itertools.product(*(range(a) for a in self.shape)))
        self.index = {c: i for i, c in enumerate(self.coords)}
        self._edges: list[Edge] | None = None

    @functools.cached_property
    def graph(self) -> nx.DiGraph:
        """The links as a graph, one edge per direction carrying its axis, sign and wrap (made
        on first use: checking a slice's parameters does not need networkx, so ``wafersim
        params`` does not load it)."""
        import networkx as nx

        graph = nx.DiGraph()
        graph.add_nodes_from(self.coords)
        graph.add_edges_from(
            (e.src, e.dst, {"axis": e.axis, "sign": e.sign, "wrap": e.wrap}) for e in self.edges()
        )
        return graph

    @property
    def chips(self) -> int:
        return len(self.coords)

    @property
    def name(self) -> str:
        return "x".join(map(str, self.ici_shape))

    def neighbour(self, c: Coord, axis: int, sign: int) -> Coord | None:
        """The chip one hop from ``c`` along ``axis`` in direction ``sign``, or None at an edge."""
        size = self.shape[axis]
        if size == 1:
            return None
        v = c[axis] + sign
        if not 0 <= v < size:
            if not self.wrap[axis]:
                return None
            v %= size
        return (*c[:axis], v, *c[axis + 1 :])

    def edges(self) -> list[Edge]:
        """Every link direction, in a fixed order (by source, then destination)."""
        if self._edges is None:
            edges: list[Edge] = []
            shape = zip(self.shape, self.wrap, strict=True)
            axes = [(a, n, w) for a, (n, w) in enumerate(shape) if n > 1]
            for c in self.coords:  # in order: the sources sorted, then each one's destinations
                out: dict[Coord, Edge] = {}
                for axis, size, wraps_ in axes:
                    v = c[axis]
                    for sign in (1, -1):
                        w = v + sign
                        wrap = not 0 <= w < size
                        if wrap:
                            if not wraps_:
                                continue
                            w %= size
                        n = (*c[:axis], w, *c[axis + 1 :])
                        if n not in out:  # an axis of 2 that wraps: one link pair, not two
                            out[n] = Edge(c, n, axis, sign, wrap)
                edges += [out[n] for n in sorted(out)]
            self._edges = edges
        return list(self._edges)

    def axis_index(self, name: str, key: str = "axes") -> int:
        i = self.axis_names.find(name)
        if i < 0:
            what = f"the {self.name} slice"
            if self.dcn_axis:
                what = f"{self.slices} slices of {self.name}"
            raise ConfigError(
                key, name, f"{what} has no axis '{name}'", allowed=", ".join(self.axis_names)
            )
        return i

    def is_dcn(self, axis: int) -> bool:
        """Whether ``axis`` joins slices over DCN (the leading ``s`` axis)."""
        return self.dcn_axis and axis == 0

    def host_of(self, c: Coord) -> tuple[int, ...]:
        """The host a chip hangs off: its slice and its block of ``spec.host`` chips."""
        ici = c[1:] if self.dcn_axis else c
        blocks = tuple(v // h for v, h in zip(ici, self.spec.host, strict=True))
        return ((c[0],) if self.dcn_axis else ()) + blocks

    def parse_coord(self, text: str, key: str) -> Coord:
        try:
            c = tuple(int(v) for v in str(text).split(","))
        except ValueError:
            c = ()
        inside = len(c) == len(self.shape) and all(
            0 <= v < a for v, a in zip(c, self.shape, strict=True)
        )
        if not inside:
            raise ConfigError(
                key, text, f"not a chip of the {self.name} slice",
                allowed=",".join(f"0..{a - 1}" for a in self.shape),
            )  # fmt: skip
        return c

    # -- routes ----------------------------------------------------------------------------------
    def _axis_moves(self, a: int, b: int, axis: int) -> list[int]:
        """Signs that reach ``b`` from ``a`` on ``axis`` by a shortest way (two on a tie)."""
        size, d = self.shape[axis], b - a
        if d == 0:
            return []
        if not self.wrap[axis]:
            return [1 if d > 0 else -1]
        fwd, back = d % size, (-d) % size
        if fwd < back:
            return [1]
        if back < fwd:
            return [-1]
        return [1, -1]

    def _walk(self, src: Coord, dst: Coord, order: Sequence[int], signs: Sequence[int]) -> list:
        path, c = [src], src
        for axis, sign in zip(order, signs, strict=True):
            while c[axis] != dst[axis]:
                c = self.neighbour(c, axis, sign)  # type: ignore[assignment]
                path.append(c)
        return path

    def route(self, src: Coord, dst: Coord) -> list[Coord]:
        """Dimension-order route: x first, then y, then z; the shorter way round, + on a tie."""
        order = [ax for ax in range(len(self.shape)) if src[ax] != dst[ax]]
        signs = [self._axis_moves(src[ax], dst[ax], ax)[0] for ax in order]
        return self._walk(src, dst, order, signs)

    def minimal_paths(self, src: Coord, dst: Coord) -> list[list[Coord]]:
        """Every dimension-ordered minimal path (axis orders x ties in direction): dimension
        order first, then, greedily, each path sharing no link with those already taken (so the
        first few leave the source by different ports), then the rest."""
        moving = [ax for ax in range(len(self.shape)) if src[ax] != dst[ax]]
        found: list[list[Coord]] = []
        for order in itertools.permutations(moving):
            for signs in itertools.product(*(self._axis_moves(src[a], dst[a], a) for a in order)):
                path = self._walk(src, dst, order, signs)
                if path not in found:
                    found.append(path)
        taken: list[list[Coord]] = []
        used: set[tuple[Coord, Coord]] = set()
        for path in found:
            links = set(itertools.pairwise(path))
            if not links & used:
                taken.append(path)
                used |= links
        return taken + [p for p in found if p not in taken]

    def port_paths(self, src: Coord, dst: Coord) -> list[list[Coord]]:
        """One minimal path through each of ``src``'s ports that leads towards ``dst`` (a port
        on an axis where the two differ, in a shortest direction): how a chip's DMA engines
        drive one transfer through every useful port at once. The paths are those of
        :meth:`minimal_paths` in its order, the first that leaves by each port."""
        out: list[list[Coord]] = []
        ports: set[Coord] = set()
        for path in self.minimal_paths(src, dst):
            if path[1] not in ports:
                ports.add(path[1])
                out.append(path)
        return out


class Translations:
    """A group of translations of a slice's chips, for running one representative per class.

    On axis ``a`` the group shifts coordinates by the multiples of ``strides[a]`` (modulo the
    axis size): ``1``, any shift (the axis must wrap); ``s`` dividing the size, shifts by
    ``s``; the size itself, none. ``strides[a] = 0`` collapses the axis: any shift, on an axis
    whose links carry nothing (each value of it holds an independent, identical copy of the
    system). A chip's representative is its coordinates reduced modulo the strides (0 on
    collapsed axes); every class has :attr:`size` chips, and every link direction (or DCN stage)
    likewise stands for :attr:`size` of them. Whether a system is invariant under the group is
    for its user to establish (:meth:`tpu.collectives.Collective.translations`).
    """

    def __init__(self, shape: Sequence[int], strides: Sequence[int]) -> None:
        self.shape = tuple(shape)
        self.strides = tuple(strides)
        for n, s in zip(self.shape, self.strides, strict=True):
            assert s == 0 or n % s == 0, (shape, strides)
        self.size = 1
        for n, s in zip(self.shape, self.strides, strict=True):
            self.size *= n // s if s else n
        self.reps: list[Coord] = list(itertools.product(*(range(s or 1) for s in self.strides)))

    def rep(self, c: Coord) -> Coord:
        """The representative of ``c``'s class."""
        return tuple(v % s if s else 0 for v, s in zip(c, self.strides, strict=True))

    def offset(self, c: Coord) -> Coord:
        """The translation taking ``c``'s representative to ``c``."""
        return tuple(v - (v % s if s else 0) for v, s in zip(c, self.strides, strict=True))

    def fold(self, a: Coord, b: Coord) -> tuple[Coord, Coord]:
        """The link ``a -> b`` translated so that its source is ``a``'s representative."""
        t = self.offset(a)
        return (
            tuple(v - d for v, d in zip(a, t, strict=True)),
            tuple((v - d) % n for v, d, n in zip(b, t, self.shape, strict=True)),
        )


@dataclasses.dataclass(frozen=True)
class DcnPath:
    """Between two slices: HBM -> PCIe -> host NIC -> network -> host -> PCIe -> HBM."""

    hbm_bytes_per_s: float
    pcie_bytes_per_s: float = PCIE_BYTES_PER_S
    dcn_bytes_per_s: float = DCN_BYTES_PER_S

    def stages(self) -> list[tuple[str, float]]:
        return [
            ("hbm", self.hbm_bytes_per_s),
            ("pcie-out", self.pcie_bytes_per_s),
            ("dcn", self.dcn_bytes_per_s),
            ("pcie-in", self.pcie_bytes_per_s),
            ("hbm", self.hbm_bytes_per_s),
        ]

    @property
    def bottleneck_bytes_per_s(self) -> float:
        return min(rate for _, rate in self.stages())
