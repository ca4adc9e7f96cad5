"""The target ID of a standalone AMDGPU code object (`.hsaco`, `.co`, a bundle's payload), read from its ELF header.

rocBLAS, hipBLASLt and MIOpen ship kernels as files next to their libraries, not in a `.hip_fatbin` section; some
are offload bundles (read by codeobjects), the others bare AMDGPU ELF files whose processor and target features
are only in `e_flags`. Values: LLVM's EF_AMDGPU_MACH list, ROCm/llvm-project@06c62775e4cd479fbfde1c5863016e2665110136:
llvm/include/llvm/BinaryFormat/ELF.h, the AMDGPU_MACH_LIST X-macro (every AMDGCN value LLVM defines: gfx6-gfx8,
gfx9, gfx10-gfx12, gfx950, gfx12.5, gfx13 and the generic targets); 0x040 (gfx940) and 0x04b (gfx941), "reserved"
there now, from MaskRay/llvm-project@a80d5e92c1fd808f96ea8b01245aad2d6683d59b's copy of the same file
(EF_AMDGPU_MACH_AMDGCN_GFX940 = 0x040, EF_AMDGPU_MACH_AMDGCN_GFX941 = 0x04b): code objects for them exist in ROCm
5.7-6.2 libraries. The stored llvm/llvm-project copy (60fce12c1674b4310a76523dd5866364cade5cbe) ends at gfx1013 and
agrees on every value it has. ABI versions: the ELFABIVERSION_AMDGPU_HSA_V2..V6 values 0..4 of the same file.
"""

from __future__ import annotations

import struct

from imagecontract.targets import AMD_FEATURES

EM_AMDGPU = 224
ELFOSABI_AMDGPU_HSA = 64
EF_AMDGPU_MACH = 0x0FF
# EF_AMDGPU_MACH_AMDGCN_* -> processor (LLVM's names, as in AMDGPU_MACH_LIST); R600 values (0x001-0x010) are not
# AMDGCN code a serving image can run and read as unknown.
MACH_NAMES: dict[int, str] = {
    0x020: "gfx600",
    0x021: "gfx601",
    0x022: "gfx700",
    0x023: "gfx701",
    0x024: "gfx702",
    0x025: "gfx703",
    0x026: "gfx704",
    0x028: "gfx801",
    0x029: "gfx802",
    0x02A: "gfx803",
    0x02B: "gfx810",
    0x02C: "gfx900",
    0x02D: "gfx902",
    0x02E: "gfx904",
    0x02F: "gfx906",
    0x030: "gfx908",
    0x031: "gfx909",
    0x032: "gfx90c",
    0x033: "gfx1010",
    0x034: "gfx1011",
    0x035: "gfx1012",
    0x036: "gfx1030",
    0x037: "gfx1031",
    0x038: "gfx1032",
    0x039: "gfx1033",
    0x03A: "gfx602",
    0x03B: "gfx705",
    0x03C: "gfx805",
    0x03D: "gfx1035",
    0x03E: "gfx1034",
    0x03F: "gfx90a",
    0x040: "gfx940",
    0x041: "gfx1100",
    0x042: "gfx1013",
    0x043: "gfx1150",
    0x044: "gfx1103",
    0x045: "gfx1036",
    0x046: "gfx1101",
    0x047: "gfx1102",
    0x048: "gfx1200",
    0x049: "gfx1250",
    0x04A: "gfx1151",
    0x04B: "gfx941",
    0x04C: "gfx942",
    0x04E: "gfx1201",
    0x04F: "gfx950",
    0x050: "gfx1310",
    0x051: "gfx9-generic",
    0x052: "gfx10-1-generic",
    0x053: "gfx10-3-generic",
    0x054: "gfx11-generic",
    0x055: "gfx1152",
    0x058: "gfx1153",
    0x059: "gfx12-generic",
    0x05A: "gfx1251",
    0x05B: "gfx12-5-generic",
    0x05D: "gfx1170",
    0x05F: "gfx9-4-generic",
    0x0EB: "gfx125f",
}
# Code object v4 and later: two bits per feature (0 unsupported, 1 any, 2 off, 3 on).
_V4_FEATURES = (("sramecc", 0xC00, 10), ("xnack", 0x300, 8))
# Code object v3: one bit each, set = on.
_V3_FEATURES = (("sramecc", 0x200), ("xnack", 0x100))


def is_amdgpu_elf(header: bytes) -> bool:
    """A 64-bit little-endian ELF whose machine is AMDGPU (header: at least the first 20 bytes)."""
    return len(header) >= 20 and header[:4] == b"\x7fELF" and struct.unpack_from("<H", header, 18)[0] == EM_AMDGPU


def amdgpu_target(header: bytes) -> str | None:
    """`gfx90a:xnack-` from the first 64 bytes of an AMDGPU code object; None when it is not one.

    An unknown processor reads as `amdgcn-mach-0xNN` (listed, never matching a request): the table above
    lags newer LLVM, and a silent drop would hide code.
    """
    if len(header) < 52 or not is_amdgpu_elf(header):
        return None
    abi_version = header[8]
    (flags,) = struct.unpack_from("<I", header, 48)
    mach = flags & EF_AMDGPU_MACH
    name = MACH_NAMES.get(mach, f"amdgcn-mach-{mach:#04x}")
    features: list[str] = []
    if header[7] == ELFOSABI_AMDGPU_HSA and abi_version >= 2:  # v4+
        for feature, mask, shift in _V4_FEATURES:
            setting = (flags & mask) >> shift
            if setting in (2, 3):
                features.append(f"{feature}{'+' if setting == 3 else '-'}")
    elif header[7] == ELFOSABI_AMDGPU_HSA and abi_version == 1:  # v3: a set bit means on, clear means off
        allowed = AMD_FEATURES.get(name, frozenset())
        features += [f"{f}{'+' if flags & bit else '-'}" for f, bit in _V3_FEATURES if f in allowed]
    return ":".join([name, *features])
