"""HBM stacks with PIM: the configuration block and the component that owns the controllers.

:class:`HbmConfig` is the block a scenario sets (``--set hbm.scheduler=fcfs``): the standard
preset, the number of stacks, the controller's scheduling, page and refresh policies.
:class:`HbmStack` builds, in its own clock domain ``hbm`` (the command clock), one
:class:`pim.device.PseudoChannel` and one :class:`pim.controller.Controller` per simulated
pseudo-channel. ``pchs`` chooses how many are simulated: all of the stacks' pseudo-channels
(full fidelity), or fewer when every pseudo-channel receives the same broadcast command stream
and one stands for all (the two-fidelity argument of docs/pim/design.md).
"""

from __future__ import annotations

import dataclasses

from pim.controller import Controller
from pim.device import PseudoChannel
from pim.standard import PRESETS, Standard
from simcore.component import Component
from simcore.config import param
from simcore.errors import ConfigError
from simcore.sim import Simulation


@dataclasses.dataclass(frozen=True, kw_only=True)
class HbmConfig:
    preset: str = param(
        "hbm3-4.8", "memory standard preset (organisation + timing table)", choices=tuple(PRESETS)
    )
    stacks: int = param(1, "HBM stacks", min=1, max=8)
    scheduler: str = param(
        "fr-fcfs", "request scheduling policy of each controller", choices=("fr-fcfs", "fcfs")
    )
    page_policy: str = param(
        "open", "row buffer policy for host requests", choices=("open", "closed")
    )
    refresh: str = param("all-bank", "refresh policy", choices=("all-bank", "none"))
    queue_depth: int = param(
        32,
        "scheduling window: reads (all requests without a write queue) a controller sees",
        min=1,
        max=1024,
    )
    write_queue_depth: int = param(
        32,
        "write queue entries (0: writes share the read window, no write drain)",
        min=0,
        max=1024,
    )
    write_high_watermark: int = param(24, "writes queued that start a write drain", min=1, max=1024)
    write_low_watermark: int = param(
        8, "writes queued at which a drain stops (when reads wait)", min=0, max=1024
    )
    row_hit_cap: int = param(
        4, "row hits a bank serves first-ready before age decides (0: no cap)", min=0, max=1024
    )
    request_path: str = param(
        "bulk",
        "how a controller decides host requests: bulk (several commands a kernel event, the "
        "same commands at the same cycles) or event (one kernel event a command, the reference)",
        choices=("bulk", "event"),
    )
    stream_path: str = param(
        "runs",
        "how a controller issues a PIM command stream: runs (a run of the same RD or WR "
        "triggers to the same banks decided at once, the same commands at the same cycles) or "
        "command (one at a time, the reference)",
        choices=("runs", "command"),
    )

    def standard(self) -> Standard:
        return PRESETS[self.preset]()

    def check(self) -> None:
        if self.preset not in PRESETS:
            raise ConfigError("preset", self.preset, "unknown", allowed=", ".join(PRESETS))
        if self.write_queue_depth and self.write_high_watermark > self.write_queue_depth:
            raise ConfigError(
                "hbm.write_high_watermark", self.write_high_watermark,
                f"above hbm.write_queue_depth = {self.write_queue_depth}",
                allowed=f"1..{self.write_queue_depth}",
                hint="lower it or raise hbm.write_queue_depth",
            )  # fmt: skip
        if self.write_low_watermark >= self.write_high_watermark:
            raise ConfigError(
                "hbm.write_low_watermark", self.write_low_watermark,
                f"not below hbm.write_high_watermark = {self.write_high_watermark}",
                allowed=f"0..{self.write_high_watermark - 1}",
                hint="a drain must stop below where it starts",
            )  # fmt: skip


class HbmStack(Component):
    """``pchs`` simulated pseudo-channels of the configured stacks, each with its controller."""

    def __init__(
        self, sim: Simulation, cfg: HbmConfig, *, pchs: int, record: bool = False,
        name: str = "hbm", store_data: bool = True,
    ) -> None:  # fmt: skip
        self.cfg = cfg
        self.std = cfg.standard()
        dom = sim.domain("hbm", self.std.timing.clock_hz)
        super().__init__(sim, name, domain=dom)
        self.pchs = [
            PseudoChannel(self.std, f"{name}/pch[{i}]", store_data=store_data) for i in range(pchs)
        ]
        self.controllers = [
            Controller(
                self, f"pch[{i}]", p, scheduler=cfg.scheduler, page_policy=cfg.page_policy,
                refresh=cfg.refresh, queue_depth=cfg.queue_depth,
                write_queue_depth=cfg.write_queue_depth,
                write_high_watermark=cfg.write_high_watermark,
                write_low_watermark=cfg.write_low_watermark, row_hit_cap=cfg.row_hit_cap,
                record=record, request_path=cfg.request_path, traces_alone=pchs == 1,
                stream_path=cfg.stream_path,
            )
            for i, p in enumerate(self.pchs)
        ]  # fmt: skip

    @property
    def total_pchs(self) -> int:
        return self.std.org.pchs * self.cfg.stacks

    def end_cycle(self) -> int:
        return max(c.end_cycle for c in self.controllers)

    def progress_count(self) -> int:
        return sum(sum(c.counts.values()) for c in self.controllers)
