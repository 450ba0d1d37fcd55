"""Fabric parameters (docs/wafer/hardware.md, "Router and fabric" and "Programming model").

Every number is a published WSE-2 value or, where none is published, a documented choice (see
"Unknowns and their defaults" in docs/wafer/hardware.md).
The ramp parameters carry the broadcast slope: a ramp direction sustains
``ramp_credits / (ramp_latency_cycles + ramp_credit_latency_cycles)`` wavelets per cycle, 5/8 by
default, i.e. the 1.6 cycles per FP32 word of the measured T_bcast(I) = 1.6 I + 250.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from simcore.config import param
from simcore.errors import ConfigError


@dataclasses.dataclass(frozen=True, kw_only=True)
class FabricConfig:
    colours: int = param(24, "routing colours per router (WSE-2: 24)", min=1, max=24)
    hop_latency_cycles: int = param(
        1, "cycles for a wavelet to cross one router-to-router link (spec: one per hop)", min=1
    )
    hop_credit_latency_cycles: int = param(
        1, "cycles for a freed buffer slot to be seen by the upstream router", min=1
    )
    router_buffer_wavelets: int = param(
        2, "per-colour input buffer of a router port, in wavelets (spec: 'small')", min=1, max=64
    )
    ramp_latency_cycles: int = param(
        2, "cycles for a wavelet to cross the ramp between router and CE (either way)", min=1
    )
    ramp_credit_latency_cycles: int = param(
        6, "cycles for a freed ramp slot to be seen by the ramp's sender", min=1
    )
    ramp_credits: int = param(
        5,
        "wavelet slots at the receiving end of a ramp (capped by the bound queue's depth)",
        min=1,
        max=64,
    )
    arbitration: Literal["round_robin", "fixed"] = param(
        "round_robin", "how an output link chooses among colours that want it"
    )
    switch_positions: int = param(4, "switch positions per colour (pos0..pos3)", min=1, max=4)
    filters_per_pe: int = param(6, "wavelet filters per PE (counter, range)", min=0, max=6)

    def check(self) -> None:
        rate = self.ramp_credits / (self.ramp_latency_cycles + self.ramp_credit_latency_cycles)
        if rate <= 0:
            raise ConfigError("fabric.ramp_credits", self.ramp_credits, "gives no bandwidth")
