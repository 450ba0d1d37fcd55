"""The program API: a Python mirror of CSL's layout file and PE code.

A CSL program has a *layout* (which code runs on which PE, with which parameters, and how each
colour is routed on each router) and *PE code* (buffers, DSDs, tasks and their bindings). Here::

    def pe_code(pe):                                   # runs once per PE at build time
        buf = pe.zeros("buf", (n,))                     # SRAM buffer -> memory DSD
        rx = pe.fabin(colour=3, length=n, queue=2)      # fabric input DSD (binds colour 3 -> q2)

        @pe.local_task(id=10)
        def main(t):                                    # t: pe.task.TaskContext
            t.mark("start")
            t.mov32(buf, rx, async_=True, activate=11)

        @pe.local_task(id=11)
        def done(t):
            t.mark("end")

        pe.start(main)                                  # activated when the run starts

    layout = Layout(width=4, height=1)
    layout.set_rectangle_code(pe_code, n=64)           # like @set_tile_code on every PE
    layout.set_colour_config(0, 0, 3, rx=["RAMP"], tx=["E"])

Per-PE code can differ by coordinates (``pe.x``, ``pe.y``) or by giving different functions to
different tiles, as with CSL's layout/PE split.
"""

from __future__ import annotations

import dataclasses
import gc
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from fabric.routes import ColourRoute, Dir, Position, WaveletFilter
from pe.dsd import DTYPES, FabInDsd, FabOutDsd, MemDsd
from pe.ops import INPUT_QUEUE_DEPTHS, TaskDef
from simcore.errors import BuildError

if TYPE_CHECKING:
    from pe.ce import ComputeEngine

PeCode = Callable[["PeBuilder"], None]


@dataclasses.dataclass(slots=True)
class Tile:
    code: PeCode
    params: dict[str, Any]


class Layout:
    """Which code runs where, and the initial colour configuration of every router."""

    def __init__(self, width: int, height: int) -> None:
        if width < 1 or height < 1:
            raise BuildError(f"layout {width}x{height}: both sides must be at least 1 PE")
        self.width = width
        self.height = height
        self.tiles: dict[tuple[int, int], Tile] = {}
        self.routes: dict[tuple[int, int], dict[int, ColourRoute]] = {}
        self.filters: dict[tuple[int, int], dict[int, WaveletFilter]] = {}
        # (x, y, side, colour, kind, data, start_cycle)
        self.edges: list[tuple[int, int, Dir, int, str, Any, int]] = []
        # Colours whose traffic is broadcasts (plain memory -> fabric sends with their
        # TEARDOWN, fabric -> memory receives): the lock-step fidelities move them with the
        # lock-step phase (wafer.lockstep; anything else it hands to the engine). The array form
        # takes two colours.
        self.lockstep_colours: tuple[int, ...] = ()
        # Whether the phase pays for this program (a speed hint: the 'fast' fidelity uses it
        # only then; the answer is the same either way).
        self.lockstep_pays = False

    def _check_xy(self, x: int, y: int) -> None:
        if not (0 <= x < self.width and 0 <= y < self.height):
            raise BuildError(
                f"PE ({x},{y}) is outside the {self.width}x{self.height} layout "
                f"(x 0..{self.width - 1}, y 0..{self.height - 1})"
            )

    def set_tile_code(self, x: int, y: int, code: PeCode, **params: Any) -> None:
        self._check_xy(x, y)
        self.tiles[(x, y)] = Tile(code, params)

    def set_rectangle_code(self, code: PeCode, **params: Any) -> None:
        # (the cyclic garbage collector off meanwhile: a full array's 745,500 tiles would
        # start many collections, each scanning every object made so far)
        enabled = gc.isenabled()
        gc.disable()
        try:
            for y in range(self.height):
                for x in range(self.width):
                    self.tiles[(x, y)] = Tile(code, params)
        finally:
            if enabled:
                gc.enable()

    def set_filter(
        self,
        x: int,
        y: int,
        colour: int,
        kind: str,
        *,
        period: int = 1,
        index: int = 0,
        lo: int = 0,
        hi: int = 2**62,
    ) -> None:
        """A wavelet filter on ``colour`` at PE (x, y): see :class:`fabric.routes.WaveletFilter`."""
        self._check_xy(x, y)
        filt = WaveletFilter(kind, period=period, index=index, lo=lo, hi=hi)
        self.filters.setdefault((x, y), {})[colour] = filt

    def add_edge_input(
        self, x: int, y: int, side: str, colour: int, data: Any = None, *, start_cycle: int = 1
    ) -> None:
        """An edge input into PE (x, y)'s router from the wafer edge on ``side``, on ``colour``.

        With ``data`` (FP32 words, or numbers mixed with control ``Wavelet`` objects) the stream
        is preloaded and starts at ``start_cycle``; without, it comes through the edge port's
        ``in`` port, which must then be connected (``sim.connect(..., wafer.edge(x, y,
        side).ports["in"], ...)``). See :mod:`fabric.edge`."""
        self._check_xy(x, y)
        if start_cycle < 1:
            raise BuildError(f"edge input at ({x},{y}): start_cycle must be >= 1")
        self.edges.append((x, y, Dir[side.upper()], colour, "input", data, start_cycle))

    def add_edge_output(self, x: int, y: int, side: str, colour: int) -> None:
        """Collect what PE (x, y)'s router sends off the wafer edge on ``side`` on ``colour``
        (and pass it on through the edge port's ``out`` port, if that is connected)."""
        self._check_xy(x, y)
        self.edges.append((x, y, Dir[side.upper()], colour, "output", None, 0))

    def set_colour_config(
        self,
        x: int,
        y: int,
        colour: int,
        *,
        rx: Iterable[Dir | str],
        tx: Iterable[Dir | str],
        positions: Iterable[tuple[Iterable[Dir | str], Iterable[Dir | str]]] = (),
        teardown: bool = False,
    ) -> None:
        self._check_xy(x, y)
        one = None
        if not positions and type(rx) is tuple and type(tx) is tuple:
            one = _ONE_POSITION_OF.get((rx, tx))  # a one-position route made before
        if one is not None:
            self._put_route(x, y, colour, ColourRoute(one, teardown=teardown))
            return
        positions = tuple(positions)
        pos: Sequence[Position]
        if positions:
            pos = [Position.make(rx, tx)] + [Position.make(r, t) for r, t in positions]
        else:  # one position: a tuple shared by every route of that position (routes replace
            # their positions, never change them in place); a full array has millions
            first = Position.make(rx, tx)
            one = _ONE_POSITION.get(first)
            if one is None:
                one = _ONE_POSITION[first] = (first,)
            if type(rx) is tuple and type(tx) is tuple and len(_ONE_POSITION_OF) < 4096:
                _ONE_POSITION_OF[(rx, tx)] = one
            pos = one
        self._put_route(x, y, colour, ColourRoute(pos, teardown=teardown))

    def _put_route(self, x: int, y: int, colour: int, route: ColourRoute) -> None:
        routes = self.routes.get((x, y))
        if routes is None:
            routes = self.routes[(x, y)] = {}
        routes[colour] = route


class _Teardown:
    """A PE's teardown task (:meth:`PeBuilder.on_teardown`): each colour torn down goes to its
    handler. (An object with slots rather than a closure: a full array has 745,500.)"""

    __slots__ = ("handlers",)
    __name__ = "teardown"

    def __init__(self, handlers: dict[int, Callable[[Any], None]]) -> None:
        self.handlers = handlers

    def __call__(self, t: Any) -> None:
        handlers = self.handlers
        torn = t.ce.torn_down  # (``t.teardown_colours()`` without its call: once per TEARDOWN)
        colours = torn[:]
        torn.clear()
        for c in colours:
            h = handlers.get(c)
            if h is not None:
                h(t)


_ONE_POSITION: dict[Position, tuple[Position]] = {}  # Position is frozen: safe to share
_ONE_POSITION_OF: dict[tuple[tuple, tuple], tuple[Position]] = {}  # by the (rx, tx) given


class PeBuilder:
    """The build-time view of one PE: allocate buffers, make DSDs, bind tasks."""

    __slots__ = (
        "_colours", "_routes", "_teardown_handlers", "ce", "height", "layout", "params",
        "start_tasks", "width", "x", "y",
    )  # fmt: skip

    def __init__(
        self, ce: ComputeEngine, layout: Layout, params: dict[str, Any], colours: int = 0
    ) -> None:
        """``colours``: the fabric's colour count if the caller knows it (else read from the
        PE's wafer; a wafer building many PEs passes it once)."""
        self.ce = ce
        self.x, self.y = ce.xy
        self.width = layout.width
        self.height = layout.height
        self.params = params
        self.layout = layout
        self.start_tasks: list[int] = []
        self._teardown_handlers: dict[int, Callable[[Any], None]] | None = None
        self._colours = colours or ce.wafer.cfg.fabric.colours
        self._routes: dict[int, ColourRoute] | None = None  # this PE's table in the layout

    @property
    def sram(self) -> Any:
        return self.ce.sram

    # -- memory ----------------------------------------------------------------------------------
    def zeros(self, name: str, shape: tuple[int, ...] | int, dtype: str = "f32") -> MemDsd:
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        return self.ce.sram.alloc_array(name, dtype, shape)

    def array(self, name: str, values: np.ndarray, dtype: str = "f32") -> MemDsd:
        values = np.asarray(values)
        sram = self.ce.sram
        dsd = sram.alloc_array(name, dtype, values.shape)
        # A new buffer is dense: its bytes are its values in address order (as dsd.write
        # would write them), given at once (pe.memory: put)
        vals = values if values.ndim == 1 else values.reshape(-1, order="F")
        nd = DTYPES[dsd.dtype]
        if vals.dtype is not nd and vals.dtype != nd:
            with np.errstate(all="ignore"):
                vals = vals.astype(nd)
        # (made here, a copy nothing else holds: the memory may keep it as it is)
        sram.put(dsd.base, vals, owned=vals is not values and vals.base is None)
        return dsd

    def cache_zeros(self, name: str, shape: tuple[int, ...] | int, dtype: str = "f32") -> MemDsd:
        """A buffer in the PE's 256 B software-managed cache (e.g. accumulators)."""
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        return self.ce.cache.alloc_array(name, dtype, shape)

    def read(self, dsd: MemDsd) -> np.ndarray:
        return dsd.read(self.ce.cache if dsd.space == "cache" else self.ce.sram)

    # -- fabric DSDs -----------------------------------------------------------------------------
    def fabin(self, colour: int, length: int, queue: int, dtype: str = "f32") -> FabInDsd:
        self._colour(colour)
        if not 0 <= queue < len(INPUT_QUEUE_DEPTHS):
            raise BuildError(
                f"{self.ce.path}: input queue {queue} does not exist "
                f"(0..{len(INPUT_QUEUE_DEPTHS) - 1})"
            )
        self.ce.bind_queue(colour, queue)
        return FabInDsd(colour=colour, length=length, queue=queue, dtype=dtype)

    def fabout(self, colour: int, length: int, queue: int, dtype: str = "f32") -> FabOutDsd:
        self._colour(colour)
        return FabOutDsd(colour=colour, length=length, queue=queue, dtype=dtype)

    def _colour(self, colour: int) -> None:
        n = self._colours
        if not 0 <= colour < n:
            raise BuildError(
                f"{self.ce.path}: the program uses colour {colour} but the fabric has colours "
                f"0..{n - 1} (wafer.fabric.colours = {n}); raise wafer.fabric.colours (at "
                f"least {colour + 1}; the WSE-2 has 24)"
            )

    # -- routes ----------------------------------------------------------------------------------
    def route(
        self,
        colour: int,
        *,
        rx: Iterable[Dir | str],
        tx: Iterable[Dir | str],
        positions: Iterable[tuple[Iterable[Dir | str], Iterable[Dir | str]]] = (),
        teardown: bool = False,
    ) -> None:
        """This PE's router configuration for ``colour`` (like @set_color_config)."""
        if not 0 <= colour < self._colours:
            self._colour(colour)  # (its message)
        if not positions and type(rx) is tuple and type(tx) is tuple:
            one = _ONE_POSITION_OF.get((rx, tx))  # a one-position route made before
            if one is not None:  # (the layout's own path, without re-checking this PE's x, y)
                routes = self._routes
                if routes is None:
                    routes = self.layout.routes.get((self.x, self.y))
                    if routes is None:
                        routes = self.layout.routes[(self.x, self.y)] = {}
                    self._routes = routes
                routes[colour] = ColourRoute(one, teardown=teardown)
                return
        self.layout.set_colour_config(
            self.x, self.y, colour, rx=rx, tx=tx, positions=positions, teardown=teardown
        )

    def filter(self, colour: int, kind: str, **kw: int) -> None:
        """A wavelet filter on ``colour`` at this PE's router (counter or range)."""
        self._colour(colour)
        self.layout.set_filter(self.x, self.y, colour, kind, **kw)

    # -- tasks -----------------------------------------------------------------------------------
    def _bind(self, kind: str, task_id: int, priority: str, **kw: Any) -> Callable:
        def deco(fn: Callable) -> int:
            self.ce.bind_task(TaskDef(task_id, kind, fn, fn.__name__, priority, **kw))
            return task_id

        return deco

    def local_task(self, id: int, priority: str = "low") -> Callable:  # noqa: A002
        """Bind a task activated by other tasks or by the end of an async operation."""
        return self._bind("local", id, priority)

    def bind_local(self, id: int, fn: Callable, priority: str = "low") -> int:  # noqa: A002
        """``local_task(id, priority)(fn)`` without the decorator (libraries binding many
        PEs' tasks call it directly)."""
        self.ce.bind_task(TaskDef(id, "local", fn, fn.__name__, priority))
        return id

    def control_task(self, id: int, priority: str = "low") -> Callable:  # noqa: A002
        """Bind a task run when a control wavelet naming ``id`` reaches this CE."""
        return self._bind("control", id, priority)

    def data_task(self, colour: int, queue: int, priority: str = "low") -> Callable:
        """Bind a task run once per wavelet arriving on ``colour`` (its id is the colour)."""
        self._colour(colour)
        return self._bind("data", colour, priority, colour=colour, queue=queue)

    def teardown_task(self, id: int, priority: str = "high") -> Callable:  # noqa: A002
        """Bind the task run when one of this router's colours enters teardown."""

        def deco(fn: Callable) -> int:
            self._bind("local", id, priority)(fn)
            self.ce.teardown_task = id
            return id

        return deco

    def on_teardown(self, colour: int, handler: Callable[[Any], None], *, task_id: int) -> None:
        """Call ``handler(t)`` when ``colour`` enters teardown on this PE's router.

        A PE has one teardown task; the first registration binds it (with ``task_id``) and it
        dispatches each torn-down colour to its handler, so several libraries can share it.
        """
        if not 0 <= colour < self._colours:
            self._colour(colour)  # (its message)
        if self._teardown_handlers is None:
            teardown = _Teardown({})
            self._teardown_handlers = teardown.handlers
            # (teardown_task(task_id)(teardown) without the decorators)
            self.ce.bind_task(TaskDef(task_id, "local", teardown, "teardown", "high"))
            self.ce.teardown_task = task_id
        if colour in self._teardown_handlers:
            raise BuildError(f"{self.ce.path}: colour {colour} already has a teardown handler")
        self._teardown_handlers[colour] = handler

    def start(self, task: int) -> None:
        """Activate ``task`` when the run starts (the host launching the program)."""
        self.start_tasks.append(task)

    def block(self, task: int) -> None:
        """Start with ``task`` blocked."""
        self.ce.blocked[task] = True
