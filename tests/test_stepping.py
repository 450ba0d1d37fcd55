"""The cycle-stepped scheduler: due actions, step groups, end-of-cycle hooks, clock domains."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simcore import Component, Simulation
from simcore.errors import BuildError
from simcore.stepping import LATE, NORMAL, CycleScheduler


class Part:
    """A stepper that works for ``busy`` cycles once activated, logging (name, cycle)."""

    def __init__(self, log: list, name: str, index: int, busy: int) -> None:
        self.log, self.name, self.index, self.busy = log, name, index, busy

    def step(self, cycle: int) -> bool:
        self.log.append((self.name, cycle))
        self.busy -= 1
        return self.busy > 0


def make(freq: int = 1_000, extra: int | None = None) -> tuple[Simulation, CycleScheduler]:
    sim = Simulation()
    top = Component(sim, "top", domain=sim.domain("top", freq))
    if extra is not None:
        Component(sim, "other", domain=sim.domain("other", extra))
    return sim, CycleScheduler(top, ("first", "second"))


def test_due_actions_then_groups_in_order_then_end_of_cycle():
    sim, sched = make()
    log: list = []
    a = Part(log, "a", 5, 2)
    b = Part(log, "b", 1, 1)
    c = Part(log, "c", 0, 1)

    def start():
        log.append(("due", sched.now()))
        sched.group("second").activate(c)
        sched.group("first").activate(a)
        sched.group("first").activate(b)
        sched.end_of_cycle(sched.now(), lambda _ev: log.append(("end", sched.now())))

    sim.check()
    sched.at(3, start)
    sched.later(4, lambda: log.append(("due", sched.now())))
    sim.run()
    assert log == [
        ("due", 3), ("b", 3), ("a", 3), ("c", 3), ("end", 3),
        ("due", 4), ("a", 4),
    ]  # fmt: skip
    assert sched.cycles_stepped == 2


def test_due_slot_is_the_list_later_and_at_append_to():
    """Actions appended to ``due_slot(t)`` run in the order added, interleaved with ``later``
    and ``at``, and a slot made for an empty cycle arms its tick."""
    sim, sched = make()
    log: list = []

    def start():
        sched.later(2, log.append, "later-1")
        sched.due_slot(sched.now() + 2).append((log.append, ("slot-1",)))
        sched.at(sched.now() + 2, log.append, "at-1")
        assert sched.due.get(sched.now() + 2) is sched.due_slot(sched.now() + 2)
        sched.due_slot(sched.now() + 2).append((log.append, ("slot-2",)))
        sched.due_slot(sched.now() + 5).append((log.append, ("alone",)))

    sim.check()
    sched.at(1, start)
    sim.run()
    assert log == ["later-1", "slot-1", "at-1", "slot-2", "alone"]
    assert sched.cycles_stepped == 3


def test_a_sleeping_part_costs_nothing_until_woken():
    sim, sched = make()
    log: list = []
    p = Part(log, "p", 0, 1)
    sim.check()
    sched.at(2, sched.group("first").activate, p)
    sched.at(1000, sched.group("first").activate, p)
    result = sim.run()
    assert log == [("p", 2), ("p", 1000)]
    assert sched.cycles_stepped == 2
    assert result.events < 10


def test_end_of_cycle_runs_after_every_other_event_of_the_instant():
    sim, sched = make()
    log: list = []
    sim.check()
    sched.end_of_cycle(5, lambda _ev: log.append("end"))
    sched.event_at(5, lambda _ev: log.append("event"))
    sched.at(5, lambda: log.append("due"))
    sim.env.timeout(5).callbacks.append(lambda _ev: log.append("kernel timeout"))
    sim.run()
    assert log == ["event", "due", "kernel timeout", "end"]


@pytest.mark.parametrize("extra", [None, 3_000, 1_200, 999_983])
def test_cycles_are_the_domains_whatever_other_domains_exist(extra):
    sim, sched = make(1_000, extra)
    log: list = []
    sim.check()
    sched.at(7, lambda: log.append((sched.now(), sim.env.now)))
    sched.event_at(9, lambda _ev: log.append((sched.now(), sim.env.now)))
    sim.run()
    p = sched.period
    assert p == sim.timebase.tick_hz // 1_000
    assert log == [(7, 7 * p), (9, 9 * p)]


def test_scheduling_in_the_past_is_refused():
    sim, sched = make()
    sim.check()
    errors: list = []

    def late():
        for call in (lambda: sched.at(4, print), lambda: sched.event_at(3, print)):
            try:
                call()
            except ValueError as exc:
                errors.append(str(exc))

    sched.at(4, late)
    sim.run()
    assert errors == [
        "top: action scheduled for cycle 4, which is not after the current cycle 4",
        "top: event scheduled in the past (cycle 3)",
    ]


def test_groups_must_be_distinct_and_named():
    sim = Simulation()
    top = Component(sim, "top", domain=sim.domain("top", 1_000))
    with pytest.raises(BuildError) as err:
        CycleScheduler(top, ("a", "a"))
    assert str(err.value) == (
        "top: a cycle scheduler needs distinct step group names, got ['a', 'a']"
    )
    sched = CycleScheduler(top, ("a",))
    with pytest.raises(BuildError) as err:
        sched.group("b")
    assert str(err.value) == "top: no step group 'b' (groups: a)"
    sim.check()
    with pytest.raises(BuildError) as err:
        CycleScheduler(top, ("c",))
    assert str(err.value) == "cycle scheduler of 'top' created after the build phase"


# The scheduler's kernel events (event_at, end_of_cycle, ticks) share one queue entry per
# instant and priority; each must still run exactly where a SimPy event of its own would,
# between other parts' events, ones registered meanwhile and more urgent ones.
_OP = st.tuples(
    st.sampled_from(["event_at", "end_of_cycle", "at", "kernel", "urgent", "late", "normal"]),
    st.integers(0, 3),  # cycles from now (at: one more)
    st.integers(0, 2),  # further operations the callback registers when it runs
)


def _run_ops(ops: list, plain: bool, monkeypatch) -> tuple[list, int]:
    if plain:  # the reference: one SimPy event per callback, as before the batches

        def kernel_call(self, when, prio, fn):
            ev = self.env.event()
            ev._ok, ev._value = True, None
            ev.callbacks.append(fn)
            self.env.schedule(ev, prio, when - self.env._now)

        monkeypatch.setattr(CycleScheduler, "kernel_call", kernel_call)
    sim, sched = make()
    env = sim.env
    log: list = []
    todo = iter(range(10**6))
    sim.check()

    def register(i: int) -> None:
        kind, dt, more = ops[i % len(ops)]
        label = next(todo)
        now = sched.now()

        def fire(*_args):
            log.append((label, kind, sched.now()))
            if label < 200:  # a bounded cascade
                for k in range(more):
                    register(i + 1 + k)

        if kind == "event_at":
            sched.event_at(now + dt, fire)
        elif kind == "end_of_cycle":
            sched.end_of_cycle(now + dt, fire)
        elif kind == "at":
            sched.at(now + dt + 1, fire)
        elif kind in ("late", "normal"):
            # the hot callers' form (the compute engines' dispatches and task ends):
            # ``kernel_call``'s body written out through ``open_batches``/``open_batch``
            prio = LATE if kind == "late" else NORMAL
            when = (now + dt) * sched.period
            if plain:
                sched.kernel_call(when, prio, fire)
            else:
                key = 4 * when + prio
                eid = next(sched.eid_counter)
                batch = sched.open_batches.get(key) or sched.open_batch(when, prio, key, eid)
                batch.fns.append(fire)
                batch.eids.append(eid)
        else:
            ev = env.event()
            ev._ok, ev._value = True, None
            ev.callbacks.append(fire)
            env.schedule(ev, 0 if kind == "urgent" else 1, dt * sched.period)

    for i in range(len(ops)):
        register(i)
    result = sim.run()
    return log, result.events


@settings(max_examples=60, deadline=None)
@given(st.lists(_OP, min_size=1, max_size=12))
def test_batched_kernel_events_run_in_simpys_own_order(ops):
    with pytest.MonkeyPatch.context() as mp:
        want = _run_ops(ops, True, mp)
    assert _run_ops(ops, False, pytest.MonkeyPatch()) == want
