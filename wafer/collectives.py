"""A collectives library written in the program API, as the SDK's is.

Per dimension (row = axis x, column = axis y) it uses two colours, two local tasks (a state
machine and a lock), an input queue per colour and an output queue; its teardown handlers join
the PE's one teardown task (:meth:`pe.program.PeBuilder.on_teardown`). The colours start in
teardown mode.

``broadcast(t, root, buf, callback)`` (every PE of the row/column calls it):
block the lock task; clear filters and switches; rewrite the data colour's route for this root
(root: rx RAMP, tx towards the others; others: rx from the root's side, tx RAMP and onward, so
each router copies every wavelet to its CE and forwards it: router multicast, no store and
forward); exit teardown; then the root runs an async mem -> fabric move of the buffer and the
others an async fabric -> mem move. When the root's move ends, its state machine sends one
control wavelet with a TEARDOWN command on the data colour; it follows the data down the
multicast tree and returns every router's colour to teardown, whose handler activates the lock
task. The lock task runs once activated (teardown seen) and unblocked (own move done), and
activates the user's callback.

``broadcast(..., keep_routes=True)`` skips the clearing and rewriting when this PE's last
broadcast on the dimension had the same root (its route is still right; only the teardown exit
is needed): a program that broadcasts from one root many times pays the reconfiguration once.
The SDK's library reconfigures every time, which is what the T_bcast calibration measures, so
this is off by default.

``reduce_fadds(t, root, buf, callback)``: a chain reduction towards the root over the two colours
alternating by position (a PE receives on one and sends on the other); each PE adds the partial
sum arriving from upstream to its own buffer as it streams through (async fadds fabric+memory ->
fabric); the root adds the total into its buffer. Each PE then sends a TEARDOWN behind its data,
so both of its colours return to teardown; the lock task runs after the expected teardowns and
the PE's own operation.

Where the SDK's timing comes from here: route and teardown writes cost ``ce.route_write_cycles``
each, task switches ``pe.task_switch_cycles``, launches ``pe.dsd_setup_cycles``, and the stream
rate is the ramp credit loop's (see :mod:`fabric.config`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fabric.routes import Dir
from fabric.wavelet import Cmd
from pe.dsd import FabInDsd, FabOutDsd, MemDsd
from pe.ops import PRIORITY_RANK
from simcore.errors import BuildError

if TYPE_CHECKING:
    from pe.program import PeBuilder
    from pe.task import TaskContext

AXES = {"x": (Dir.W, Dir.E), "y": (Dir.N, Dir.S)}  # (towards lower index, towards higher)
# (module names: an enum member read off its class costs about 0.7 us in Python 3.11)
RAMP = Dir.RAMP
_RAMP = (RAMP,)
_TEARDOWN = (Cmd.TEARDOWN,)  # the state machine's control wavelet's commands

# The fabric descriptors of the library's operations by (colour, length, queue), made once
# through the PE builder's checks and then shared (they are frozen values): a call binds no
# queue (:class:`Dimension` bound its colours' queues when it was made), so every PE of a
# wafer making the same descriptor at every collective would only repeat the checks.
_FABIN: dict[tuple[int, int, int], FabInDsd] = {}
_FABOUT: dict[tuple[int, int, int], FabOutDsd] = {}


def _fabin(pe: PeBuilder, colour: int, length: int, queue: int) -> FabInDsd:
    dsd = _FABIN.get((colour, length, queue))
    if dsd is None:
        dsd = _FABIN[(colour, length, queue)] = pe.fabin(colour, length, queue)
    return dsd


def _fabout(pe: PeBuilder, colour: int, length: int, queue: int) -> FabOutDsd:
    dsd = _FABOUT.get((colour, length, queue))
    if dsd is None:
        dsd = _FABOUT[(colour, length, queue)] = pe.fabout(colour, length, queue)
    return dsd


class Dimension:
    """The collectives of one PE along one axis."""

    __slots__ = (
        "_pending_control", "axis", "callback", "colours", "expect_teardowns", "high",
        "in_queues", "index", "is_root", "lock_task", "low", "mt_priority", "out_queue",
        "owner", "routed_for", "size", "sm_task",
    )  # fmt: skip

    def __init__(
        self,
        owner: Collectives,
        axis: str,
        colours: tuple[int, int],
        tasks: tuple[int, int],
        queues: tuple[int, int, int],
        priority: str,
        microthreads: str = "low",
    ) -> None:
        pe = owner.pe
        self.owner = owner
        self.axis = axis
        self.colours = colours
        self.sm_task, self.lock_task = tasks
        self.in_queues = queues[:2]  # one input queue per colour
        self.out_queue = queues[2]
        self.index = pe.x if axis == "x" else pe.y
        self.size = pe.width if axis == "x" else pe.height
        self.low, self.high = AXES[axis]
        self.callback = -1
        self.expect_teardowns = 0
        self.is_root = False
        self.routed_for: int | None = None  # root the data colour's route was last set for
        self.mt_priority = microthreads  # priority of the library's async operations
        for c, q in zip(colours, self.in_queues, strict=True):
            pe.route(c, rx=(), tx=(), teardown=True)
            pe.ce.bind_queue(c, q)
        pe.bind_local(self.sm_task, self._state_machine, priority)
        pe.bind_local(self.lock_task, self._lock, priority)
        self._pending_control: int | None = None

    # -- tasks -----------------------------------------------------------------------------------
    def _state_machine(self, t: TaskContext) -> None:
        """Runs when this PE's own data has left: send TEARDOWN behind it, release the lock."""
        t.unblock(self.lock_task)
        colour = self._pending_control
        t.send_control(
            colour,  # type: ignore[arg-type]
            _TEARDOWN,
            queue=self.out_queue,
            priority=self.mt_priority,
        )

    def _lock(self, t: TaskContext) -> None:
        t.activate(self.callback)

    def on_teardown(self, t: TaskContext) -> None:
        self.expect_teardowns -= 1
        if self.expect_teardowns == 0:
            t.activate(self.lock_task)

    # -- helpers ---------------------------------------------------------------------------------
    def _reconfigure(
        self, t: TaskContext, colour: int, rx: list[Dir], tx: list[Dir], *, keep: bool = False
    ) -> None:
        """Set the colour's route and leave teardown; ``keep``: the route is already right."""
        if keep:
            t.exit_teardown(colour)
        else:  # (clear_filters, reset_switches, set_route and exit_teardown in one call)
            t.reconfigure(colour, rx, tx)

    def _check_root(self, root: int) -> None:
        if not 0 <= root < self.size:
            raise BuildError(
                f"{self.owner.pe.ce.path}: collective root {root} is outside the {self.axis} "
                f"axis (0..{self.size - 1})"
            )

    # -- operations ------------------------------------------------------------------------------
    def broadcast(
        self, t: TaskContext, root: int, buf: MemDsd, callback: int, *, keep_routes: bool = False
    ) -> None:
        i, n = self.index, self.size
        if not 0 <= root < n:
            self._check_root(root)  # (raises)
        colour = self.colours[0]
        self.callback = callback
        self.expect_teardowns = 1
        t.block(self.lock_task)
        keep = keep_routes and self.routed_for == root
        self.routed_for = root
        if i == root:
            tx = ([self.high] if i < n - 1 else []) + ([self.low] if i > 0 else [])
            # (``_reconfigure``, inlined here and below: once per PE and broadcast)
            if keep:
                t.exit_teardown(colour)
            else:
                t.reconfigure(colour, _RAMP, tx)
            self._pending_control = colour
            key = (colour, buf.length, self.out_queue)  # (``_fabout``'s look-up without its call)
            out = _FABOUT.get(key) or _fabout(self.owner.pe, *key)
            t.mov32(out, buf, async_=True, activate=self.sm_task, priority=self.mt_priority)
        else:
            side, onward = (self.low, self.high) if i > root else (self.high, self.low)
            end = i == n - 1 if i > root else i == 0
            if keep:
                t.exit_teardown(colour)
            else:
                t.reconfigure(colour, (side,), _RAMP if end else (RAMP, onward))
            key = (colour, buf.length, self.in_queues[0])  # (``_fabin``'s, as ``_fabout``'s)
            fin = _FABIN.get(key) or _fabin(self.owner.pe, *key)
            t.mov32(buf, fin, async_=True, unblock=self.lock_task, priority=self.mt_priority)

    def reduce_fadds(self, t: TaskContext, root: int, buf: MemDsd, callback: int) -> None:
        """Chain-reduce ``buf`` over the axis into the root's ``buf`` (FP32 adds)."""
        self._check_root(root)
        pe = self.owner.pe
        i, n = self.index, self.size
        self.callback = callback
        t.block(self.lock_task)
        dist = abs(i - root)
        last = (i == n - 1) if i > root else (i == 0) if i < root else True
        towards_root = self.low if i > root else self.high
        from_far = self.high if i > root else self.low
        send_c = self.colours[dist % 2]
        recv_c = self.colours[(dist + 1) % 2]
        recv_q = self.in_queues[(dist + 1) % 2]
        has_upstream = not last if i != root else (root > 0 or root < n - 1)
        if i == root and 0 < root < n - 1:
            raise BuildError(
                f"{pe.ce.path}: reduce_fadds needs the root at an end of the {self.axis} axis "
                f"(0 or {n - 1}); got root {root}"
            )
        if i == root:
            from_far = self.high if root == 0 else self.low
        self.expect_teardowns = (1 if has_upstream else 0) + (0 if i == root else 1)
        self.routed_for = None
        mtp = self.mt_priority
        if has_upstream:
            self._reconfigure(t, recv_c, [from_far], [RAMP])
        if i != root:
            self._reconfigure(t, send_c, [RAMP], [towards_root])
            self._pending_control = send_c
            out = _fabout(pe, send_c, buf.length, self.out_queue)
            if has_upstream:
                fin = _fabin(pe, recv_c, buf.length, recv_q)
                t.fadds(out, fin, buf, async_=True, activate=self.sm_task, priority=mtp)
            else:
                t.mov32(out, buf, async_=True, activate=self.sm_task, priority=mtp)
        else:
            fin = _fabin(pe, recv_c, buf.length, recv_q)
            t.fadds(buf, buf, fin, async_=True, unblock=self.lock_task, priority=mtp)


class Collectives:
    """Row and column collectives for one PE (create it in the PE code). ``y_colours=None``
    leaves out the column dimension (its colours, tasks and queues stay free). ``priority``
    is the library's state-machine and lock tasks' (low, as the SDK's; a program whose data
    tasks keep the CE busy raises it so a collective's hand-over is not starved).
    ``microthreads`` is the priority of its async operations (the streams and the TEARDOWN
    sends): ``low`` (default) waits while a task runs on the PE, ``medium`` or ``high`` takes
    issue cycles from it (see :mod:`pe.ce`), which is how a program overlaps a collective with
    its compute."""

    __slots__ = ("pe", "x", "y")

    def __init__(
        self,
        pe: PeBuilder,
        *,
        x_colours: tuple[int, int] = (0, 1),
        y_colours: tuple[int, int] | None = (2, 3),
        x_tasks: tuple[int, int] = (24, 25),
        y_tasks: tuple[int, int] = (26, 27),
        teardown_task: int = 28,
        x_queues: tuple[int, int, int] = (0, 2, 2),
        y_queues: tuple[int, int, int] = (1, 3, 3),
        priority: str = "low",
        microthreads: str = "low",
    ) -> None:
        if microthreads not in PRIORITY_RANK:
            raise BuildError(
                f"{pe.ce.path}: collectives microthread priority {microthreads!r} is not one of "
                f"{', '.join(PRIORITY_RANK)}"
            )
        self.pe = pe
        self.x = Dimension(self, "x", x_colours, x_tasks, x_queues, priority, microthreads)
        self.y = (
            None
            if y_colours is None
            else Dimension(self, "y", y_colours, y_tasks, y_queues, priority, microthreads)
        )
        for dim in (self.x,) if self.y is None else (self.x, self.y):
            handler = dim.on_teardown  # (one bound method for both colours)
            for colour in dim.colours:
                pe.on_teardown(colour, handler, task_id=teardown_task)
