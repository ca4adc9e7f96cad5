"""CUDA fat binaries: what device code a library carries, read from its fat binary headers (never the payloads).

Stdlib only (it runs inside images, through imagecontract.coverage and imagecontract.codeobjects). Layout, read
from nvcc 13.0's output and checked entry for entry against `cuobjdump --list-elf --list-ptx` (cuobjdump 13.5.37,
the PyPI wheel nvidia-cuda-cuobjdump) on synthetic fat binaries and on the libraries of torch 2.14.0, vLLM 0.33.0,
NCCL 2.30.7, cuDNN 9.24.0.43, cuRAND 10.4.5.25 and CuPy 14.2.0 wheels (tests/test_cuda_coverage.py):

- An ELF library keeps its fat binaries in `.nv_fatbin` (what the CUDA runtime registers and the driver loads)
  and, when built with relocatable device code, in `__nv_relfatbin` (code for a later device link, never
  loaded as it is). `.nvFatBinSegment` holds one `__fatBinC_Wrapper_t` per registered fat binary (magic
  0x466243B1, version, a pointer into `.nv_fatbin` fixed up by a relocation): only counted here, the
  containers themselves are found in `.nv_fatbin`.
- A container (little-endian): u32 magic 0xBA55ED50, u16 version, u16 header size, u64 size of the entries
  that follow. Containers follow one another, padded; each is found by its magic after the previous one.
- An entry: u16 kind (1 PTX, 2 cubin, 8 LTO IR), u16 version, u32 header size (64 or 112 for a cubin, 80 for
  PTX: at least 48 are read), u64 payload size, then at offset 28 the u32 arch (`90` for sm_90 / compute_90) and
  at offset 40 the u64 flags: 0x100000 an arch-specific (`a`) target, 0x200000 a family (`f`) target (both seen
  on cubins and PTX; nvcc 13.0 sets no other target bit). The payload (possibly compressed) is skipped.

Every length is bounded before use: a container must lie inside its section, an entry inside its container,
header sizes have a floor (no entry is walked twice) and the entries walked per library have a ceiling.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass

from imagecontract.blob import MAX_ENTRIES, MAX_WALKED, Blob, VerifyError

FATBIN_MAGIC = 0xBA55ED50  # a fat binary container, in `.nv_fatbin` / `__nv_relfatbin`
WRAPPER_MAGIC = 0x466243B1  # __fatBinC_Wrapper_t, in `.nvFatBinSegment`: points at a container
KIND_PTX = 1
KIND_ELF = 2
KIND_LTO = 8  # LTO IR (nvcc -dlto / code=lto_XY): input to nvJitLink, not code the driver loads
FLAG_ARCH_SPECIFIC = 0x100000  # built for sm_XYa / compute_XYa
FLAG_FAMILY = 0x200000  # built for sm_XYf / compute_XYf
HEADER = 16  # magic, version, header size, entries size
ENTRY_MIN = 48  # kind .. flags: the fields read
MAX_ARCH = 9999  # an arch number beyond this is not one (the field is a u32)
LOADED = ".nv_fatbin"
RELOCATABLE = "__nv_relfatbin"
WRAPPERS = ".nvFatBinSegment"
WRAPPER_SIZE = 24  # u32 magic, u32 version, u64 data pointer, u64 filename or prelinked fat binaries

_KIND_NAMES = {KIND_PTX: "ptx", KIND_ELF: "cubin", KIND_LTO: "lto"}
_NAME = re.compile(r"^(sm|compute|lto)_(\d{1,3})(\d)([af]?)$")


@dataclass(frozen=True, order=True)
class Entry:
    """One entry of a fat binary: a cubin (SASS for one sm), PTX, or LTO IR, and its target variant."""

    kind: str  # "cubin", "ptx", "lto" or "kind-<n>"
    major: int
    minor: int
    variant: str = ""  # "", "a" (arch-specific) or "f" (family)

    @property
    def name(self) -> str:
        """`sm_90a` for a cubin, `compute_90a` for PTX, `lto_90` for LTO IR (nvcc's spellings)."""
        prefix = {"cubin": "sm", "ptx": "compute", "lto": "lto"}.get(self.kind, self.kind)
        return f"{prefix}_{self.major}{self.minor}{self.variant}"


def parse_name(name: str) -> Entry | None:
    """`sm_100f` -> Entry("cubin", 10, 0, "f"), `compute_90a` -> PTX, `sm_90+PTX` -> the cubin; None if not one.

    A minimal local parse: the arch table (imagecontract/targets.py) names processors, not fat binary entries
    with their `f` variants."""
    match = _NAME.match(name.strip().lower().removesuffix("+ptx"))
    if not match:
        return None
    prefix, major, minor, variant = match.groups()
    kind = {"sm": "cubin", "compute": "ptx", "lto": "lto"}[prefix]
    return Entry(kind, int(major), int(minor), variant)


def container_entries(blob: Blob) -> list[Entry]:
    """The distinct entries of every container laid out in one section (or a bare `.fatbin` file), in order."""
    entries: dict[Entry, None] = {}
    walked = 0
    magic = struct.pack("<I", FATBIN_MAGIC)
    pos = 0
    while True:
        # Containers usually follow one another: look where the last one ended before searching (a search reads
        # the bytes it passes, and a library's fat binaries are most of its size)
        if not (pos + HEADER <= blob.size and blob.read(pos, 4, "fat binary magic") == magic):
            pos = blob.find((magic,), pos)
            if pos < 0:
                break
        _, _version, header_size, fat_size = blob.unpack("<IHHQ", pos, "fat binary header")
        if header_size < HEADER:
            raise VerifyError(f"fat binary at offset {pos}: header size {header_size} is below {HEADER}")
        blob.check(pos, header_size + fat_size, "fat binary")
        cur, end = pos + header_size, pos + header_size + fat_size
        while cur < end:
            kind, _v, entry_header, payload = blob.unpack("<HHIQ", cur, "fat binary entry")
            if entry_header < ENTRY_MIN:
                raise VerifyError(f"fat binary entry at offset {cur}: header size {entry_header} is too small")
            if cur + entry_header + payload > end:
                raise VerifyError(f"fat binary entry at offset {cur} runs past its fat binary")
            (arch,) = blob.unpack("<I", cur + 28, "fat binary entry")
            (flags,) = blob.unpack("<Q", cur + 40, "fat binary entry")
            if arch > MAX_ARCH:
                raise VerifyError(f"fat binary entry at offset {cur}: arch {arch} is not a compute capability")
            variant = "a" if flags & FLAG_ARCH_SPECIFIC else "f" if flags & FLAG_FAMILY else ""
            entries[Entry(_KIND_NAMES.get(kind, f"kind-{kind}"), arch // 10, arch % 10, variant)] = None
            walked += 1
            if walked > MAX_WALKED or len(entries) > MAX_ENTRIES:
                raise VerifyError(f"more than {MAX_WALKED} fat binary entries ({MAX_ENTRIES} distinct)")
            cur += entry_header + payload
        pos = end
    return list(entries)


# PTX shipped as text files (flashinfer 0.7.2.post1 keeps its KDA kernels as `data/csrc/kda/ptx/*.ptx`, each
# `.target sm_103a`), loaded by the driver's JIT at run time: the `.target` directive names the arch (PTX ISA,
# "Module Directives: .target"), found in the first PTX_TEXT_HEAD bytes (after nvcc's comment header and
# `.version`).
PTX_TEXT_HEAD = 64 << 10
_PTX_TARGET = re.compile(rb"^[ \t]*\.target[ \t]+sm_(\d{1,3})(\d)([af]?)\b", re.M)


def ptx_text_target(head: bytes) -> str | None:
    """`compute_103a` for a PTX text file whose head declares `.target sm_103a`; None when it declares none."""
    match = _PTX_TARGET.search(head[:PTX_TEXT_HEAD])
    if not match:
        return None
    major, minor, variant = match.groups()
    return f"compute_{int(major)}{int(minor)}{variant.decode()}"


def wrapper_count(segment: Blob) -> int:
    """How many fat binaries `.nvFatBinSegment` registers (its `__fatBinC_Wrapper_t` records with the magic)."""
    count = 0
    for off in range(0, segment.size - WRAPPER_SIZE + 1, WRAPPER_SIZE):
        if segment.unpack("<I", off, "fat binary wrapper")[0] == WRAPPER_MAGIC:
            count += 1
    return count


@dataclass
class Carried:
    """What one library carries: code the driver loads (`.nv_fatbin`) and relocatable code it does not."""

    loaded: list[Entry]
    relocatable: list[Entry]
    wrappers: int = 0

    @property
    def cubins(self) -> list[str]:
        return sorted({e.name for e in self.loaded if e.kind == "cubin"}, key=_order)

    @property
    def ptx(self) -> list[str]:
        return sorted({e.name for e in self.loaded if e.kind == "ptx"}, key=_order)


def _order(name: str) -> tuple[int, int, str]:
    entry = parse_name(name)
    return (entry.major, entry.minor, entry.variant) if entry else (0, 0, name)


def carried(sections: dict[str, Blob]) -> Carried:
    """The fat binary entries of an ELF file's sections (imagecontract.codeobjects.elf_section_blobs)."""
    loaded = container_entries(sections[LOADED]) if LOADED in sections else []
    relocatable = container_entries(sections[RELOCATABLE]) if RELOCATABLE in sections else []
    wrappers = wrapper_count(sections[WRAPPERS]) if WRAPPERS in sections else 0
    return Carried(loaded, relocatable, wrappers)


def describe(cubins: list[str], ptx: list[str]) -> str:
    """`sm_80, sm_90a + PTX compute_90` (what a library carries, for one error line), or `no CUDA device code`."""
    parts = ", ".join(sorted(cubins, key=_order)) or "no cubins"
    if ptx:
        parts += " + PTX " + ", ".join(sorted(ptx, key=_order))
    return parts if cubins or ptx else "no CUDA device code"


# --- the coverage rule: can a GPU run a library that carries these cubins and PTX ---------------------------
# CUDA's own compatibility, one cell per (library, requested arch); the requested arch names a device by its
# compute capability (`sm_121a` and `sm_121` are both a 12.1 GPU: the suffix says which build variant our own
# kernels compile, not another GPU; `sm_100f` is judged on its base device, 10.0 — list sm_103 to prove 10.3).
# - A cubin for sm_XY runs on sm_XZ with Z >= Y of the same major (NVIDIA, Blackwell Compatibility Guide, CUDA
#   13.0, 1.2 "Application Compatibility on Blackwell Architecture": "A cubin generated for a certain compute
#   capability is supported to run on any GPU with the same major revision and same or higher minor revision").
# - An arch-specific cubin or PTX (sm_90a, compute_100a) runs only on its exact compute capability (CUDA
#   Programming Guide 5.1.2 "Feature Availability", docs.nvidia.com/cuda/cuda-programming-guide/05-appendices/
#   compute-capabilities.html: arch-specific features "are not guaranteed to be available on any other" device).
# - A family cubin or PTX (sm_100f, compute_120f) runs within its family: the same major, the same or a higher
#   minor (same page, "Family-specific features", and NVIDIA's blog "NVIDIA Blackwell and NVIDIA CUDA 12.9
#   Introduce Family-Specific Architecture Features": compute_100f code runs on 10.0 and 10.3, not on 11.0 or
#   12.x; compute_120f on 12.0 and 12.1).
# - Plain PTX (compute_XY) is JIT-compiled by the driver for any device of compute capability >= X.Y (the same
#   guide, "PTX compatibility"): coverage of a weaker kind (the first start compiles, and a driver older than the
#   toolkit that wrote the PTX refuses it), reported as such.

CELL_KINDS = ("cubin exact", "cubin compatible", "family", "ptx-jit", "none")
# The coverage table's older status words for each kind (imagecontract/models/coverage.py Status).
STATUS_OF = {
    "cubin exact": "present",
    "cubin compatible": "compatible",
    "family": "compatible",
    "ptx-jit": "ptx",
    "none": "absent",
}


@dataclass(frozen=True)
class Cell:
    """How a device runs a library: the kind of coverage and the entry that gives it (None for "none")."""

    kind: str  # one of CELL_KINDS
    source: str | None = None  # `sm_90a`, `sm_80`, `sm_100f`, `compute_80`

    @property
    def status(self) -> str:
        return STATUS_OF[self.kind]

    def text(self) -> str:
        """`cubin exact (sm_90a)`, `cubin compatible from sm_80`, `family from sm_100f`, `ptx-jit from compute_80`."""
        if self.kind == "none":
            return "none"
        return f"{self.kind} ({self.source})" if self.kind == "cubin exact" else f"{self.kind} from {self.source}"


def _cubin_cell(code: Entry, dev: Entry) -> str | None:
    if (code.major, code.minor) == (dev.major, dev.minor):
        return "cubin exact"  # sm_90, sm_90a and sm_90f code all run on a 9.0 device
    if code.major != dev.major or code.minor > dev.minor or code.variant == "a":
        return None  # another major, a newer minor, or an `a` cubin of another chip
    return "family" if code.variant == "f" else "cubin compatible"


def _ptx_runs(code: Entry, dev: Entry) -> bool:
    if code.variant == "a":
        return (code.major, code.minor) == (dev.major, dev.minor)
    if code.variant == "f":
        return code.major == dev.major and code.minor <= dev.minor
    return (code.major, code.minor) <= (dev.major, dev.minor)


def cuda_cell(device: str, cubins: list[str], ptx: list[str]) -> Cell:
    """The best coverage `device` (`sm_121`, `sm_90a`, `9.0`-style names are the table's job) gets from a library
    carrying these cubins (`sm_80`, `sm_90a`) and PTX (`compute_90`): exact > compatible > family > PTX JIT."""
    dev = parse_name(device)
    if dev is None:
        return Cell("none")
    best: tuple[int, int, str] | None = None
    source = ""
    for name in cubins:
        code = parse_name(name)
        kind = _cubin_cell(code, dev) if code else None
        if code and kind:
            # the nearest code first: the same compute capability, then the highest older minor
            rank = (CELL_KINDS.index(kind), -code.minor, code.variant)
            if best is None or rank < best:
                best, source = rank, code.name
    if best is not None:
        return Cell(CELL_KINDS[best[0]], source)
    runnable = [p for p in map(parse_name, ptx) if p and _ptx_runs(p, dev)]
    if runnable:
        newest = max(runnable, key=lambda p: (p.major, p.minor, p.variant != ""))
        return Cell("ptx-jit", f"compute_{newest.major}{newest.minor}{newest.variant}")
    return Cell("none")
