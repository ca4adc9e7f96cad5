"""Read the GPU code objects a built library holds: HIP offload bundles and CUDA fat binaries in ELF sections.

Stdlib only, part of the contract, because the kernel builder stage inside an image runs it (through
imagecontract.verify) and never imports the imagebuild package. It reads the ELF sections itself:
`.hip_fatbin` (clang offload bundles, plain or `CCOB`-compressed) and `.nv_fatbin` (CUDA fat binaries), every
length bounded and checked before use.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import threading
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from imagecontract import cuda_fatbin
from imagecontract.amdgpu_elf import amdgpu_target
from imagecontract.blob import (
    CHUNK,
    HEADER_GUESS,
    MAX_BUNDLES,
    MAX_ENTRIES,
    MAX_ID_LEN,
    MAX_INFLATED,
    MAX_READ,
    MAX_UNCOMPRESSED,
    MAX_WALKED,
    BeyondDecompressed,
    open_regular,
)
from imagecontract.blob import Blob as Blob
from imagecontract.blob import UnreadableFile as UnreadableFile
from imagecontract.blob import VerifyError as VerifyError

BUNDLE_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"
CCOB_MAGIC = b"CCOB"
FATBIN_MAGIC = cuda_fatbin.FATBIN_MAGIC
FATBIN_KIND_PTX = cuda_fatbin.KIND_PTX
FATBIN_KIND_ELF = cuda_fatbin.KIND_ELF


@dataclass
class Listing:
    """What one library holds: code object IDs (features kept), PTX entries, and where each came from."""

    library: str
    code_objects: list[str] = field(default_factory=list)
    ptx: list[str] = field(default_factory=list)
    entries: list[str] = field(default_factory=list)


# --- ELF -------------------------------------------------------------------------------------------------

ELF_HEADER = 64
ELF_SECTION_HEADER = 64
SHT_NOBITS = 8


def elf_section_blobs(blob: Blob) -> dict[str, Blob]:
    """Section name -> contents of a 64-bit little-endian ELF file (all GPU libraries we build are)."""
    if blob.size < 4 or blob.read(0, 4, "magic") != b"\x7fELF":
        return {}
    ident = blob.read(0, min(ELF_HEADER, blob.size), "ELF header")
    if len(ident) < ELF_HEADER:
        raise VerifyError(f"truncated ELF header ({blob.size} bytes)")
    if ident[4] != 2 or ident[5] != 1:
        raise VerifyError("only 64-bit little-endian ELF files are supported")
    (shoff,) = struct.unpack_from("<Q", ident, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", ident, 0x3A)
    if shoff == 0 or shnum == 0:
        return {}
    if shentsize < ELF_SECTION_HEADER:
        raise VerifyError(f"ELF section header size {shentsize} is smaller than {ELF_SECTION_HEADER}")
    if shstrndx >= shnum:
        raise VerifyError(f"ELF section name table index {shstrndx} is not below the section count {shnum}")
    blob.check(shoff, shnum * shentsize, "ELF section header table")
    headers = []
    for i in range(shnum):
        name_off, stype, _flags, _addr, offset, size = blob.unpack("<IIQQQQ", shoff + i * shentsize, "section header")
        if stype != SHT_NOBITS:
            blob.check(offset, size, f"ELF section {i}")
        headers.append((name_off, stype, offset, size))
    _, str_type, str_off, str_size = headers[shstrndx]
    strtab = b"" if str_type == SHT_NOBITS else blob.read(str_off, min(str_size, MAX_READ), "section name table")
    sections: dict[str, Blob] = {}
    for name_off, stype, offset, size in headers:
        end = strtab.find(b"\0", name_off) if name_off < len(strtab) else -1
        name = strtab[name_off:end].decode("ascii", "replace") if end >= 0 else ""
        sections[name] = blob.sub(0, 0, name) if stype == SHT_NOBITS else blob.sub(offset, size, name)
    return sections


def elf_sections(data: bytes) -> dict[str, bytes]:
    """Section name -> contents, for ELF bytes already in memory (tests, small files)."""
    return {name: sec.read(0, sec.size, name) for name, sec in elf_section_blobs(Blob(data, len(data))).items()}


# --- HIP: clang offload bundles ----------------------------------------------------------------------------
# Layout (little-endian): the 24-byte magic, an 8-byte entry count, then per entry 8-byte offset, 8-byte size,
# 8-byte ID length and the ID; offsets count from the bundle's start. As documented in llvm/llvm-project
# clang/lib/Driver/OffloadBundler.cpp (commit fba748bfcae4a5c851141abc1baa8b22579cb731, "Handler for binary
# files"). Compressed bundles ("CCOB"): 2-byte version, 2-byte method (0 zlib, 1 zstd), then v1: 4-byte
# uncompressed size and 8-byte hash (20-byte header); v2: 4-byte total size, 4-byte uncompressed size, hash
# (24); v3: 8-byte total size, 8-byte uncompressed size, hash (32).

_CCOB_LAYOUT = {1: (20, None, "<I"), 2: (24, "<I", "<I"), 3: (32, "<Q", "<Q")}  # header, total, uncompressed


def _inflate_prefix(blob: Blob, start: int, end: int, method: int, want: int) -> bytes:
    """At most `want` bytes of the stream in blob[start:end], read and decompressed chunk by chunk."""
    if method == 0:
        inflater = zlib.decompressobj()
        out = bytearray()
        try:
            for chunk in blob.chunks(start, end):
                data = chunk
                while data and len(out) < want and not inflater.eof:
                    out += inflater.decompress(data, want - len(out))
                    data = inflater.unconsumed_tail
                if len(out) >= want or inflater.eof:
                    break
        except zlib.error as exc:
            raise VerifyError(f"compressed offload bundle: zlib data is corrupt ({exc})") from None
        return bytes(out[:want])
    if method == 1:
        return _unzstd_prefix(blob, start, end, want)
    raise VerifyError(f"compressed offload bundle with unknown method {method}")


def _unzstd_prefix(blob: Blob, start: int, end: int, want: int) -> bytes:
    try:
        from compression import zstd  # type: ignore[import-not-found]  # Python 3.14+

        decoder = zstd.ZstdDecompressor()
        out = bytearray()
        try:
            for chunk in blob.chunks(start, end):
                data = chunk
                while len(out) < want and not decoder.eof:
                    out += decoder.decompress(data, max_length=want - len(out))
                    data = b""
                    if decoder.needs_input:
                        break
                if len(out) >= want or decoder.eof:
                    break
        except zstd.ZstdError as exc:
            raise VerifyError(f"compressed offload bundle: zstd data is corrupt ({exc})") from None
        return bytes(out[:want])
    except ImportError:
        pass
    zstd_cli = shutil.which("zstd")
    if not zstd_cli:
        raise VerifyError("zstd-compressed offload bundle: install the zstd command (or use Python 3.14+) to read it")
    proc = subprocess.Popen([zstd_cli, "-dcq"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    stdin = proc.stdin

    def feed() -> None:
        # The main thread only reads zstd's output until this thread is joined, so the file is not shared.
        try:
            for chunk in blob.chunks(start, end):
                stdin.write(chunk)
            stdin.close()
        except (OSError, VerifyError):  # zstd stopped reading: we have what we asked for, or it failed
            pass

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    out = bytearray()
    while len(out) < want:
        data = proc.stdout.read(min(CHUNK, want - len(out)))
        if not data:
            break
        out += data
    proc.kill()
    writer.join()
    proc.wait()
    err = proc.stderr.read(200).decode(errors="replace").strip()
    for stream in (proc.stdout, proc.stderr):
        stream.close()
    if not out:
        raise VerifyError(f"zstd could not decode a compressed offload bundle: {err or 'no output'}")
    return bytes(out)


def _ccob_bundle(blob: Blob, pos: int, want: int = MAX_READ) -> tuple[Blob, int]:
    """The plain bundle inside the compressed one at pos (its first `want` bytes decompressed), and its
    length."""
    version, method = blob.unpack("<HH", pos + 4, "compressed bundle header")
    if version not in _CCOB_LAYOUT:
        raise VerifyError(f"compressed offload bundle version {version} is not supported")
    header, total_fmt, plain_fmt = _CCOB_LAYOUT[version]
    blob.check(pos, header, "compressed bundle header")
    if total_fmt is None:
        total = blob.size - pos  # v1 records no total size: the bundle runs to the end of its section
        (plain_size,) = blob.unpack(plain_fmt, pos + 8, "compressed bundle header")
    else:
        (total,) = blob.unpack(total_fmt, pos + 8, "compressed bundle header")
        (plain_size,) = blob.unpack(plain_fmt, pos + 8 + struct.calcsize(total_fmt), "compressed bundle header")
        if total < header:
            raise VerifyError(f"compressed offload bundle at offset {pos} declares {total} bytes, less than its header")
        blob.check(pos, total, "compressed offload bundle")
    if plain_size > MAX_UNCOMPRESSED:
        raise VerifyError(
            f"compressed offload bundle at offset {pos} declares {plain_size} bytes uncompressed, "
            f"more than the {MAX_UNCOMPRESSED} allowed"
        )
    prefix = _inflate_prefix(blob, pos + header, pos + total, method, min(plain_size, want))
    if not prefix.startswith(BUNDLE_MAGIC):
        raise VerifyError(f"compressed offload bundle at offset {pos} does not hold an offload bundle")
    return Blob(prefix, plain_size, available=len(prefix)), total


def _parse_bundle(blob: Blob, pos: int) -> tuple[list[str], int]:
    """Entry IDs of the plain bundle at pos, and where it ends (never before the end of its header)."""
    (count,) = blob.unpack("<Q", pos + len(BUNDLE_MAGIC), "offload bundle entry count")
    cur = pos + len(BUNDLE_MAGIC) + 8
    if count > min(MAX_ENTRIES, (blob.size - cur) // 24):
        raise VerifyError(f"offload bundle at offset {pos} claims {count} entries, more than its bytes can hold")
    ids, end = [], cur
    for _ in range(count):
        offset, size, id_len = blob.unpack("<QQQ", cur, "offload bundle entry")
        cur += 24
        if id_len > MAX_ID_LEN:
            raise VerifyError(f"offload bundle entry ID at offset {cur} claims {id_len} bytes")
        ids.append(blob.read(cur, id_len, "offload bundle entry ID").decode("ascii", "replace"))
        cur += id_len
        blob.check(pos + offset, size, "offload bundle entry")
        end = max(end, pos + offset + size)
    return ids, max(end, cur)


def hip_bundle_ids(data: bytes | Blob) -> list[str]:
    """All entry IDs of the bundles laid one after another in a `.hip_fatbin` section (one per TU)."""
    blob = data if isinstance(data, Blob) else Blob(data, len(data))
    ids: dict[str, None] = {}  # distinct IDs, in order: a library repeats each per source file
    walked = compressed = inflated = 0
    pos = 0
    while pos < blob.size:
        pos = blob.find((BUNDLE_MAGIC, CCOB_MAGIC), pos)
        if pos < 0:
            break
        if blob.read(pos, len(CCOB_MAGIC), "magic") == CCOB_MAGIC:
            # Decompression is the one cost not bounded by the file's size: at most HEADER_GUESS bytes per
            # bundle first (a real header is a few hundred), MAX_BUNDLES bundles and MAX_INFLATED bytes in all.
            compressed += 1
            plain, used = _ccob_bundle(blob, pos, HEADER_GUESS)
            try:
                entries = _parse_bundle(plain, 0)[0]
            except BeyondDecompressed:
                plain, used = _ccob_bundle(blob, pos, MAX_READ)
                entries = _parse_bundle(plain, 0)[0]
            inflated += plain.available
            if compressed > MAX_BUNDLES or inflated > MAX_INFLATED:
                raise VerifyError(
                    f"more than {MAX_BUNDLES} compressed offload bundles or {MAX_INFLATED} bytes decompressed"
                )
            pos += used
        else:
            entries, pos = _parse_bundle(blob, pos)
        ids.update(dict.fromkeys(entries))
        walked += len(entries)
        if walked > MAX_WALKED or len(ids) > MAX_ENTRIES:
            raise VerifyError(f"more than {MAX_WALKED} offload bundle entries ({MAX_ENTRIES} distinct)")
    return list(ids)


_HIP_ENTRY = re.compile(r"^hip(?:v4)?-amdgcn-amd-amdhsa-{1,2}(gfx\w+(?::\w+[+-])*)$")


def hip_target(entry_id: str) -> str | None:
    """`hipv4-amdgcn-amd-amdhsa--gfx90a:xnack+` (and ROCm 3's `hip-amdgcn-amd-amdhsa-gfx906`, a three-part
    triple) -> the target ID; host entries -> None."""
    match = _HIP_ENTRY.match(entry_id)
    return match.group(1) if match else None


# --- CUDA: fat binaries ------------------------------------------------------------------------------------


# One parser: imagecontract/cuda_fatbin.py (container and entry layout, `a`/`f` variants, bounds).
FATBIN_FLAG_ARCH_SPECIFIC = cuda_fatbin.FLAG_ARCH_SPECIFIC
FATBIN_FLAG_FAMILY = cuda_fatbin.FLAG_FAMILY


def cuda_fatbin_entries(data: bytes | Blob) -> list[tuple[int, str]]:
    """(kind, arch such as '90', '90a' or '100f') for every entry of the fat binaries laid out in `.nv_fatbin`."""
    blob = data if isinstance(data, Blob) else Blob(data, len(data))
    kinds = {"ptx": FATBIN_KIND_PTX, "cubin": FATBIN_KIND_ELF, "lto": cuda_fatbin.KIND_LTO}
    out = []
    for e in cuda_fatbin.container_entries(blob):
        kind = kinds.get(e.kind) or int(e.kind.removeprefix("kind-"))
        out.append((kind, f"{e.major}{e.minor}{e.variant}"))
    return out


# --- listing ------------------------------------------------------------------------------


def list_code_objects(path: str | Path, *, follow: bool = True) -> Listing:
    """Read a library (ELF shared object, or a bare bundle / fat binary) and list its device code. The file is
    opened through blob.open_regular (no blocking open of a FIFO, only regular files; `follow=False` refuses a
    symlink, for files found in an image)."""
    p = Path(path)
    with open_regular(p, follow=follow) as fh:
        try:
            return list_blob(p, Blob(fh, os.fstat(fh.fileno()).st_size))
        except OSError as exc:
            raise VerifyError(f"cannot read {p}: {exc.strerror or exc}") from exc


def list_blob(p: Path, blob: Blob) -> Listing:
    """The listing of one file's bytes (an open file or bytes in memory), named p in messages."""
    listing = Listing(library=str(p))
    head = blob.read(0, min(64, blob.size), "magic")
    if (target := amdgpu_target(head)) is not None:  # a bare code object (.hsaco, rocBLAS/hipBLASLt .co)
        listing.code_objects.append(target)
        listing.entries.append(f"amdgpu-elf {target}")
        return listing
    sections = elf_section_blobs(blob)
    if not sections:
        if head.startswith((BUNDLE_MAGIC, CCOB_MAGIC)):
            sections = {".hip_fatbin": blob}
        elif head[:4] == struct.pack("<I", FATBIN_MAGIC):
            sections = {".nv_fatbin": blob}
        elif head[:4] != b"\x7fELF":
            raise VerifyError(f"{p} is not an ELF file, offload bundle or CUDA fat binary")
    hip = sections.get(".hip_fatbin")
    for entry in hip_bundle_ids(hip) if hip else []:
        listing.entries.append(entry)
        if (target := hip_target(entry)) is not None:
            listing.code_objects.append(target)
    nv = sections.get(cuda_fatbin.LOADED)  # `__nv_relfatbin` (relocatable, never loaded): cuda_fatbin.carried
    for fat in cuda_fatbin.container_entries(nv) if nv else []:
        if fat.kind == "cubin":
            listing.code_objects.append(fat.name)
        elif fat.kind == "ptx":
            listing.ptx.append(fat.name)
        listing.entries.append(f"{'elf' if fat.kind == 'cubin' else fat.kind} sm_{fat.name.split('_', 1)[1]}")
    listing.code_objects = sorted(set(listing.code_objects))
    listing.ptx = sorted(set(listing.ptx))
    return listing
