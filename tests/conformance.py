"""The conformance suite's harness: one wafer program, run by every engine the wafer has.

An *engine* is a value of ``WaferConfig.fidelity`` (``wafer.system.ENGINES``): 'reference'
(every wavelet through every router), 'express' (whole uncontended streams at once),
'lockstep-scalar' and 'lockstep-array' (the lock-step phase on the colours the program declares,
handing back to the engine what it does not move). :func:`run` runs a program in one engine and
returns its :class:`Outcome`: the *answer* every engine must give alike (how the run ended, its
last cycle, every PE's timestamp marks, every PE's SRAM bytes, the counters of work done) and
the *path* it took (express streams, phases entered, operations the phase was offered and
moved, hand-backs), which the tests sum over a sample so that no engine passes by not running.

Programs (each a function ``build(sim, cfg) -> Wafer``):

- :func:`collective_rounds`: SUMMA-like rounds of row and column broadcasts with the
  collectives library (reconfiguration, posted route writes, TEARDOWN and teardown exits),
  random roots, lengths, microthread priorities, local work between rounds, overlap;
- :func:`raw_streams`: multicast streams on static routes, each on a colour of its own: random
  roots, spans, pass-through routers, stream lengths, SIMD widths, queues, priorities, start
  cycles, receivers that start late (back-pressure), control wavelets behind the data
  (TEARDOWN, a switch advance that moves the stream's later wavelets elsewhere), chains where a
  receiver's completion starts its next send;
- :func:`chain_reductions`: the collectives' chain reduction (``reduce_fadds``) along rows
  and then columns, each PE launching it after local work of its own length (late links hold
  the chain back, and the collectives' tasks then run on CEs the chain still uses: what makes
  a relay chain hand back), with random roots at either end, lengths and microthread
  priorities;
- the per-cycle tables' programs (``tests/test_conformance.py``).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable
from typing import Any

import numpy as np

from fabric.config import FabricConfig
from fabric.wavelet import Cmd
from pe.config import PeConfig
from pe.program import Layout
from simcore import Simulation
from wafer.collectives import Collectives
from wafer.system import ENGINES, Wafer, WaferConfig

Build = Callable[[Simulation, WaferConfig], Wafer]
#: raw_streams' local task ids: stream n's completion, send and receive starts, and teardown.
DONE, SEND, RECV, TEARDOWN = 1, 9, 17, 25
MAX_STREAMS = 8
PRIORITIES = ("high", "medium", "low")

__all__ = ["ENGINES", "Outcome", "chain_reductions", "collective_rounds", "raw_streams", "run"]


@dataclasses.dataclass
class Outcome:
    """What one engine's run of a program left behind."""

    status: str
    end_cycle: int
    marks: dict[tuple[int, int], dict[str, int]]
    sram: dict[tuple[int, int], str]
    counters: dict[str, int]
    path: dict[str, int]

    @property
    def answer(self) -> tuple:
        """What every engine must give alike."""
        return (self.status, self.end_cycle, self.marks, self.sram, self.counters)


def run(build: Build, engine: str, fabric: dict | None = None, pe: dict | None = None) -> Outcome:
    """Run the program ``build`` makes in ``engine`` (a fidelity), with fabric and PE
    parameters."""
    cfg = WaferConfig(
        fidelity=engine,  # type: ignore[arg-type]
        fabric=FabricConfig(**(fabric or {})),
        pe=PeConfig(**(pe or {})),
    )
    sim = Simulation()
    wafer = build(sim, cfg)
    sim.check()
    result = sim.run()
    pes = sorted(wafer.pes.items())
    engine_ = wafer.engine
    phase = engine_.lockstep
    ces = [pe.ce for _, pe in pes]
    return Outcome(
        status=result.status,
        end_cycle=result.end_ticks // wafer.sched.period,
        marks={xy: dict(pe.ce.marks) for xy, pe in pes},
        sram={xy: hashlib.sha256(pe.sram.data.tobytes()).hexdigest()[:16] for xy, pe in pes},
        counters={
            "forwarded": sum(r.forwarded for r in engine_.routers),
            "tasks_run": sum(ce.tasks_run for ce in ces),
            "ops_finished": sum(ce.ops_finished for ce in ces),
            "instructions": sum(ce.instructions for ce in ces),
            "busy_cycles": sum(ce.busy_cycles for ce in ces),
            "stolen_cycles": sum(ce.stolen_cycles for ce in ces),
        },
        path={
            "express_streams": engine_.express_streams,
            "fast_conflicts": engine_.fast_conflicts,
            "express_handbacks": engine_.express_handbacks,
            "offered": phase.offered if phase else 0,
            "taken": phase.taken if phase else 0,
            "phases": phase.phases if phase else 0,
            "phase_wavelets": phase.wavelets if phase else 0,
            "handbacks": phase.handbacks if phase else 0,
            "relay_streams": engine_.relay_streams,
            "relay_elements": engine_.relay_elements,
            "relay_handbacks": engine_.relay_handbacks,
            "relay_holds": engine_.relay_holds,
        },
    )


# -- random programs -------------------------------------------------------------------------------
def collective_rounds(
    width: int, height: int, rounds: list[dict[str, Any]], microthreads: str, seed: int
) -> Build:
    """``rounds`` of row (``x``) and/or column (``y``) broadcasts with the collectives library.
    A round: ``{"x": (root, words) or None, "y": ..., "work": cycles, "keep": bool}``; every PE
    calls each broadcast of the round, then, once all of them are done, does ``work`` cycles
    of local work and starts the next round (``overlap`` rounds start it before the work)."""
    rng = np.random.default_rng(seed)
    longest = max([1] + [r[a][1] for r in rounds for a in "xy" if r.get(a)])
    data = rng.standard_normal((width, height, len(rounds), 2, longest)).astype(np.float32)

    def build(sim: Simulation, cfg: WaferConfig) -> Wafer:
        def code(pe: Any) -> None:
            coll = Collectives(pe, microthreads=microthreads)
            bufs = {}
            for k, rnd in enumerate(rounds):
                for a, axis in enumerate("xy"):
                    if rnd.get(axis):
                        words = rnd[axis][1]
                        bufs[(k, axis)] = pe.array(f"b{k}{axis}", data[pe.x, pe.y, k, a, :words])
            state = {"round": 0, "left": 0}

            def start(t: Any) -> None:
                k = state["round"]
                if k == len(rounds):
                    t.mark("end")
                    return
                rnd = rounds[k]
                t.mark(f"r{k}")
                state["left"] = sum(1 for axis in "xy" if rnd.get(axis))
                if not state["left"]:
                    state["round"] = k + 1
                    t.now += rnd.get("work", 0) + 1
                    t.activate(10)
                    return
                for axis in "xy":
                    if rnd.get(axis):
                        dim = getattr(coll, axis)
                        dim.broadcast(t, rnd[axis][0], bufs[(k, axis)], 11 if axis == "x" else 12,
                                      keep_routes=rnd.get("keep", False))  # fmt: skip

            @pe.local_task(id=10)
            def main(t: Any) -> None:
                start(t)

            def done(t: Any, axis: str) -> None:
                k = state["round"]
                t.mark(f"{axis}{k}")
                state["left"] -= 1
                if state["left"] == 0:
                    state["round"] = k + 1
                    t.now += rounds[k].get("work", 0)
                    t.activate(10)

            @pe.local_task(id=11)
            def x_done(t: Any) -> None:
                done(t, "x")

            @pe.local_task(id=12)
            def y_done(t: Any) -> None:
                done(t, "y")

            pe.start(main)

        layout = Layout(width, height)
        layout.set_rectangle_code(code)
        layout.lockstep_colours = (0, 2)  # the collectives' data colours
        return Wafer(sim, cfg, layout)

    return build


def chain_reductions(
    width: int,
    height: int,
    words: int,
    roots: tuple[int, int],
    work: list[int],
    microthreads: str,
    seed: int,
    ticks: list[int] | None = None,
) -> Build:
    """Every PE reduces a buffer of ``words`` along its row to column ``roots[0]`` (0 or the
    last), then (with more than one row) the row sums down column ``roots[0]`` to row
    ``roots[1]``, with the collectives' ``reduce_fadds``. PE ``i`` (row-major) first does
    ``work[i]`` cycles of local work (a late PE holds the chain back: the links upstream fill
    and wait, and the teardown and lock tasks of the collectives run on CEs the chain still
    uses). With ``ticks[i]`` > 0, PE ``i`` then runs a local task that many times, 7 cycles
    each (tasks dispatched while the chain moves through its CE). Marks: ``x``/``y`` when the
    PE's row/column reduction is done, ``k`` when its last tick ran."""
    rng = np.random.default_rng(seed)
    data = rng.standard_normal((width, height, words)).astype(np.float32)
    rx, ry = roots

    def build(sim: Simulation, cfg: WaferConfig) -> Wafer:
        def code(pe: Any) -> None:
            coll = Collectives(pe, microthreads=microthreads)
            buf = pe.array("b", data[pe.x, pe.y])
            i = pe.y * width + pe.x
            left = [ticks[i] if ticks else 0]

            @pe.local_task(id=10)
            def main(t: Any) -> None:
                t.mark("s")
                t.now += work[i]
                if width > 1:
                    coll.x.reduce_fadds(t, rx, buf, 11)
                else:
                    t.activate(11)
                if left[0]:
                    t.activate(13)

            @pe.local_task(id=13)
            def tick(t: Any) -> None:
                t.now += 7
                left[0] -= 1
                if left[0]:
                    t.activate(13)
                else:
                    t.mark("k")

            @pe.local_task(id=11)
            def x_done(t: Any) -> None:
                t.mark("x")
                if height > 1 and pe.x == rx:
                    coll.y.reduce_fadds(t, ry, buf, 12)  # type: ignore[union-attr]

            @pe.local_task(id=12)
            def y_done(t: Any) -> None:
                t.mark("y")

            pe.start(main)

        layout = Layout(width, height)
        layout.set_rectangle_code(code)
        return Wafer(sim, cfg, layout)

    return build


@dataclasses.dataclass(frozen=True)
class Stream:
    """One multicast stream of :func:`raw_streams`: from ``root`` along ``axis`` over the PEs
    ``lo..hi`` of row or column ``line`` (``pass_through``: PEs on the way that forward it but
    do not take it), ``words`` wavelets from output queue ``queue`` at ``priority``, from cycle
    ``start`` (or when the root has taken stream ``after``). The receivers read input queue
    ``queue`` at ``recv_priority``, ``chunk`` words per operation (marking the end of each; 0:
    the whole stream at once), from cycle ``late`` (or when they have taken stream ``after``).
    ``ctrl``: the control wavelet the root sends behind the data ('' none, 'teardown', or
    'switch': a SWITCH_ADV, after which the routers past the root keep the colour for their
    own CE)."""

    colour: int
    axis: str
    root: int
    lo: int
    hi: int
    line: int
    words: int
    queue: int
    priority: str
    recv_priority: str
    start: int
    late: int
    ctrl: str
    pass_through: frozenset[int]
    after: int | None = None
    chunk: int = 0  # (0: the whole stream in one operation)

    def pes(self) -> list[tuple[int, int]]:
        return [self.xy(i) for i in range(self.lo, self.hi + 1)]

    def xy(self, i: int) -> tuple[int, int]:
        return (i, self.line) if self.axis == "x" else (self.line, i)

    def receivers(self) -> list[tuple[int, int]]:
        return [
            self.xy(i)
            for i in range(self.lo, self.hi + 1)
            if i != self.root and i not in self.pass_through
        ]


def raw_streams(width: int, height: int, streams: list[Stream], phase: tuple[int, ...],
                seed: int, more: Callable[[Any], None] | None = None) -> Build:  # fmt: skip
    """Streams on static routes (see :class:`Stream`); the lock-step phase, in its fidelities,
    moves the colours ``phase``. ``more(pe)``: more code for every PE (its own tasks)."""
    rng = np.random.default_rng(seed)
    values = [rng.standard_normal(s.words).astype(np.float32) for s in streams]
    lower = {"x": "W", "y": "N"}
    higher = {"x": "E", "y": "S"}

    def routes(layout: Layout, s: Stream) -> None:
        lo_side, hi_side = lower[s.axis], higher[s.axis]
        for i in range(s.lo, s.hi + 1):
            x, y = s.xy(i)
            if i == s.root:
                rx, tx = ["RAMP"], ([lo_side] if i > s.lo else []) + ([hi_side] if i < s.hi else [])
            else:
                rx = [lo_side if i > s.root else hi_side]
                onward = hi_side if i > s.root else lo_side
                end = i == (s.hi if i > s.root else s.lo)
                tx = ([] if i in s.pass_through else ["RAMP"]) + ([] if end else [onward])
            more: list[tuple[list[str], list[str]]] = []
            if s.ctrl == "switch" and i != s.root:
                # (after the SWITCH_ADV: this router keeps the colour for its own CE; the PEs
                # that pass it through have nobody to give it to, so they keep forwarding)
                more = [(rx, ["RAMP"] if i not in s.pass_through else tx)]
            layout.set_colour_config(x, y, s.colour, rx=rx, tx=tx, positions=more)

    def build(sim: Simulation, cfg: WaferConfig) -> Wafer:
        roles: dict[tuple[int, int], list[tuple[int, str]]] = {}
        for n, s in enumerate(streams):
            roles.setdefault(s.xy(s.root), []).append((n, "send"))
            for xy in s.receivers():
                roles.setdefault(xy, []).append((n, "recv"))

        def code(pe: Any) -> None:
            mine = roles.get((pe.x, pe.y), [])
            bufs = {}
            got = {n: 0 for n, _ in mine}  # chunks a receiver has taken
            for n, role in mine:
                s = streams[n]
                bufs[n] = (
                    pe.array(f"s{n}", values[n]) if role == "send" else pe.zeros(f"r{n}", s.words)
                )
                if role == "recv":
                    pe.ce.bind_queue(s.colour, s.queue)

            def launch(t: Any, n: int, role: str) -> None:
                s = streams[n]
                done_task = DONE + n
                if role == "send":
                    out = pe.fabout(s.colour, s.words, s.queue)
                    t.op("mov32", out, bufs[n], async_=True, activate=done_task,
                         priority=s.priority)  # fmt: skip
                else:
                    size = s.chunk or s.words
                    part = got[n]
                    length = min(size, s.words - part * size)
                    fin = pe.fabin(s.colour, length, s.queue)
                    dst = bufs[n].with_length(length).with_offset(part * size)
                    t.op("mov32", dst, fin, async_=True, activate=done_task,
                         priority=s.recv_priority)  # fmt: skip

            def starter(n: int, role: str, at: int) -> Callable[[Any], None]:
                def begin(t: Any) -> None:
                    if at > t.now:
                        t.now = at
                    t.mark(f"b{n}{role[0]}")
                    launch(t, n, role)

                return begin

            def finisher(n: int, role: str) -> Callable[[Any], None]:
                def end(t: Any) -> None:
                    s = streams[n]
                    if role == "recv" and s.chunk:
                        t.mark(f"c{n}.{got[n]}")
                        got[n] += 1
                        if got[n] * s.chunk < s.words:
                            launch(t, n, role)
                            return
                    t.mark(f"e{n}{role[0]}")
                    if role == "send" and s.ctrl:
                        cmd = Cmd.TEARDOWN if s.ctrl == "teardown" else Cmd.SWITCH_ADV
                        t.send_control(s.colour, [cmd], queue=s.queue, priority=s.priority)
                    for m, other in mine:  # what waits for this stream here starts now
                        if streams[m].after == n:
                            t.activate((SEND if other == "send" else RECV) + m)

                return end

            for n, role in mine:
                s = streams[n]
                task = (SEND if role == "send" else RECV) + n
                at = s.start if role == "send" else s.late
                pe.local_task(id=task, priority="high" if n % 2 else "low")(starter(n, role, at))
                pe.local_task(id=DONE + n)(finisher(n, role))
            for n, role in mine:
                s = streams[n]
                waits = s.after is not None and any(m == s.after for m, _ in mine)
                if not waits:
                    pe.start((SEND if role == "send" else RECV) + n)

            def teardown(t: Any) -> None:
                for colour in t.teardown_colours():
                    t.mark(f"t{colour}")

            pe.teardown_task(id=TEARDOWN)(teardown)
            if more is not None:
                more(pe)

        layout = Layout(width, height)
        layout.set_rectangle_code(code)
        for s in streams:
            routes(layout, s)
        layout.lockstep_colours = phase
        return Wafer(sim, cfg, layout)

    return build
