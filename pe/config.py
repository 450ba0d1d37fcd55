"""Processing-element parameters (docs/wafer/hardware.md, "Processing element", "Programming
model").

Every number is a published WSE-2 value or, where none is published, a documented choice. Two
parameters carry the measured FP32 FMAC time T_fmac(I) = 2 I + 10 cycles (docs/wafer/pe-isa.md):
``fp32_fmac_cycles_per_element`` (2) is the initiation interval of an FP32 multiply-add on the
16-bit FMAC datapath and gives the slope; ``dsd_setup_cycles`` (4) plus ``pipeline_stages`` (6) give
the constant. The timing code never sees the formula, only these mechanisms.

SIMD widths are elements issued per cycle for each instruction class. Operations with no published
width borrow the width of their class: FP32 add-like ops (``fsubs``, ``fmuls``, ``fnegs``,
``fmaxs``, ``add32``) use ``fadds_simd_width``; ``fmovh`` uses ``mov16_simd_width``; ``add16`` uses
``faddh_simd_width``.
"""

from __future__ import annotations

import dataclasses

from simcore.config import param
from simcore.errors import ConfigError

#: Bytes one datapath access moves (the 64-bit reads and write of docs/wafer/hardware.md).
DATAPATH_BYTES = 8


@dataclasses.dataclass(frozen=True, kw_only=True)
class PeConfig:
    sram_bytes: int = param(
        49152, "local SRAM per PE, code and data (WSE-2: 48 kB)", min=256, multiple_of=4
    )
    sram_banks: int = param(8, "single-ported SRAM banks", min=1, max=64)
    bank_bytes: int = param(6144, "bytes per SRAM bank (WSE-2: 6 kB)", min=1)
    bank_interleave_bytes: int = param(
        2,
        "bytes per bank before the next bank (successive 16-bit words in successive banks)",
        choices=(2, 4, 8),
    )
    bank_conflict_modulus: int = param(
        4, "two reads in one cycle conflict when their start banks agree modulo this", min=1
    )
    bank_conflict_penalty_cycles: int = param(
        1, "extra cycles an issue beat takes when its two reads hit the same bank group", min=0
    )
    cache_bytes: int = param(
        256, "software-managed cache per PE (used for accumulators)", min=0, multiple_of=4
    )
    code_bytes: int = param(
        2048, "program size charged against SRAM when the program gives none (assumption)", min=0
    )
    pipeline_stages: int = param(
        6, "in-order pipeline depth; a tensor instruction pays it once as pipeline fill", min=1
    )
    dsd_setup_cycles: int = param(
        4, "cycles to load DSD operands and start a tensor instruction (fits T_fmac's +10)", min=0
    )
    fp32_fmac_cycles_per_element: int = param(
        2, "initiation interval of an FP32 fmacs on the 16-bit FMAC datapath, cycles", min=1
    )
    fmach_simd_width: int = param(
        4, "FP16 multiply-add (fmach), elements per cycle", min=1, max=DATAPATH_BYTES // 2
    )
    faddh_simd_width: int = param(
        4, "FP16 add (faddh), elements per cycle", min=1, max=DATAPATH_BYTES // 2
    )
    fmulh_simd_width: int = param(
        4, "FP16 multiply (fmulh), elements per cycle", min=1, max=DATAPATH_BYTES // 2
    )
    mov16_simd_width: int = param(
        4, "16-bit moves (mov16, fmovh), elements per cycle", min=1, max=DATAPATH_BYTES // 2
    )
    fadds_simd_width: int = param(
        2, "FP32 add and add-like ops, elements per cycle", min=1, max=DATAPATH_BYTES // 4
    )
    fmachs_simd_width: int = param(
        2,
        "FP16 multiply with FP32 accumulate (fmachs), elements per cycle",
        min=1,
        max=DATAPATH_BYTES // 4,
    )
    mov32_simd_width: int = param(
        2, "32-bit moves (mov32), elements per cycle", min=1, max=DATAPATH_BYTES // 4
    )
    fmovs_simd_width: int = param(
        2, "FP32 moves (fmovs), elements per cycle", min=1, max=DATAPATH_BYTES // 4
    )
    fmacs_simd_width: int = param(1, "FP32 multiply-add (fmacs) is not vectorised", min=1, max=1)
    task_switch_cycles: int = param(
        3, "cycles between the end of one task and the start of the next (assumption)", min=0
    )
    timestamp_bits: int = param(48, "width of the per-PE timestamp counter", min=1, max=64)

    def check(self) -> None:
        """Reject values that contradict each other (ranges are checked by ``config.load``)."""
        if self.sram_banks * self.bank_bytes != self.sram_bytes:
            raise ConfigError(
                "pe.sram_bytes",
                self.sram_bytes,
                f"must equal pe.sram_banks x pe.bank_bytes = {self.sram_banks} x "
                f"{self.bank_bytes} = {self.sram_banks * self.bank_bytes}",
                hint="change pe.bank_bytes or pe.sram_banks to match",
            )
        if self.sram_banks % self.bank_conflict_modulus:
            raise ConfigError(
                "pe.bank_conflict_modulus",
                self.bank_conflict_modulus,
                f"must divide pe.sram_banks = {self.sram_banks}",
                hint="use half the bank count (WSE-2: 4)",
            )
        if self.code_bytes > self.sram_bytes:
            raise ConfigError(
                "pe.code_bytes",
                self.code_bytes,
                f"exceeds pe.sram_bytes = {self.sram_bytes}",
                allowed=f"0 .. {self.sram_bytes}",
            )
        for name, elem_bytes in _WIDTH_ELEMENT_BYTES.items():
            width = getattr(self, name)
            if width * elem_bytes > DATAPATH_BYTES:
                raise ConfigError(
                    f"pe.{name}",
                    width,
                    f"{width} x {elem_bytes}-byte elements exceed the 64-bit datapath",
                    allowed=f"1 .. {DATAPATH_BYTES // elem_bytes}",
                )

    def simd_width(self, name: str) -> int:
        """The width field ``name`` (an ``OpSpec.simd_width_param``), elements per cycle."""
        return int(getattr(self, name))


# Widest element each width parameter moves per lane (fmachs accumulates in 32 bits).
_WIDTH_ELEMENT_BYTES = {
    "fmach_simd_width": 2,
    "faddh_simd_width": 2,
    "fmulh_simd_width": 2,
    "mov16_simd_width": 2,
    "fadds_simd_width": 4,
    "fmachs_simd_width": 4,
    "mov32_simd_width": 4,
    "fmovs_simd_width": 4,
    "fmacs_simd_width": 4,
}
