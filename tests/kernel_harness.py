"""Source -> channel -> sink harnesses with scripted or random timing, logging (name, cycle)."""

from __future__ import annotations

from typing import Any

from simcore import Component, Simulation


class Src(Component):
    """Puts ``items`` in order; before item i waits ``gaps[i]`` cycles (0 = back to back)."""

    def __init__(self, parent: Any, name: str, items: list, gaps: list[int], log: list, **kw):
        super().__init__(parent, name, **kw)
        self.out = self.out_port("out")
        self.items, self.gaps, self.log = items, gaps, log

    def start(self) -> None:
        self.process(self._run(), "send")

    def _run(self) -> Any:
        for item, gap in zip(self.items, self.gaps, strict=True):
            if gap:
                yield self.env.timeout(self.domain.ticks(gap))
            yield self.out.put(item)
            self.log.append(("accept", item, self.cycle))


class Dst(Component):
    """Gets ``n`` items; before get i waits ``gaps[i]`` cycles; logs (recv, item, cycle)."""

    def __init__(self, parent: Any, name: str, n: int, gaps: list[int], log: list, **kw):
        super().__init__(parent, name, **kw)
        self.inp = self.in_port("in")
        self.n, self.gaps, self.log = n, gaps, log
        self.got: list = []

    def start(self) -> None:
        self.process(self._run(), "receive")

    def _run(self) -> Any:
        for i in range(self.n):
            if self.gaps[i]:
                yield self.env.timeout(self.domain.ticks(self.gaps[i]))
            item = yield self.inp.get()
            self.got.append(item)
            self.log.append(("recv", item, self.cycle))


def run_pair(
    *,
    latency: int,
    capacity: int,
    width: int = 1,
    pipe: bool = False,
    items: int = 4,
    src_gaps: list[int] | None = None,
    dst_gaps: list[int] | None = None,
    sink_first: bool = False,
    seed: int = 0,
) -> tuple[list, Simulation, Any]:
    """Build src -> channel -> dst and run; return the (event, item, cycle) log."""
    sim = Simulation(seed=seed)
    dom = sim.domain("clk", 1_000_000_000)
    log: list = []
    src_gaps = src_gaps or [0] * items
    dst_gaps = dst_gaps or [0] * items
    top = Component(sim, "top", domain=dom)
    if sink_first:
        dst = Dst(top, "dst", items, dst_gaps, log)
        src = Src(top, "src", list(range(items)), src_gaps, log)
    else:
        src = Src(top, "src", list(range(items)), src_gaps, log)
        dst = Dst(top, "dst", items, dst_gaps, log)
    chan = sim.connect(
        src.out,
        dst.inp,
        latency_cycles=latency,
        capacity=capacity,
        items_per_cycle=width,
        pipe=pipe,
    )
    result = sim.run()
    assert result.status == "completed", result.report
    return log, sim, (src, dst, chan)


def table(log: list, event: str) -> list[int]:
    """Cycles of one event kind, in item order."""
    return [c for e, _, c in sorted((x for x in log if x[0] == event), key=lambda x: x[1])]
