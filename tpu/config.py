"""Configuration of the ICI network layer: one frozen, keyword-only dataclass, units in names."""

from __future__ import annotations

import dataclasses

from simcore.config import param
from simcore.errors import ConfigError


@dataclasses.dataclass(frozen=True, kw_only=True)
class IciConfig:
    """The ICI links of a slice. Bandwidth comes from the chip table unless overridden."""

    hop_latency_ns: int = param(
        1000, "time of one hop whatever the payload (spec: ~1 us), added to serialisation",
        min=0, max=10**7,
    )  # fmt: skip
    chunk_bytes: int = param(
        1 << 20,
        "messages are cut into chunks of at most this many bytes; a chip forwards a chunk once "
        "it has all of it (smaller: better pipelining over hops, more events)",
        min=4, max=1 << 34,
    )  # fmt: skip
    link_bytes_per_s: float = param(
        0.0, "one-way bandwidth of each link; 0 = the chip table's value", min=0.0
    )
    clock_hz: int = param(
        1_000_000_000, "clock of the link timing (its resolution: 1 GHz = 1 ns)",
        min=1_000_000, max=10**12,
    )  # fmt: skip

    def check(self) -> None:
        if self.chunk_bytes % 4:
            raise ConfigError(
                "ici.chunk_bytes", self.chunk_bytes, "must be a multiple of 4 bytes",
                allowed="a multiple of 4 (a whole number of f32 elements)",
            )  # fmt: skip
