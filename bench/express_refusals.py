"""Why SUMMA's streams are refused the express (whole-stream) path: refusals counted by reason.

Runs ``summa`` in the fast fidelity with :meth:`pe.ce.ComputeEngine._express_send` wrapped: each
send the engine offers and the fabric refuses is classified by the first check it fails, in the
order ``_express_send``, :func:`fabric.express.try_express` and
``ComputeEngine.express_receive`` apply them (the checks are repeated here, read-only; keep them
in step with those functions). For every send refused on its own CE because another operation is
registered there (SUMMA's case: every root is also a receiver, or the root of both streams) it
also measures the *slack* the cheap partial fix would need: at every router of the stream's
tree, the cycle the other colour's posted teardown exit lands minus the cycle the stream's last
wavelet passes (the stream planned from the end of the set-up task). Positive slack means the
other stream cannot touch this one's ramp, queues or issue slots while it runs.

Also prints the express streams taken, conflicts counted, run CPU seconds (``time.process_time``;
the machine is shared) and the cycles, which the wrapper does not change.

Run: ``PYTHONPATH=. python bench/express_refusals.py [P MT [P MT ...]]`` (default 8 8 16 8), or
``... --ws [N]`` for ws-matmul's fwd, bwd and wgrad at ``bench/kinds_bench.py``'s N x N point
(default 16): their sends are refused on their own CE or at the receiver (the ring's sends
meet an ``fadds`` or a receive that is not a plain move), and the weight stream is an edge
input, never a CE's send, so it is never offered. ``N``: also the sends offered per flavour.
"""

from __future__ import annotations

import collections
import sys
import time
from typing import Any

import numpy as np

from fabric import engine as fabric_engine
from fabric import express
from fabric.routes import Dir
from pe import ce as pe_ce
from runner.scenario import run_kind
from workloads.wafer import summa


def _receive_reason(ce: Any, colour: int, length: int, now: int) -> str | None:
    """The first check of ``express_receive`` the receiving CE fails, or None."""
    q = ce.queue_of_colour.get(colour)
    if q is None:
        return "receiver: no queue bound"
    rop = ce.ops_in.get(q)
    checks = (
        (rop is None, "receiver: no receive registered"),
        (rop is not None and rop.func is not None, "receiver: not a plain move"),
        (rop is not None and rop.length != length, "receiver: other length"),
        (len(ce.ops_in) != 1, "receiver: a second receive registered (the other stream)"),
        (bool(ce.ops_out), "receiver: a send registered"),
        (bool(ce.ops) and ce.ops != [rop], "receiver: another operation running"),
        (rop is not None and rop.done, "receiver: receive already moving"),
        (bool(ce.in_queues[q]), "receiver: queue not empty"),
        (ce.express_until >= now, "receiver: inside another express stream"),
        (
            rop is not None and ce.running is not None and ce.busy_until > rop.begin_at,
            "receiver: a task holds the issue slot when the receive begins",
        ),
    )
    for failed, reason in checks:
        if failed:
            return reason
    return None


class Counter:
    def __init__(self) -> None:
        self.reasons: collections.Counter[str] = collections.Counter()
        self.slacks: list[int] = []
        self.engines: list[Any] = []

    def install(self) -> None:
        counter = self
        orig_init = fabric_engine.FabricEngine.__init__
        orig_send = pe_ce.ComputeEngine._express_send

        def init(engine: Any, *args: Any, **kw: Any) -> None:
            orig_init(engine, *args, **kw)
            counter.engines.append(engine)

        def send(ce: Any, op: Any, now: int) -> bool:
            taken = orig_send(ce, op, now)
            if taken:
                counter.reasons["EXPRESS (taken)"] += 1
            else:
                counter.reasons[counter.classify(ce, op, now)] += 1
            return taken

        fabric_engine.FabricEngine.__init__ = init  # type: ignore[method-assign]
        pe_ce.ComputeEngine._express_send = send  # type: ignore[method-assign]

    def _schedule(self, ce: Any, op: Any, begin: int) -> tuple[np.ndarray, np.ndarray, int]:
        eng, cfg = ce.engine, ce.engine.cfg
        ready, _ = ce.router.route_at(op.out_colour)
        s, fa = eng.schedules.get(
            op.length, begin, op.width, cfg.ramp_credits, cfg.ramp_latency_cycles,
            cfg.ramp_credit_latency_cycles, cfg.router_buffer_wavelets, cfg.hop_latency_cycles,
            cfg.hop_credit_latency_cycles, max(ready - begin, 0),
        )  # fmt: skip
        return s, fa, cfg.hop_latency_cycles

    def classify(self, ce: Any, op: Any, now: int) -> str:
        if op.control_wavelet is not None:
            return "sender: a control wavelet (TEARDOWN), not a plain memory -> fabric move"
        if op.fab_in is not None:
            return "sender: fabric in and out (a chain's fadds: a relay position, not a start)"
        if op.values is None:
            return "sender: not a plain memory -> fabric move (no memory source)"
        if ce.ops or len(ce.ops_out) != 1 or ce.ops_in or ce.express_until >= now:
            self._slack(ce, op, now)
            if ce.ops:
                return "sender: another operation already running (the other stream)"
            if ce.ops_in:
                return "sender: a receive registered (the other stream)"
            if len(ce.ops_out) != 1:
                return "sender: a second send registered (root of both streams)"
            return "sender: inside another express stream"
        if ce.running is not None and ce.busy_until > now:
            return "sender: a task holds the issue slot"
        if ce.up_credit_count(op.out_colour) != ce.wafer.cfg.fabric.ramp_credits:
            return "sender: ramp credits away"
        root, colour = ce.router, op.out_colour
        _, route = root.route_at(colour)
        if route is None or Dir.RAMP not in route.current.rx or Dir.RAMP in route.current.tx:
            return "fabric: root route"
        _s, fa, hop = self._schedule(ce, op, now)
        tree = express._tree(root, colour, int(fa[0]), hop)
        if tree is None:
            return "fabric: tree (a route not ready, in teardown, or off the mesh)"
        cfg = ce.engine.cfg
        for r, depth, rt, _ in tree:
            if not express._router_idle(r, now):
                return "fabric: a router busy"
            if colour in r.filters:
                return "fabric: a filter"
            for port in rt.current.tx:
                if port is Dir.RAMP:
                    reason = _receive_reason(r.ce, colour, op.length, now)
                    if reason:
                        return reason
                    recv = r.ce.express_receive(colour, op.length, now)
                    if r.credit(Dir.RAMP, colour) != recv.down_credits:
                        return "receiver: down-ramp credits away"
                    if recv.begin_at > int(fa[0]) + depth * hop + cfg.ramp_latency_cycles:
                        return "receiver: receive begins after the first wavelet"
                elif r.credit(port, colour) != cfg.router_buffer_wavelets:
                    return "fabric: hop credits away"
        return "receiver: down-ramp credit loop does not keep up"

    def _slack(self, ce: Any, op: Any, now: int) -> None:
        """Slack of the partial fix (see the module docstring) for a send refused on its CE."""
        begin = max(now, ce.busy_until) if ce.running is not None else now
        _s, fa, hop = self._schedule(ce, op, begin)
        tree = express._tree(ce.router, op.out_colour, int(fa[0]), hop)
        if tree is None:
            return
        lr = ce.engine.cfg.ramp_latency_cycles
        slack = 10**9
        for r, depth, _route, _ in tree:
            last = int(fa[-1]) + depth * hop + lr + 1
            for colour, route in r.routes.items():
                if colour == op.out_colour or not (route.current.rx or route.teardown):
                    continue
                pending = r.future.get(colour)
                if not route.teardown:
                    slack = min(slack, -(10**6))  # the other colour is live now
                elif pending is not None and not pending[1].teardown:
                    slack = min(slack, pending[0] - last)
        if slack < 10**9:
            self.slacks.append(slack)


def ws_matmul(n: int, counter: Counter) -> None:
    """ws-matmul's three flavours at kinds_bench's N x N point, refusals counted."""
    from runner import scenario

    sc = scenario.find("ws-matmul")
    for flavour in ("fwd", "bwd", "wgrad"):
        counter.reasons.clear()
        sets = {"flavour": flavour, "rows": 2 * n, "cols": 2 * n, "tokens": n, "px": n, "py": n}
        params = scenario.resolve_params(sc, [f"{k}={v}" for k, v in sets.items()])
        t0 = time.process_time()
        m = run_kind("ws-matmul", params)
        cpu = time.process_time() - t0
        eng = counter.engines[-1]
        offered = sum(counter.reasons.values())
        print(
            f"ws-matmul {flavour} {n}x{n}: cycles {m['cycles']:,} correct {m['correct']}  CPU "
            f"{cpu:.2f} s (with this wrapper)  sends offered {offered:,}, express streams "
            f"{eng.express_streams}, relay chains {eng.relay_streams}"
        )
        for reason, k in counter.reasons.most_common():
            print(f"  {k:7,}  {reason}")


def main(argv: list[str]) -> None:
    counter = Counter()
    counter.install()
    if argv[:1] == ["--ws"]:
        ws_matmul(int(argv[1]) if len(argv) > 1 else 16, counter)
        return
    nums = [int(a) for a in argv] or [8, 8, 16, 8]
    for p, mt in zip(nums[::2], nums[1::2], strict=True):
        counter.reasons.clear()
        counter.slacks.clear()
        t0 = time.process_time()
        m = run_kind("summa", summa.SummaParams(p=p, mt=mt))
        cpu = time.process_time() - t0
        eng = counter.engines[-1]
        print(
            f"P={p} Mt={mt}: cycles {m['cycles']:,} correct {m['correct']}  run+build CPU "
            f"{cpu:.2f} s (with this wrapper)  express streams {eng.express_streams} "
            f"({eng.express_wavelets:,} wavelets), fast conflicts {eng.fast_conflicts}"
        )
        for reason, n in counter.reasons.most_common():
            print(f"  {n:7,}  {reason}")
        if counter.slacks:
            a = np.asarray(counter.slacks)
            print(
                f"  partial fix (other colour in teardown until the stream has passed): "
                f"{int((a > 0).sum())} of {len(a)} sends; slack median {np.median(a):.0f}, "
                f"min {a.min()}, max {a.max()} cycles"
            )


if __name__ == "__main__":
    main(sys.argv[1:])
