"""Configuration of the network layer (ICI links, and DCN between slices): one frozen,
keyword-only dataclass, units in names."""

from __future__ import annotations

import dataclasses

from simcore.config import param
from simcore.errors import ConfigError


@dataclasses.dataclass(frozen=True, kw_only=True)
class IciConfig:
    """The ICI links of a slice. Bandwidth comes from the chip table unless overridden."""

    fidelity: str = param(
        "packet",
        "how the links move bytes: packet (the reference: every packet over every link, "
        "cut-through, credits, round robin) or flow (each message one flow, link bandwidth "
        "shared equally among the messages on it, events per message and hop: for pods; "
        "within 2 % of packet where messages are 64 packets or more, docs/tpu/design.md)",
        choices=("packet", "flow"),
    )  # fmt: skip
    hop_latency_ns: int = param(
        1000, "time of one hop whatever the payload (spec: ~1 us), added to serialisation",
        min=0, max=10**7,
    )  # fmt: skip
    packet_bytes: int = param(
        4096,
        "messages are cut into packets of at most this many bytes, which cut through chips "
        "(an assumption: Google does not publish the ICI packet size; see docs/tpu/hardware.md)",
        min=64, max=1 << 30,
    )  # fmt: skip
    buffer_bytes: int = param(
        262_144,
        "packet buffer at each link's receiving end, returned to the sender as credits (an "
        "assumption, sized to cover the credit round trip 2 x latency x bandwidth on every "
        "generation at the default latency)",
        min=64, max=1 << 34,
    )  # fmt: skip
    link_bytes_per_s: float = param(
        0.0, "one-way bandwidth of each link; 0 = the chip table's value", min=0.0
    )
    pcie_bytes_per_s: float = param(
        1.5e10, "multi-slice: each chip's PCIe link to its host, per direction", min=1.0
    )
    dcn_bytes_per_s: float = param(
        2.5e10, "multi-slice: each host's data-centre network bandwidth, per direction", min=1.0
    )
    dcn_latency_ns: int = param(
        10_000, "multi-slice: network latency between hosts (not in the spec: a chosen default)",
        min=0, max=10**9,
    )  # fmt: skip
    clock_hz: int = param(
        1_000_000_000, "clock of the link timing (its resolution: 1 GHz = 1 ns)",
        min=1_000_000, max=10**12,
    )  # fmt: skip

    def check(self) -> None:
        if self.packet_bytes % 4:
            raise ConfigError(
                "ici.packet_bytes", self.packet_bytes, "must be a multiple of 4 bytes",
                allowed="a multiple of 4 (a whole number of f32 elements)",
            )  # fmt: skip
        if self.buffer_bytes < self.packet_bytes:
            raise ConfigError(
                "ici.buffer_bytes", self.buffer_bytes, "holds no whole packet",
                allowed=f">= ici.packet_bytes ({self.packet_bytes})",
            )  # fmt: skip
