"""What a running task can do: the CSL-like instruction API.

A task body receives a :class:`TaskContext` ``t`` (and, for a data task, the wavelet's data)::

    def compute(t):
        t.fmacs(C_col, C_col, A_col, b)                   # @fmacs(dst, src0, src1, scalar)
        t.mov32(out_dsd, buf_dsd, async_=True, activate=DONE)   # async mem -> fabric
        t.activate(NEXT); t.block(LOCK); t.unblock(LOCK)
        t.mark("end")                                     # timestamp counter -> ce.marks

Synchronous tensor instructions on memory operands compute real results at once and advance
``t.now`` by their cost (from :mod:`pe.isa`). Operations with a fabric operand must be
``async_=True``: they start a microthread that runs alongside the rest of the task and beyond it.
Router writes (``set_route``, ``exit_teardown``...) take effect at the local cycle they are made.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from fabric.routes import ColourRoute, Dir, Position, check_switch_positions
from fabric.wavelet import Cmd, Wavelet
from pe import isa
from pe.dsd import FabInDsd, FabOutDsd, MemDsd, np_dtype
from pe.ops import OUTPUT_QUEUE_DEPTHS, PRIORITY_RANK, AsyncOp, TaskDef
from simcore.errors import BuildError
from simcore.tracing import TraceLevel

if TYPE_CHECKING:
    from pe.ce import ComputeEngine

_OPS = TraceLevel.OPS  # (a module name: reading an enum member off its class costs per call)


class TaskContext:
    """The running task's view of its PE. ``now`` is the task's local cycle."""

    __slots__ = ("ce", "now", "task")

    def __init__(self, ce: ComputeEngine, task: TaskDef, now: int) -> None:
        self.ce = ce
        self.task = task
        self.now = now

    # -- identity ------------------------------------------------------------------------------
    @property
    def x(self) -> int:
        return self.ce.xy[0]

    @property
    def y(self) -> int:
        return self.ce.xy[1]

    # -- timestamps ------------------------------------------------------------------------------
    def timestamp(self) -> int:
        """Read the PE's timestamp counter (``pe.timestamp_bits`` wide, in cycles)."""
        self.now += self.ce.timing.timestamp_cycles
        return self.now % (1 << self.ce.cfg.timestamp_bits)

    def mark(self, name: str) -> int:
        """Read the timestamp counter and keep it as ``ce.marks[name]``."""
        ce = self.ce  # (timestamp() inlined: marks are read several times per step)
        self.now = now = self.now + ce.timing.timestamp_cycles
        value = ce.marks[name] = now % (1 << ce.cfg.timestamp_bits)
        return value

    # -- task control ----------------------------------------------------------------------------
    # (_control_op and _known inlined in these three: they run several times per collective)
    def activate(self, task_id: int) -> None:
        ce = self.ce
        self.now += ce.timing.control_op_cycles
        if task_id not in ce.tasks:
            self._known(task_id)
        ce.activated[task_id] = True

    def block(self, task_id: int) -> None:
        ce = self.ce
        self.now += ce.timing.control_op_cycles
        if task_id not in ce.tasks:
            self._known(task_id)
        ce.blocked[task_id] = True

    def unblock(self, task_id: int) -> None:
        ce = self.ce
        self.now += ce.timing.control_op_cycles
        if task_id not in ce.tasks:
            self._known(task_id)
        ce.blocked[task_id] = False

    def _control_op(self) -> None:
        self.now += self.ce.timing.control_op_cycles

    def _known(self, task_id: int) -> None:
        if task_id not in self.ce.tasks:
            raise BuildError(
                f"{self.ce.path}: task '{self.task.name}' refers to task id {task_id}, which is "
                f"not bound (bound ids: {sorted(self.ce.tasks)})"
            )

    # -- router configuration ------------------------------------------------------------------
    def set_route(
        self, colour: int, rx: Iterable[Dir | str], tx: Iterable[Dir | str], *,
        positions: Iterable[tuple[Iterable[Dir | str], Iterable[Dir | str]]] = (),
    ) -> None:  # fmt: skip
        """Rewrite the colour's switch positions on this PE's router (keeps teardown state)."""
        ce = self.ce
        setter = None
        if not positions and type(rx) is list and type(tx) is list:
            # (a one-position route given as lists, as the collectives write three times per
            # call: its setter made once for the wafer, not the positions and a partial per
            # write)
            key = (tuple(rx), tuple(tx))
            setter = _SETTERS.get(key)
            if setter is None:
                setter = _SETTERS[key] = _SetPositions((Position.make(*key),))
        if setter is None:
            pos = (Position.make(rx, tx), *(Position.make(r, t) for r, t in positions))
            setter = _SetPositions(pos)
        n = len(setter.positions)
        if n > 1:
            check_switch_positions(ce.path, colour, n, ce.wafer.cfg.fabric.switch_positions)
        self.now += ce.timing.route_write_cycles * 2 * n  # rx and tx registers
        self._write(colour, setter)

    def reset_switches(self, colour: int) -> None:
        self.now += self.ce.timing.route_write_cycles
        self._write(colour, ColourRoute.reset)

    def clear_filters(self, colour: int) -> None:
        """Clear the PE's wavelet filters (their counters restart): one router write per filter
        register of the PE."""
        self.now += self.ce.timing.route_write_cycles * self.ce.wafer.cfg.fabric.filters_per_pe
        filt = self.ce.router.filters.get(colour)
        if filt is not None:

            def change(route: ColourRoute) -> None:
                filt.count = 0

            self._write(colour, change)

    def exit_teardown(self, colour: int) -> None:
        self.now += self.ce.timing.route_write_cycles
        self._write(colour, _leave_teardown)

    def reconfigure(self, colour: int, rx: Iterable[Dir], tx: Iterable[Dir]) -> None:
        """Set the colour up for a new one-position route, as a collective does before each
        call: :meth:`clear_filters`, :meth:`reset_switches`, :meth:`set_route` ``(colour, rx,
        tx)`` and :meth:`exit_teardown` in turn, the same writes landing at the same cycles and
        the same cycles spent, in one call (``rx``/``tx``: ports, as lists or tuples)."""
        ce = self.ce
        timing = ce.timing
        rw = timing.route_write_cycles
        latency = timing.route_write_latency_cycles
        router = ce.router
        if colour not in router.routes:  # (``_write``'s first line: the first write makes it)
            router.routes[colour] = ColourRoute([Position.make([], [])], teardown=True)
        after_now = ce.env._now // ce.sched.period + 1  # (engine.now_cycle() + 1, inlined)
        # clear_filters
        now = self.now + rw * ce.wafer.cfg.fabric.filters_per_pe
        filt = router.filters.get(colour) if router.filters else None
        if filt is not None:

            def change(route: ColourRoute) -> None:
                filt.count = 0

            lands = now + latency
            router.write_config(lands if lands > after_now else after_now, colour, change)
        # reset_switches, set_route (one position: its setter made once for the wafer, as
        # set_route's) and exit_teardown, posted as one (Router.write_route: the same writes)
        key = (tuple(rx), tuple(tx))
        setter = _SETTERS.get(key)
        if setter is None:
            setter = _SETTERS[key] = _SetPositions((Position.make(*key),))
        t1 = now + rw + latency
        t2 = t1 + rw * 2  # rx and tx registers
        t3 = t2 + rw
        now += rw * 4
        if filt is None and t1 > after_now:
            router.write_route(colour, t1, t2, t3, setter.positions)
        else:
            write = router.write_config
            write(t1 if t1 > after_now else after_now, colour, ColourRoute.reset)
            write(t2 if t2 > after_now else after_now, colour, setter)
            write(t3 if t3 > after_now else after_now, colour, _leave_teardown)
        self.now = now

    def teardown_colours(self) -> list[int]:
        """Colours whose teardown triggered the teardown task (cleared on read)."""
        out = list(self.ce.torn_down)
        self.ce.torn_down.clear()
        return out

    def _write(self, colour: int, change: Any) -> None:
        """A router configuration write landing at the task's current cycle."""
        ce = self.ce
        router = ce.router
        if colour not in router.routes:
            router.routes[colour] = ColourRoute([Position.make([], [])], teardown=True)
        lands = self.now + ce.timing.route_write_latency_cycles
        after_now = ce.env._now // ce.sched.period + 1  # (engine.now_cycle() + 1, inlined)
        router.write_config(lands if lands > after_now else after_now, colour, change)

    # -- instructions ----------------------------------------------------------------------------
    def op(
        self,
        name: str,
        dst: Any,
        *srcs: Any,
        async_: bool = False,
        activate: int | None = None,
        unblock: int | None = None,
        priority: str = "low",
    ) -> None:
        """Run tensor instruction ``name``: dst = f(srcs) (see :mod:`pe.isa` for each op)."""
        fabric = isinstance(dst, FabOutDsd)
        if not fabric:
            for s in srcs:  # (a loop, not any() over a generator: this runs per instruction)
                if isinstance(s, FabInDsd):
                    fabric = True
                    break
        if not fabric:
            if async_:
                raise BuildError(
                    f"{self.ce.path}: async '{name}' has no fabric operand; only operations "
                    "with a fabric operand run on microthreads here (drop async_)"
                )
            start = self.now
            self.ce.instructions += 1
            cycles = self.ce.tensor_unit.execute(
                name, self.ce.sram, dst, tuple(srcs), cache=self.ce.cache
            )
            self.now += cycles
            if self.ce.trace_level >= _OPS:
                self.ce.emit_slice(
                    f"{self.ce.path}/ce", "instr", name, start, cycles,
                    {"elements": getattr(dst, "length", 0)},
                )  # fmt: skip
            return
        if not async_:
            raise BuildError(
                f"{self.ce.path}: '{name}' has a fabric operand; synchronous fabric operations "
                "are not modelled, use async_=True with activate=/unblock= for completion"
            )
        self._launch(name, dst, srcs, activate, unblock, priority)

    def element_run(
        self,
        name: str,
        dst: tuple[MemDsd, Sequence[int]],
        *srcs: Any,
        after: float = 0.0,
        before: float = 0.0,
        befores: Sequence[int] | None = None,
        debt: float = 0.0,
    ) -> float:
        """Run a sequence of synchronous one-element instructions ``name``, as ``op`` runs them
        one after the other, with the task's scalar work between them; return the debt left.

        Operands: ``(dsd, offsets)`` for a memory operand (instruction k's is
        ``dsd.with_length(1).with_offset(offsets[k])``, ``dsd`` 1-D), a list for a scalar per
        instruction, anything else for a scalar every instruction takes; ``dst``'s offsets
        give the count. For each instruction k: ``before`` is added to ``debt`` ``befores[k]``
        times (none without ``befores``), the instruction runs (``t.now`` advances by its
        cycles), ``after`` is added to ``debt``, and the debt's whole cycles are spent
        (``w = int(debt); t.now += w; debt -= w``): fractional cycles of scalar work carried
        from one instruction to the next, as spmv charges its per-row and per-non-zero work.
        The instruction count, each instruction's cycles and result, the ops-level trace's
        slices and ``t.now`` are those of the ``op`` calls (:meth:`pe.isa.TensorUnit.execute_run`
        runs them without a descriptor or a call per instruction).
        """
        ce = self.ce
        cycles = ce.tensor_unit.execute_run(name, ce.sram, dst, srcs, cache=ce.cache)
        n = len(cycles)
        if befores is not None and len(befores) != n:
            raise BuildError(
                f"{ce.path}: {name} run: befores has {len(befores)} entries for {n} "
                "instructions; give one count per instruction"
            )
        ce.instructions += n
        now = self.now
        if ce.trace_level >= _OPS:
            path = f"{ce.path}/ce"
            emit = ce.emit_slice
        else:
            emit = None
            if befores is None and not after and not debt:
                self.now = now + sum(cycles)  # (no scalar work: whole cycles only)
                return debt
            if n and _whole(after) and _whole(before) and _whole(debt):
                # Whole cycles of scalar work (spmv's defaults): every sum below is exact and
                # the first instruction spends the whole debt, each later one its own work,
                # so the loop's ``t.now`` is one sum and its debt 0.
                walked = 0
                if befores is not None:
                    walked = sum(befores)
                    if type(walked) is not int or walked >= 1 << 22 or min(befores) < 0:
                        walked = -1  # (not counts the loop's ``range`` takes: the loop)
                if walked >= 0:
                    self.now = now + sum(cycles) + int(debt) + int(before) * walked + int(after) * n
                    return 0.0
        for k in range(n):
            if befores is not None:
                for _ in range(befores[k]):
                    debt += before
            c = cycles[k]
            if emit is not None:
                emit(path, "instr", name, now, c, {"elements": 1})
            now += c
            debt += after
            whole = int(debt)
            now += whole
            debt -= whole
        self.now = now
        return debt

    def _launch(
        self,
        name: str,
        dst: Any,
        srcs: tuple,
        activate: int | None,
        unblock: int | None,
        priority: str,
    ) -> None:
        ce = self.ce
        length = dst.length
        op = AsyncOp(ce, name, length)
        op.priority = PRIORITY_RANK[priority]
        op.width = int(getattr(ce.cfg, isa.OPS[name].simd_width_param))  # (cfg.simd_width)
        fab_ins = []
        other = None  # the first source length that differs from the destination's
        for s in srcs:  # (one loop: this runs for every async operation)
            if isinstance(s, FabInDsd):
                fab_ins.append(s)
            n = getattr(s, "length", None)
            if n is not None and n != length and other is None:
                other = n
        if len(fab_ins) > 1:
            raise BuildError(
                f"{ce.path}: '{name}' reads two fabric inputs; one at most is modelled"
            )
        if other is not None:
            raise BuildError(
                f"{ce.path}: '{name}' operands differ in length (destination {length}, "
                f"source {other})"
            )
        if fab_ins:
            fin = fab_ins[0]
            op.fab_in = fin.queue
            if ce.queue_of_colour.get(fin.colour) != fin.queue:
                ce.bind_queue(fin.colour, fin.queue)
            if name not in ("mov32", "fmovs", "mov16", "fmovh"):
                op.plan = [
                    ("f",) if isinstance(s, FabInDsd)
                    else ("m", s.read(_store(ce, s))) if isinstance(s, MemDsd)
                    else ("s", float(s))
                    for s in srcs
                ]  # fmt: skip
                op.func = isa.elementwise(name)
                op.elem = _element_of(name, op.plan, op.func, isinstance(dst, FabOutDsd))
            op.microthread = fin.queue
        elif isinstance(dst, FabOutDsd):
            if name in ("mov32", "fmovs", "mov16", "fmovh"):
                (src,) = srcs
                op.values = (
                    src.read(ce.cache if src.space == "cache" else ce.sram)  # (``_store``)
                    if isinstance(src, MemDsd)
                    else np.full(length, float(src), np.float32)
                )
            else:
                vals = [m.read(_store(ce, m)) if isinstance(m, MemDsd) else m for m in srcs]
                op.values = isa.apply(name, *vals)
        if isinstance(dst, FabOutDsd):
            if not 0 <= dst.queue < len(OUTPUT_QUEUE_DEPTHS):
                raise BuildError(f"{ce.path}: output queue {dst.queue} does not exist (0..5)")
            op.out_colour = dst.colour
            op.microthread = dst.queue
        else:
            op.out_mem = dst
            op.out_view = _mem_view(ce, dst)
        if activate is not None:
            if activate not in ce.tasks:
                self._known(activate)  # (raises)
            op.on_done.append(("activate", activate))
        if unblock is not None:
            if unblock not in ce.tasks:
                self._known(unblock)  # (raises)
            op.on_done.append(("unblock", unblock))
        self.now = now = self.now + ce.cfg.dsd_setup_cycles
        after_now = ce.env._now // ce.sched.period + 1  # (engine.now_cycle() + 1, inlined)
        ce.start_op(op, now if now > after_now else after_now)

    def send_control(
        self,
        colour: int,
        commands: Iterable[Cmd],
        *,
        queue: int,
        task_id: int | None = None,
        activate: int | None = None,
        priority: str = "low",
    ) -> None:
        """Send one control wavelet (commands for the routers it passes, optionally a control
        task id for the CEs it reaches) from output queue ``queue`` as an async operation on a
        microthread of ``priority``."""
        ce = self.ce
        op = AsyncOp(ce, "send_control", 1)
        op.priority = PRIORITY_RANK[priority]
        op.control_wavelet = Wavelet(ctrl=True, commands=tuple(commands), task_id=task_id)
        op.out_colour = colour
        op.microthread = queue
        if activate is not None:
            self._known(activate)
            op.on_done.append(("activate", activate))
        self.now += ce.cfg.dsd_setup_cycles
        ce.start_op(op, max(self.now, ce.engine.now_cycle() + 1))


def _whole(x: object) -> bool:
    """Whether ``x`` is a whole number of cycles small enough that float sums of it stay exact."""
    return (
        (x.__class__ is float or x.__class__ is int)
        and -(1 << 30) < x < 1 << 30
        and (
            x.__class__ is int or x.is_integer()  # type: ignore[attr-defined]
        )
    )


# Route changes a write makes when it lands (module functions and shared objects: no closure
# made per write).
class _SetPositions:
    """A route write that sets the colour's switch positions (a tuple, shared by the routes it
    lands on: replaced, never changed) and returns it to its first position."""

    __slots__ = ("positions",)

    def __init__(self, positions: tuple[Position, ...]) -> None:
        self.positions = positions

    def __call__(self, route: ColourRoute) -> None:
        route.positions = self.positions
        route.pos = 0


#: One-position route writes by the (rx, tx) given (see :meth:`TaskContext.set_route`).
_SETTERS: dict[tuple[tuple, tuple], _SetPositions] = {}


def _leave_teardown(route: ColourRoute) -> None:
    route.teardown = False


def _instruction(name: str) -> Any:
    def run(self: TaskContext, dst: Any, *srcs: Any, **kw: Any) -> None:
        if kw or type(dst) is not MemDsd:
            if (
                kw.get("async_")
                and kw.keys() <= _ASYNC_KW
                and (type(dst) is FabOutDsd or (len(srcs) == 1 and type(srcs[0]) is FabInDsd))
            ):
                # An async operation with a fabric operand (every collective's stream):
                # ``op``'s last branch without its call and its look for the operand.
                self._launch(
                    name, dst, srcs, kw.get("activate"), kw.get("unblock"),
                    kw.get("priority", "low"),
                )  # fmt: skip
                return
            self.op(name, dst, *srcs, **kw)
            return
        for s in srcs:
            if isinstance(s, FabInDsd):
                self.op(name, dst, *srcs)
                return
        # A synchronous instruction on memory operands (a kernel's inner loop): ``op``'s
        # first branch, without its call and its look for a fabric operand repeated.
        ce = self.ce
        start = self.now
        ce.instructions += 1
        cycles = ce.tensor_unit.execute(name, ce.sram, dst, srcs, cache=ce.cache)
        self.now = start + cycles
        if ce.trace_level >= _OPS:
            ce.emit_slice(
                f"{ce.path}/ce", "instr", name, start, cycles,
                {"elements": getattr(dst, "length", 0)},
            )  # fmt: skip

    run.__name__ = run.__qualname__ = name
    run.__doc__ = f"``{name}``: {isa.OPS[name].doc} (see :meth:`TaskContext.op`)."
    return run


#: The keywords of :meth:`TaskContext.op` an async operation may take.
_ASYNC_KW = frozenset(("async_", "activate", "unblock", "priority"))

# One method per tensor instruction (t.fmacs(...), t.mov32(...), ...), made once, not per call.
for _name in isa.OPS:
    setattr(TaskContext, _name, _instruction(_name))


def _store(ce: ComputeEngine, dsd: MemDsd) -> Any:
    """The memory a descriptor lives in: the SRAM or the software cache."""
    return ce.cache if dsd.space == "cache" else ce.sram


def _mem_view(ce: ComputeEngine, dst: MemDsd) -> np.ndarray:
    """A writable numpy view of ``dst`` when it is contiguous, else a staging array (SRAM
    only: the CE writes it back when the operation ends)."""
    if len(dst.shape) == 1 and dst.strides[0] == 1:
        return _store(ce, dst).view(dst.base + dst.offset * dst.itemsize, dst.dtype, dst.length)
    if dst.space == "cache":
        raise BuildError(
            f"{ce.path}: an async operation writing {dst.label} into the cache must write it "
            "contiguously (stride 1); use a dense cache tensor or an SRAM destination"
        )
    return np.empty(dst.length, np_dtype(dst.dtype))


def _element_of(name: str, plan: list[tuple], func: Any, to_fabric: bool = False) -> Any:
    """``elem(value, k)``: element ``k`` of an operation with a fabric input, ``func`` of the
    plan's sources in order (the fabric value, memory element ``k``, a scalar); the two
    common plans as closures without a list per element, fused with the FP32 arithmetic where
    ``isa.stream_element`` covers the op (one call per element). ``to_fabric``: the operation
    sends its elements to the fabric, which carries ``float(element)`` (the compute engine's
    ``_advance``), so a fused element may be that float already."""
    kinds = tuple(p[0] for p in plan)
    if kinds in (("f", "m"), ("m", "f")):
        fused = isa.stream_element(
            name, plan[1 if kinds[0] == "f" else 0][1], kinds[0] == "f", as_float=to_fabric
        )
        if fused is not None:
            return fused
    if kinds == ("f", "m"):
        mem = plan[1][1]
        return lambda v, k: func(v, mem[k])
    if kinds == ("m", "f"):
        mem = plan[0][1]
        return lambda v, k: func(mem[k], v)
    return lambda v, k: func(
        *[v if p[0] == "f" else (p[1][k] if p[0] == "m" else p[1]) for p in plan]
    )


__all__ = ["TaskContext"]
