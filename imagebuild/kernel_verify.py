"""List the GPU code objects a built library holds and compare them with the requested arch list.

Stdlib only and runnable on its own (`python3 kernel_verify.py FILE --arch LIST --json-out PATH`), because the
kernel builder stage inside an image never imports the imagebuild package. It reads the ELF sections itself:
`.hip_fatbin` (clang offload bundles, plain or `CCOB`-compressed) and `.nv_fatbin` (CUDA fat binaries).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

BUNDLE_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"
CCOB_MAGIC = b"CCOB"
FATBIN_MAGIC = 0xBA55ED50
FATBIN_KIND_PTX = 1
FATBIN_KIND_ELF = 2

# TORCH_CUDA_ARCH_LIST accepts these names (torch.utils.cpp_extension); only the ones still built by CUDA 13.
NAMED_CUDA_ARCHES = {"ampere": "8.0;8.6+PTX", "ada": "8.9+PTX", "hopper": "9.0+PTX", "blackwell": "10.0+PTX"}

_GFX_RE = re.compile(r"^(gfx[0-9a-f]+)((?::[a-z0-9_-]+[+-])*)$")
_SM_RE = re.compile(r"^(sm|compute)_([0-9]+[a-z]?)$")
_DOTTED_RE = re.compile(r"^([0-9]+)\.([0-9]+)([a-z]?)(\+ptx)?$")


class VerifyError(Exception):
    """Bad input (unreadable file, unknown arch spelling): exit code 2, as a usage error."""


@dataclass(frozen=True)
class Requested:
    """A parsed arch request: target IDs as written (features kept) and the PTX wanted."""

    code_objects: tuple[str, ...]
    ptx: tuple[str, ...] = ()

    @property
    def processors(self) -> set[str]:
        return {processor(a) for a in self.code_objects}


@dataclass
class Listing:
    """What one library holds: code object IDs (features kept), PTX entries, and where each came from."""

    library: str
    code_objects: list[str] = field(default_factory=list)
    ptx: list[str] = field(default_factory=list)
    entries: list[str] = field(default_factory=list)


def processor(target_id: str) -> str:
    """`gfx942:sramecc+:xnack-` -> `gfx942`; `sm_90` stays: comparisons are on the processor name."""
    return target_id.split(":", 1)[0]


def parse_arch_list(text: str) -> Requested:
    """Parse `gfx90a;gfx942`, `gfx942:sramecc+:xnack-`, `sm_80,sm_90`, `8.0;9.0`, `9.0+PTX` (and mixes)."""
    code: list[str] = []
    ptx: list[str] = []
    tokens = [t for t in re.split(r"[;,\s]+", text.strip()) if t]
    if not tokens:
        raise VerifyError("empty arch list (give e.g. 'gfx90a;gfx942' or 'sm_80,sm_90' or '8.0;9.0')")
    for raw in tokens:
        tok = raw.lower()
        if tok in NAMED_CUDA_ARCHES:
            sub = parse_arch_list(NAMED_CUDA_ARCHES[tok])
            code.extend(sub.code_objects)
            ptx.extend(sub.ptx)
            continue
        if m := _GFX_RE.match(tok):
            code.append(raw if raw.startswith("gfx") else tok)
            continue
        if m := _SM_RE.match(tok):
            (code if m.group(1) == "sm" else ptx).append(f"{m.group(1)}_{m.group(2)}")
            continue
        if m := _DOTTED_RE.match(tok):
            num = f"{m.group(1)}{m.group(2)}{m.group(3)}"
            code.append(f"sm_{num}")
            if m.group(4):
                ptx.append(f"compute_{num}")
            continue
        raise VerifyError(
            f"unknown arch {raw!r} in {text!r} "
            "(expected gfx IDs like gfx90a or gfx942:sramecc+:xnack-, sm_90, 9.0 or 9.0+PTX)"
        )
    return Requested(tuple(dict.fromkeys(code)), tuple(dict.fromkeys(ptx)))


# --- ELF -------------------------------------------------------------------------------------------------


def elf_sections(data: bytes) -> dict[str, bytes]:
    """Section name -> contents of a 64-bit little-endian ELF file (all GPU libraries we build are)."""
    if data[:4] != b"\x7fELF":
        return {}
    if data[4] != 2 or data[5] != 1:
        raise VerifyError("only 64-bit little-endian ELF files are supported")
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    if shoff == 0 or shnum == 0:
        return {}
    headers = []
    for i in range(shnum):
        base = shoff + i * shentsize
        name, stype, _flags, _addr, offset, size = struct.unpack_from("<IIQQQQ", data, base)
        headers.append((name, stype, offset, size))
    _, _, str_off, str_size = headers[shstrndx]
    strtab = data[str_off : str_off + str_size]
    sections = {}
    for name_off, stype, offset, size in headers:
        name = strtab[name_off : strtab.index(b"\0", name_off)].decode("ascii", "replace")
        sections[name] = b"" if stype == 8 else data[offset : offset + size]  # SHT_NOBITS holds nothing
    return sections


# --- HIP: clang offload bundles ----------------------------------------------------------------------------


def _decompress_ccob(data: bytes, pos: int) -> tuple[bytes, int]:
    """Decode one compressed bundle at pos; returns (plain bundle, bytes consumed)."""
    version, method = struct.unpack_from("<HH", data, pos + 4)
    if version == 1:
        hdr, total = 20, None
    elif version == 2:
        hdr, total = 24, struct.unpack_from("<I", data, pos + 8)[0]
    elif version == 3:
        hdr, total = 32, struct.unpack_from("<Q", data, pos + 8)[0]
    else:
        raise VerifyError(f"compressed offload bundle version {version} is not supported")
    end = pos + total if total else len(data)
    payload = data[pos + hdr : end]
    if method == 0:
        return zlib.decompress(payload), end - pos
    if method == 1:
        try:
            from compression import zstd  # type: ignore[import-not-found]  # Python 3.14+

            return zstd.decompress(payload), end - pos
        except ImportError:
            pass
        try:
            import zstandard  # type: ignore[import-not-found]

            return zstandard.ZstdDecompressor().decompressobj().decompress(payload), end - pos
        except ImportError:
            pass
        if zstd_cli := shutil.which("zstd"):
            done = subprocess.run([zstd_cli, "-dc"], input=payload, capture_output=True, check=False)
            if done.returncode == 0:
                return done.stdout, end - pos
            raise VerifyError(f"zstd could not decode a compressed offload bundle: {done.stderr.decode()[:200]}")
        raise VerifyError(
            "zstd-compressed offload bundle: install the zstd command or the 'zstandard' package to read it"
        )
    raise VerifyError(f"compressed offload bundle with unknown method {method}")


def _parse_bundle(data: bytes, pos: int) -> tuple[list[str], int]:
    """Entry IDs of the plain bundle at pos, and where it ends."""
    (count,) = struct.unpack_from("<Q", data, pos + len(BUNDLE_MAGIC))
    cur = pos + len(BUNDLE_MAGIC) + 8
    ids, end = [], cur
    for _ in range(count):
        offset, size, id_len = struct.unpack_from("<QQQ", data, cur)
        cur += 24
        ids.append(data[cur : cur + id_len].decode("ascii", "replace"))
        cur += id_len
        end = max(end, pos + offset + size)
    return ids, max(end, cur)


def hip_bundle_ids(data: bytes) -> list[str]:
    """All entry IDs of the bundles laid one after another in a `.hip_fatbin` section (one per TU)."""
    ids: list[str] = []
    pos = 0
    while True:
        nxt = [p for p in (data.find(BUNDLE_MAGIC, pos), data.find(CCOB_MAGIC, pos)) if p >= 0]
        if not nxt:
            return ids
        pos = min(nxt)
        if data.startswith(CCOB_MAGIC, pos):
            plain, used = _decompress_ccob(data, pos)
            ids.extend(hip_bundle_ids(plain))
            pos += used
        else:
            found, pos = _parse_bundle(data, pos)
            ids.extend(found)


def hip_target(entry_id: str) -> str | None:
    """`hipv4-amdgcn-amd-amdhsa--gfx90a:xnack+` -> `gfx90a:xnack+`; host entries -> None."""
    kind, _, target = entry_id.partition("--")
    if not kind.startswith(("hip", "hipv4")) or "amdgcn" not in kind:
        return None
    return target or None


# --- CUDA: fat binaries ------------------------------------------------------------------------------------


FATBIN_FLAG_ARCH_SPECIFIC = 0x100000  # entry built for an 'a' target (sm_90a): its code runs on that chip only


def cuda_fatbin_entries(data: bytes) -> list[tuple[int, str]]:
    """(kind, arch such as '90' or '90a') for every entry of the fat binaries laid out in `.nv_fatbin`."""
    entries: list[tuple[int, str]] = []
    magic = struct.pack("<I", FATBIN_MAGIC)
    pos = 0
    while True:
        pos = data.find(magic, pos)
        if pos < 0:
            return entries
        _, _version, header_size, fat_size = struct.unpack_from("<IHHQ", data, pos)
        cur, end = pos + header_size, pos + header_size + fat_size
        while cur + 32 <= end:
            kind, _v, entry_header, payload = struct.unpack_from("<HHIQ", data, cur)
            (arch,) = struct.unpack_from("<I", data, cur + 28)
            (flags,) = struct.unpack_from("<Q", data, cur + 40)
            if entry_header == 0:
                break
            entries.append((kind, f"{arch}{'a' if flags & FATBIN_FLAG_ARCH_SPECIFIC else ''}"))
            cur += entry_header + payload
        pos = end


# --- listing and comparison ------------------------------------------------------------------------------


def list_code_objects(path: str | Path) -> Listing:
    """Read a library (ELF shared object, or a bare bundle / fat binary) and list its device code."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise VerifyError(f"cannot read {p}: {exc.strerror or exc}") from exc
    listing = Listing(library=str(p))
    sections = elf_sections(data)
    if not sections:
        if data.startswith((BUNDLE_MAGIC, CCOB_MAGIC)):
            sections = {".hip_fatbin": data}
        elif data[:4] == struct.pack("<I", FATBIN_MAGIC):
            sections = {".nv_fatbin": data}
        elif data[:4] != b"\x7fELF":
            raise VerifyError(f"{p} is not an ELF file, offload bundle or CUDA fat binary")
    hip = sections.get(".hip_fatbin", b"")
    for entry in hip_bundle_ids(hip) if hip else []:
        listing.entries.append(entry)
        if (target := hip_target(entry)) is not None:
            listing.code_objects.append(target)
    nv = sections.get(".nv_fatbin", b"")
    for kind, arch in cuda_fatbin_entries(nv) if nv else []:
        if kind == FATBIN_KIND_ELF:
            listing.code_objects.append(f"sm_{arch}")
        elif kind == FATBIN_KIND_PTX:
            listing.ptx.append(f"compute_{arch}")
        listing.entries.append(f"{'elf' if kind == FATBIN_KIND_ELF else 'ptx'} sm_{arch}")
    listing.code_objects = sorted(set(listing.code_objects))
    listing.ptx = sorted(set(listing.ptx))
    return listing


@dataclass(frozen=True)
class Comparison:
    """Processors missing from / not asked for in the library; empty both means it matches."""

    missing: list[str]
    unexpected: list[str]

    @property
    def ok(self) -> bool:
        return not self.missing and not self.unexpected


def compare(listing: Listing, requested: Requested) -> Comparison:
    """Exact comparison on processor names (features ignored), ELF code objects and PTX alike."""
    have = {processor(c) for c in [*listing.code_objects, *listing.ptx]}
    want = {processor(c) for c in [*requested.code_objects, *requested.ptx]}
    return Comparison(sorted(want - have), sorted(have - want))


def report(listing: Listing, requested: Requested) -> dict[str, object]:
    """The kernels.json document of the contract (docs/contracts.md), plus the PTX entries."""
    return {
        "library": listing.library,
        "requested": list(requested.code_objects),
        "code_objects": listing.code_objects,
        "ptx": listing.ptx,
    }


def write_json_atomic(path: str | Path, doc: dict[str, object]) -> None:
    """Write next to the target and rename, so a reader never sees half a file."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(doc, fh, indent=2)
            fh.write("\n")
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def describe(listing: Listing, requested: Requested, result: Comparison) -> list[str]:
    """Human-readable lines: what the library holds, and the verdict."""
    lines = [f"{listing.library}:"]
    lines += [f"  code object  {c}" for c in listing.code_objects] or ["  (no device code objects)"]
    lines += [f"  ptx          {p}" for p in listing.ptx]
    asked = " ".join(list(requested.code_objects) + list(requested.ptx))
    lines.append(f"requested: {asked}")
    if result.ok:
        lines.append("ok: code objects match the requested arches")
    return lines


def mismatch_message(result: Comparison) -> str:
    parts = []
    if result.missing:
        parts.append(f"missing {', '.join(result.missing)}")
    if result.unexpected:
        parts.append(f"not requested {', '.join(result.unexpected)}")
    return "code objects differ from the requested arches: " + "; ".join(parts)


def main(argv: list[str] | None = None) -> int:
    """Standalone entry point: 0 match, 1 difference, 2 bad input."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file")
    parser.add_argument("--arch", required=True, help="requested arches, e.g. 'gfx90a;gfx942' or '8.0;9.0'")
    parser.add_argument("--json-out", help="write the kernels.json document here")
    args = parser.parse_args(argv)
    try:
        requested = parse_arch_list(args.arch)
        listing = list_code_objects(args.file)
    except VerifyError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    result = compare(listing, requested)
    print("\n".join(describe(listing, requested, result)))
    if not result.ok:
        print(f"error: {mismatch_message(result)}", file=sys.stderr)
        return 1
    if args.json_out:
        write_json_atomic(args.json_out, report(listing, requested))
    return 0


if __name__ == "__main__":
    sys.exit(main())
