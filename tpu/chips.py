"""TPU generations as data: one :class:`ChipSpec` per chip, the facts every model reads.

A generation is a row of tables, not code (the Ramulator habit): pod shape, the host's block of
chips, HBM size and bandwidth, peak bf16 and int8 rates, ICI bandwidth per link and direction,
the TensorCore's MXU count and size, and the clock. Sources are in docs/tpu/hardware.md.

The clock is not in the public table: it is *derived* so that the MXUs' mechanism (an
``[8, d] x [d, d]`` product every 8 cycles per MXU, i.e. ``2·d²`` FLOP per cycle) reproduces
the table's peak bf16 rate exactly: ``clock = peak / (2·d²·mxus·cores)``. For v5e this gives
1.5 GHz, the published figure; for v5p 1.75 GHz, v4p 1.05 GHz.
"""

from __future__ import annotations

import dataclasses

from simcore.errors import ConfigError

GIB = 1 << 30


@dataclasses.dataclass(frozen=True)
class ChipSpec:
    """One TPU generation's chip and ICI facts (units in names)."""

    name: str
    dims: int  # ICI torus dimensions: 2 (v3, v5e, v6e) or 3 (v4p, v5p)
    pod: tuple[int, ...]  # the largest slice
    host: tuple[int, ...]  # chips per host
    hbm_bytes: int
    hbm_bytes_per_s: float
    bf16_flops: float
    int8_ops: float
    ici_oneway_bytes_per_s: float  # per link, per direction
    cores: int  # TensorCores per chip (2 = "megacore" sharing HBM)
    mxus_per_core: int
    mxu_dim: int  # an MXU is a mxu_dim x mxu_dim systolic array
    vmem_bytes: int
    wrap_rule: str  # "cubes" (wrap on every axis when made of whole 4x4x4 cubes) or "full-axis"

    @property
    def clock_hz(self) -> int:
        """The TensorCore clock that makes the MXU mechanism give the table's peak bf16 rate,
        to the whole MHz (so clock domains keep a small common tick)."""
        per_cycle = 2 * self.mxu_dim * self.mxu_dim * self.mxus_per_core * self.cores
        return round(self.bf16_flops / per_cycle / 1e6) * 1_000_000

    @property
    def ici_bidir_bytes_per_s(self) -> float:
        return 2 * self.ici_oneway_bytes_per_s

    @property
    def chips_per_pod(self) -> int:
        n = 1
        for a in self.pod:
            n *= a
        return n


CHIPS: dict[str, ChipSpec] = {
    "v3": ChipSpec(
        "v3", 2, (32, 32), (4, 2), 32 * 10**9, 9.0e11, 1.4e14, 1.4e14, 1.0e11,
        cores=2, mxus_per_core=2, mxu_dim=128, vmem_bytes=16 * 2**20, wrap_rule="full-axis",
    ),
    "v4p": ChipSpec(
        "v4p", 3, (16, 16, 16), (2, 2, 1), 32 * 10**9, 1.2e12, 2.75e14, 2.75e14, 4.5e10,
        cores=2, mxus_per_core=4, mxu_dim=128, vmem_bytes=32 * 2**20, wrap_rule="cubes",
    ),
    "v5p": ChipSpec(
        "v5p", 3, (16, 20, 28), (2, 2, 1), 96 * 10**9, 2.8e12, 4.59e14, 9.18e14, 9.0e10,
        cores=2, mxus_per_core=4, mxu_dim=128, vmem_bytes=64 * 2**20, wrap_rule="cubes",
    ),
    "v5e": ChipSpec(
        "v5e", 2, (16, 16), (4, 2), 16 * 10**9, 8.1e11, 1.97e14, 3.94e14, 4.5e10,
        cores=1, mxus_per_core=4, mxu_dim=128, vmem_bytes=128 * 2**20, wrap_rule="full-axis",
    ),
    "v6e": ChipSpec(
        "v6e", 2, (16, 16), (4, 2), 32 * 10**9, 1.6e12, 9.20e14, 1.84e15, 9.0e10,
        cores=1, mxus_per_core=4, mxu_dim=256, vmem_bytes=128 * 2**20, wrap_rule="full-axis",
    ),
}  # fmt: skip

#: Host links (spec: PCIe ~1.5e10 B/s per chip, DCN ~2.5e10 B/s per host).
PCIE_BYTES_PER_S = 1.5e10
DCN_BYTES_PER_S = 2.5e10


def chip(name: str, key: str = "chip") -> ChipSpec:
    """The generation called ``name``; an unknown name is a :class:`ConfigError` on ``key``."""
    try:
        return CHIPS[name]
    except KeyError:
        raise ConfigError(
            key, name, "unknown TPU generation", allowed=", ".join(CHIPS),
            hint=f"pick one with --set {key}=v5e",
        ) from None  # fmt: skip
