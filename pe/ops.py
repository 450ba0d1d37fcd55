"""The records a compute engine keeps: its task table entries and its asynchronous operations,
and the queue and task-id limits of the WSE-2 they are checked against.

Shared by the compute engine (:mod:`pe.ce`), which runs them, and the task API
(:mod:`pe.task`) and program API (:mod:`pe.program`), which create them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from fabric.wavelet import Wavelet
    from pe.ce import ComputeEngine

#: Fabric queue depths of the WSE-2, in wavelets: 8 input queues, 6 output queues.
INPUT_QUEUE_DEPTHS = (6, 6, 4, 4, 2, 2, 2, 2)
OUTPUT_QUEUE_DEPTHS = (2, 2, 6, 6, 2, 2)
#: Task ids 0..63; data tasks take the ids of their colours (0..23 on the WSE-2), local tasks
#: 0..30, control tasks any id.
TASK_IDS = 64
DATA_TASK_IDS = 24
LOCAL_TASK_MAX = 30
#: Task and microthread priorities, most urgent first.
PRIORITY_RANK = {"high": 0, "medium": 1, "low": 2}


@dataclasses.dataclass(slots=True)
class TaskDef:
    """One entry of a compute engine's task table: a task id bound to a function."""

    id: int
    kind: str  # data | local | control
    fn: Callable[..., None]
    name: str
    priority: str = "low"
    colour: int | None = None
    queue: int | None = None


class AsyncOp:
    """One asynchronous DSD operation running on a microthread.

    Element k of the result is ``func(*inputs_k)``; inputs are fabric streams (popped from an
    input queue) or memory tensors (gathered when the operation starts) or scalars; the output is
    a fabric stream (pushed up the ramp) or a memory tensor (written element by element).
    """

    __slots__ = (
        "begin_at",
        "ce",
        "control_wavelet",
        "done",
        "elem",
        "express",
        "fab_in",
        "flow_in",
        "flow_out",
        "func",
        "in_queue",
        "issues",
        "length",
        "microthread",
        "name",
        "on_done",
        "out_colour",
        "out_ctrl",
        "out_mem",
        "out_view",
        "plan",
        "priority",
        "relay",
        "started",
        "values",
        "width",
    )  # fmt: skip

    def __init__(self, ce: ComputeEngine, name: str, length: int) -> None:
        self.ce = ce
        self.name = name
        self.length = length
        self.done = 0
        self.func: Callable[..., Any] | None = None
        # element k from the fabric value: ``func`` on the plan's sources (pe/task.py)
        self.elem: Callable[[Any, int], Any] | None = None
        self.fab_in: int | None = None  # input queue id
        self.in_queue: list | None = None
        # Per-source plan for element-wise ops: ("f",) the fabric value, ("m", array) a
        # gathered memory tensor, ("s", value) a scalar; kept in the instruction's operand order.
        self.plan: list[tuple] = []
        self.out_colour: int | None = None
        self.out_ctrl = False
        self.control_wavelet: Wavelet | None = None
        self.out_mem: Any = None
        self.out_view: np.ndarray | None = None
        self.values: np.ndarray | None = None
        self.microthread = 0
        self.priority = 2
        self.on_done: list[tuple[str, int]] = []
        self.started = 0
        self.issues = 0  # cycles in which this microthread issued
        self.begin_at = 0  # the cycle the operation is registered to begin
        self.express = False  # moved as an express stream (fast fidelity)
        self.relay: list | None = None  # its node among relay chains being found (fabric/relay.py)
        self.width = 1  # elements one issue may move (the op's SIMD width)
        # Trace flows (ops level and above): the send that caused this op (the task that
        # started it, or the stream it receives) and the id its own effects carry (its
        # wavelets, the tasks it activates or unblocks).
        self.flow_in: int | None = None
        self.flow_out: int | None = None

    def describe(self) -> str:
        src = f"input queue {self.fab_in}" if self.fab_in is not None else "memory"
        dst = f"colour {self.out_colour}" if self.out_colour is not None else "memory"
        return (
            f"async {self.name} on microthread {self.microthread} ({src} -> {dst}): "
            f"{self.done} of {self.length} element(s) done"
        )
