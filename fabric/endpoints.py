"""What the fabric needs from the parts at the ends of its links: two small protocols.

A router's mesh ports lead to a :class:`LinkPeer` (another router, or an edge port standing in
for the missing neighbour on the wafer's border); its RAMP leads to a :class:`RampEndpoint` (the
PE's compute engine). The fabric engine and the express streams talk to compute engines only
through these methods and through :mod:`fabric.express`'s two protocols, so ``fabric/`` imports
nothing from ``pe/``: a test can drive a router with a hand-written endpoint, and another
compute model could sit at the end of the ramp.

Every call into an endpoint happens as a due action of the wafer's cycle scheduler (at the start
of a cycle) or while it steps the endpoint, so endpoints see the fabric one cycle at a time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from fabric.engine import Router
    from fabric.routes import Dir
    from fabric.wavelet import Wavelet

EndpointT = TypeVar("EndpointT", contravariant=True)
OpT = TypeVar("OpT", contravariant=True)


class LinkPeer(Protocol):
    """The part on the far side of a router's N, E, S or W link.

    ``receive`` takes a wavelet the router sent (it arrives ``hop_latency_cycles`` after it left);
    ``return_credit`` gives back a buffer slot the peer had borrowed to send to the router.
    ``port`` is the side of the *receiving* part the wavelet or credit comes through.
    """

    def receive(self, port: Dir, colour: int, w: Wavelet) -> None: ...

    def return_credit(self, port: Dir, colour: int) -> None: ...


class RampEndpoint(Protocol):
    """The compute engine at the end of a router's RAMP.

    - ``fabric_deliver(colour, w)``: a wavelet came down the ramp (it holds one of the
      ``down_credits(colour)`` slots until the endpoint returns it with the router's
      ``ramp_credit``);
    - ``up_credit(colour)``: a slot for sending up the ramp came home;
    - ``teardown_signal(colour, flow)``: the colour entered teardown on this router (``flow``:
      the trace flow id of the control wavelet that carried the command, or None);
    - ``down_credits(colour)``: how many wavelets the router may have in flight down the ramp
      (raises :class:`fabric.routes.RouteError` if the endpoint does not take the colour);
    - ``step(cycle)``: the endpoint's own work in a cycle (it is a stepper of the ``endpoints``
      group); ``index`` orders it there.
    """

    index: int
    path: str

    def fabric_deliver(self, colour: int, w: Wavelet) -> None: ...

    def up_credit(self, colour: int) -> None: ...

    def teardown_signal(self, colour: int, flow: int | None = None) -> None: ...

    def down_credits(self, colour: int) -> int: ...

    def step(self, cycle: int) -> bool: ...


class FastPhase(Protocol[EndpointT, OpT]):
    """A fast engine that moves some traffic in place of the wavelet-exact engine for a while
    (the lock-step phase, :mod:`wafer.lockstep`), as :attr:`fabric.engine.FabricEngine.lockstep`.

    ``EndpointT`` is what sits at the end of the ramps (the compute engine) and ``OpT`` its
    operations: the fabric does not know them, the compute engine and the phase do. The engine
    and the compute engines call the phase at four points, each a due action or a step of the
    wafer's scheduler:

    - ``on``: whether the phase is moving traffic now (read before the calls below but
      ``take``);
    - ``take(endpoint, op)``: ``op`` begins on ``endpoint`` now; True if the phase moves it (the
      endpoint then leaves it alone, and the phase finishes it through the endpoint's public
      methods: ``finish_op``, ``act_on_control``, ``up_credit_count``); False leaves it to the
      engine (the phase declined it, or handed everything it moved back to the engine first);
    - ``hold(endpoint)``: the endpoint's main thread changed (a task dispatched or ended);
    - ``route_written(router, colour)``: a configuration write landed on ``router``.

    A phase talks to routers through their public state and :meth:`Router.apply_commands`.
    """

    on: bool

    def take(self, endpoint: EndpointT, op: OpT) -> bool: ...

    def hold(self, endpoint: EndpointT) -> None: ...

    def route_written(self, router: Router, colour: int) -> None: ...


def busy_at(cycles: Any, shift: int, t: int) -> bool:
    """Whether cycle ``t`` is one of the sorted cycles ``cycles + shift`` (an int64 array): the
    test both ends of an express stream use to know whether it occupies a port or an issue slot
    in cycle ``t``."""
    i = int(cycles.searchsorted(t - shift))
    return i < len(cycles) and int(cycles[i]) == t - shift
