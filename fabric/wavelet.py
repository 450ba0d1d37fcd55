"""Wavelets and control commands.

A wavelet is 32 bits on the wire. The model carries it as a small object: its data (a Python float
holding an exact FP32 value, or an int) or, for a control wavelet, up to 8 commands and an
optional control-task id for the receiving CE. ``flow`` is a trace id linking a send to its
receives.
"""

from __future__ import annotations

import enum


class Cmd(enum.IntEnum):
    NOP = 0
    SWITCH_ADV = 1
    SWITCH_RST = 2
    TEARDOWN = 3


MAX_COMMANDS = 8


class Wavelet:
    __slots__ = ("commands", "ctrl", "data", "flow", "task_id")

    def __init__(
        self,
        data: float | int = 0,
        *,
        ctrl: bool = False,
        commands: tuple[Cmd, ...] = (),
        task_id: int | None = None,
        flow: int | None = None,
    ) -> None:
        self.data = data
        self.ctrl = ctrl
        self.commands = commands
        self.task_id = task_id
        self.flow = flow

    def __repr__(self) -> str:
        if self.ctrl:
            return f"<ctrl {','.join(c.name for c in self.commands)} task={self.task_id}>"
        return f"<data {self.data!r}>"
