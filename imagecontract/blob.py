"""Bounded reading of an untrusted file: every length a header claims is checked against what remains before it
is read, and each read is capped, so a crafted library cannot make the code-object readers read or allocate
without limit. Stdlib only (part of the contract: the kernels stage and the coverage scanner run it).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import BinaryIO


class VerifyError(Exception):
    """Bad input (unreadable file, unknown arch spelling): exit code 2, as a usage error."""


# Every length read from a file is checked against what remains before it is used; these caps bound what one
# crafted header can make us read or allocate (real libraries are far below each).
MAX_READ = 1 << 20  # one header table, string table or decompressed bundle header
MAX_ENTRIES = 1 << 16  # entries of one bundle or fat binary
MAX_WALKED = 1 << 22  # entries walked in one library (torch's: one bundle or fat binary per source file)
MAX_ID_LEN = 1024  # one bundle entry ID
MAX_UNCOMPRESSED = 1 << 30  # the uncompressed size a compressed bundle may declare
CHUNK = 1 << 19  # a search reads CHUNK plus the magic's length: within MAX_READ


class Blob:
    """Bounded random access to a byte range of an open regular file or of bytes in memory.

    `size` is the logical size that offsets are checked against; `available` is how much can really be read
    (less than size only for the decompressed prefix of a compressed bundle).
    """

    def __init__(self, source: bytes | BinaryIO, size: int, base: int = 0, available: int | None = None) -> None:
        self.source, self.size, self.base = source, size, base
        self.available = size if available is None else min(size, available)

    def sub(self, offset: int, size: int, what: str) -> Blob:
        self.check(offset, size, what)
        return Blob(self.source, size, self.base + offset, max(0, min(size, self.available - offset)))

    def check(self, offset: int, length: int, what: str) -> None:
        if offset < 0 or length < 0 or offset + length > self.size:
            raise VerifyError(f"{what} at offset {offset} ({length} bytes) runs past the end ({self.size} bytes)")

    def read(self, offset: int, length: int, what: str) -> bytes:
        self.check(offset, length, what)
        if length > MAX_READ:
            raise VerifyError(f"{what} at offset {offset} claims {length} bytes, more than the {MAX_READ} allowed")
        if offset + length > self.available:
            raise VerifyError(f"{what} at offset {offset} lies beyond the {self.available} bytes decompressed")
        if isinstance(self.source, bytes):
            data = self.source[self.base + offset : self.base + offset + length]
        else:
            self.source.seek(self.base + offset)
            data = self.source.read(length)
        if len(data) != length:
            raise VerifyError(f"{what} at offset {offset}: the file ended early")
        return data

    def unpack(self, fmt: str, offset: int, what: str) -> tuple[int, ...]:
        return struct.unpack(fmt, self.read(offset, struct.calcsize(fmt), what))

    def find(self, magics: tuple[bytes, ...], start: int) -> int:
        """The next offset of any of magics at or after start (read in chunks, one pass), or -1."""
        overlap = max(map(len, magics)) - 1
        pos = start
        while pos < self.available:
            length = min(CHUNK + overlap, self.available - pos)
            window = self.read(pos, length, "search")
            hits = [hit for hit in (window.find(m) for m in magics) if hit >= 0]
            if hits:
                return pos + min(hits)
            pos += max(1, length - overlap)
        return -1

    def chunks(self, offset: int, end: int) -> Iterator[bytes]:
        while offset < end:
            length = min(CHUNK, end - offset)
            yield self.read(offset, length, "compressed data")
            offset += length
