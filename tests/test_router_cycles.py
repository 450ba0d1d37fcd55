"""Per-cycle test vectors of the router (fabric/engine.py), on a bare fabric whose ramps end in
hand-written endpoints (tests/fabric_harness.py).

Every latency is one cycle here (hop, hop credit, ramp, ramp credit), buffers hold 2 wavelets and
a ramp 2 credits up, so each table can be followed by hand: a wavelet a router sends in cycle t
is in the next router's buffer at t + 1; a slot it frees at t is back with the sender at t + 1.
Rows are ``(cycle, router "x,y", port or "deliver", colour, "data"/"ctrl" or delivered value)``.
These are the router's unit tables; the same mechanisms, as wafer programs, run in every engine
the wafer has in ``tests/test_conformance.py``.
"""

from __future__ import annotations

import pytest
from fabric_harness import Bench

from fabric.routes import ColourRoute, Dir
from fabric.wavelet import Cmd, Wavelet

ONE = dict(
    hop_latency_cycles=1, hop_credit_latency_cycles=1, ramp_latency_cycles=1,
    ramp_credit_latency_cycles=1, router_buffer_wavelets=2, ramp_credits=2,
)  # fmt: skip


def line(b: Bench, colour: int, n: int) -> None:
    """Colour ``colour`` from the endpoint at x = 0 east to the endpoint at x = n - 1."""
    b.route(0, 0, colour, ["RAMP"], ["E"])
    for x in range(1, n - 1):
        b.route(x, 0, colour, ["W"], ["E"])
    b.route(n - 1, 0, colour, ["W"], ["RAMP"])


def test_credits_a_full_receiver_back_pressures_the_link_until_it_frees_slots():
    # The receiving endpoint keeps its 2 ramp slots until cycle 20: router 1,0 delivers two
    # wavelets, fills its buffer with two more and stops returning credits; router 0,0 stops
    # once its 2 credits for 1,0 are spent; the endpoint at 0,0 once its 2 ramp credits are.
    b = Bench(2, 1, hold_cycles=None, down_credits=2, **ONE)
    line(b, 0, 2)
    b.inject(0, 0, 0, [1, 2, 3, 4, 5, 6, 7, 8])
    b.at(20, b.ends[(1, 0)].release)  # the slots come back at 21
    assert b.run() == [
        (2, "0,0", "E", 0, "data"),
        (3, "0,0", "E", 0, "data"),
        (3, "1,0", "RAMP", 0, "data"),
        (4, "0,0", "E", 0, "data"),
        (4, "1,0", "RAMP", 0, "data"),
        (4, "1,0", "deliver", 0, 1.0),
        (5, "0,0", "E", 0, "data"),  # the last credit for 1,0: its buffer now fills (3, 4)
        (5, "1,0", "deliver", 0, 2.0),
        (21, "1,0", "RAMP", 0, "data"),  # released: one slot ...
        (22, "0,0", "E", 0, "data"),  # ... frees a buffer slot of 1,0, whose credit is back
        (22, "1,0", "RAMP", 0, "data"),
        (22, "1,0", "deliver", 0, 3.0),
        (23, "0,0", "E", 0, "data"),
        (23, "1,0", "deliver", 0, 4.0),  # held again: the rest waits (5, 6 at 1,0; 7, 8 at 0,0)
    ]
    assert b.router(0, 0).describe() == "colour 0 from RAMP: 2 wavelet(s)"
    assert b.router(1, 0).describe() == "colour 0 from W: 2 wavelet(s)"


def two_colours(arbitration: str) -> list:
    """Colour 3 comes from 0,0 through 1,0; colour 1 starts at 1,0; both leave 1,0 east."""
    b = Bench(3, 1, hold_cycles=1, down_credits=4, arbitration=arbitration, **ONE)
    line(b, 3, 3)
    b.route(1, 0, 1, ["RAMP"], ["E"])
    b.route(2, 0, 1, ["W"], ["RAMP"])
    b.inject(0, 0, 3, [30, 31, 32, 33], at=1)
    b.inject(1, 0, 1, [10, 11, 12, 13], at=2)
    return [e for e in b.run() if e[1] == "1,0"]


def test_round_robin_alternates_colours_on_a_shared_port():
    # Both colours reach 1,0 in cycle 3; with nothing sent yet the lower colour goes first,
    # then the port serves the other colour each cycle.
    assert two_colours("round_robin") == [
        (3, "1,0", "E", 1, "data"),
        (4, "1,0", "E", 3, "data"),
        (5, "1,0", "E", 1, "data"),
        (6, "1,0", "E", 3, "data"),
        (7, "1,0", "E", 1, "data"),
        (8, "1,0", "E", 3, "data"),
        (9, "1,0", "E", 1, "data"),
        (10, "1,0", "E", 3, "data"),
    ]


def test_fixed_arbitration_serves_the_lowest_colour_while_it_has_wavelets():
    assert two_colours("fixed") == [
        (3, "1,0", "E", 1, "data"),
        (4, "1,0", "E", 1, "data"),
        (5, "1,0", "E", 1, "data"),
        (6, "1,0", "E", 1, "data"),
        (7, "1,0", "E", 3, "data"),
        (8, "1,0", "E", 3, "data"),
        (9, "1,0", "E", 3, "data"),
        (10, "1,0", "E", 3, "data"),
    ]


def test_a_multicast_head_leaves_only_when_every_port_has_sent_it():
    # 1,0 copies colour 0 to its own endpoint and east. Its endpoint has one ramp slot and
    # keeps it until released: wavelet 2 goes east at once but waits for the ramp, and
    # wavelet 3 waits behind it for both ports.
    b = Bench(3, 1, hold_cycles=1, down_credits=1, **ONE)
    b.ends[(1, 0)].hold_cycles = None
    line(b, 0, 3)
    b.route(1, 0, 0, ["W"], ["E", "RAMP"])
    b.inject(0, 0, 0, [1, 2, 3])
    b.at(9, b.ends[(1, 0)].release)
    assert [e for e in b.run() if e[1] != "0,0"] == [
        (3, "1,0", "E", 0, "data"),
        (3, "1,0", "RAMP", 0, "data"),
        (4, "1,0", "E", 0, "data"),  # wavelet 2 east; its ramp copy has no slot
        (4, "1,0", "deliver", 0, 1.0),
        (4, "2,0", "RAMP", 0, "data"),
        (5, "2,0", "deliver", 0, 1.0),
        (6, "2,0", "RAMP", 0, "data"),
        (7, "2,0", "deliver", 0, 2.0),
        (10, "1,0", "RAMP", 0, "data"),  # released at 9: wavelet 2's ramp copy, then ...
        (11, "1,0", "E", 0, "data"),  # ... wavelet 3 east (its ramp copy: no slot again)
        (11, "1,0", "deliver", 0, 2.0),
        (12, "2,0", "RAMP", 0, "data"),
        (13, "2,0", "deliver", 0, 3.0),
    ]


def test_a_switch_moves_after_its_control_wavelet_has_passed():
    # 1,0 has two positions for colour 0: east, then down its ramp. The SWITCH_ADV wavelet
    # still goes east (and advances every router it passes: 2,0 has one position and stays).
    b = Bench(3, 1, **ONE)
    line(b, 0, 3)
    b.route(1, 0, 0, ["W"], ["E"], (["W"], ["RAMP"]))
    b.inject(0, 0, 0, [1, Wavelet(ctrl=True, commands=(Cmd.SWITCH_ADV,)), 2, 3])
    assert [e for e in b.run() if e[1] != "0,0"] == [
        (3, "1,0", "E", 0, "data"),
        (4, "1,0", "E", 0, "ctrl"),
        (4, "2,0", "RAMP", 0, "data"),
        (5, "1,0", "RAMP", 0, "data"),
        (5, "2,0", "RAMP", 0, "ctrl"),
        (5, "2,0", "deliver", 0, 1.0),
        (6, "1,0", "RAMP", 0, "data"),
        (6, "1,0", "deliver", 0, 2.0),
        (6, "2,0", "deliver", 0, "ctrl"),
        (7, "1,0", "deliver", 0, 3.0),
    ]
    assert b.router(1, 0).routes[0].pos == 1
    assert b.router(2, 0).routes[0].pos == 0


def test_teardown_holds_the_colour_until_the_program_exits_it():
    # The TEARDOWN wavelet puts colour 0 in teardown on every router after it passes (0,0 at
    # 3, 1,0 at 4, 2,0 at 5); each endpoint hears of it one ramp latency later. Wavelets 2
    # and 3 wait at 0,0 until the configuration writes of cycle 12 take the colour out.
    b = Bench(3, 1, **ONE)
    line(b, 0, 3)
    b.inject(0, 0, 0, [1, Wavelet(ctrl=True, commands=(Cmd.TEARDOWN,)), 2, 3])

    def leave_teardown(route):
        route.teardown = False

    for x in range(3):
        b.at(10, b.router(x, 0).write_config, 12, 0, leave_teardown)
    assert b.run() == [
        (2, "0,0", "E", 0, "data"),
        (3, "0,0", "E", 0, "ctrl"),
        (3, "1,0", "E", 0, "data"),
        (4, "1,0", "E", 0, "ctrl"),
        (4, "2,0", "RAMP", 0, "data"),
        (5, "2,0", "RAMP", 0, "ctrl"),
        (5, "2,0", "deliver", 0, 1.0),
        (6, "2,0", "deliver", 0, "ctrl"),
        (12, "0,0", "E", 0, "data"),
        (13, "0,0", "E", 0, "data"),
        (13, "1,0", "E", 0, "data"),
        (14, "1,0", "E", 0, "data"),
        (14, "2,0", "RAMP", 0, "data"),
        (15, "2,0", "RAMP", 0, "data"),
        (15, "2,0", "deliver", 0, 2.0),
        (16, "2,0", "deliver", 0, 3.0),
    ]
    assert [b.ends[(x, 0)].torn_down for x in range(3)] == [[(4, 0)], [(5, 0)], [(6, 0)]]


@pytest.mark.parametrize("posted_as_one", [False, True])
def test_a_set_up_posted_as_one_is_its_three_writes(posted_as_one):
    # A collective's set-up (TaskContext.reconfigure): reset the switch at 12, set the route's
    # positions at 13 and leave teardown at 14, posted at cycle 10 as three write_config calls
    # or as one Router.write_route. The same state is predicted while they are on their way,
    # and the same table follows: wavelets 2 and 3, held at 0,0 by the TEARDOWN, go at 14.
    b = Bench(3, 1, **ONE)
    line(b, 0, 3)
    b.inject(0, 0, 0, [1, Wavelet(ctrl=True, commands=(Cmd.TEARDOWN,)), 2, 3])
    futures = {}

    def post(x: int) -> None:
        r = b.router(x, 0)
        positions = tuple(r.routes[0].positions)
        if posted_as_one:
            r.write_route(0, 12, 13, 14, positions)
        else:

            def set_positions(route):
                route.positions = positions
                route.pos = 0

            def leave_teardown(route):
                route.teardown = False

            r.write_config(12, 0, ColourRoute.reset)
            r.write_config(13, 0, set_positions)
            r.write_config(14, 0, leave_teardown)
        ready, route = r.future[0]
        futures[x] = (ready, tuple(route.positions), route.pos, route.teardown, route.ring)

    for x in range(3):
        b.at(10, post, x)
    rows = b.run()
    assert rows == [
        (2, "0,0", "E", 0, "data"),
        (3, "0,0", "E", 0, "ctrl"),
        (3, "1,0", "E", 0, "data"),
        (4, "1,0", "E", 0, "ctrl"),
        (4, "2,0", "RAMP", 0, "data"),
        (5, "2,0", "RAMP", 0, "ctrl"),
        (5, "2,0", "deliver", 0, 1.0),
        (6, "2,0", "deliver", 0, "ctrl"),
        (14, "0,0", "E", 0, "data"),
        (15, "0,0", "E", 0, "data"),
        (15, "1,0", "E", 0, "data"),
        (16, "1,0", "E", 0, "data"),
        (16, "2,0", "RAMP", 0, "data"),
        (17, "2,0", "RAMP", 0, "data"),
        (17, "2,0", "deliver", 0, 2.0),
        (18, "2,0", "deliver", 0, 3.0),
    ]
    for x in range(3):
        r = b.router(x, 0)
        assert futures[x] == (14, tuple(r.routes[0].positions), 0, False, True)
        assert not r.future and not r.routes[0].teardown


@pytest.mark.parametrize("latency", [1, 3])
def test_a_stream_through_a_line_arrives_one_hop_latency_per_router(latency):
    params = {**ONE, "hop_latency_cycles": latency, "router_buffer_wavelets": 8}
    b = Bench(5, 1, **params)
    line(b, 0, 5)
    b.inject(0, 0, 0, [7])
    rows = b.run()
    sent = {e[1]: e[0] for e in rows if e[2] == "E"}
    assert sent == {f"{x},0": 2 + x * latency for x in range(4)}
    assert rows[-1] == (2 + 4 * latency + 1, "4,0", "deliver", 0, 7.0)


def test_buffered_count_follows_the_buffers_and_credits_wake_only_a_router_holding_wavelets():
    # A router keeps a count of the wavelets it buffers (express streams read it as "idle", and
    # a returning credit wakes the router only while it is non-zero). Checked at every cycle of
    # the back-pressured line above, released at 20 and again at 30 so it drains completely.
    b = Bench(3, 1, hold_cycles=None, down_credits=2, **ONE)
    line(b, 0, 3)
    b.inject(0, 0, 0, [1, 2, 3, 4, 5, 6, 7, 8])
    seen = []

    def check() -> None:
        for r in b.engine.routers:
            assert r.buffered == sum(len(q) for q in r.bufs.values())
        seen.append(sum(r.buffered for r in b.engine.routers))

    for cycle in range(1, 60):
        b.at(cycle, check)
    for cycle in (20, 30, 40, 50):
        b.at(cycle, b.ends[(2, 0)].release)
    b.run()
    assert max(seen) > 0 and seen[-1] == 0  # it held wavelets, then drained
    assert not b.engine.routers_group.active
    r = b.router(1, 0)
    r.return_credit(Dir.E, 0)  # a credit for an empty router: nothing to send, no step
    assert r.index not in b.engine.routers_group.active
