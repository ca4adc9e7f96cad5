"""Bounded reading of an untrusted file: every length a header claims is checked against what remains before it
is read, and each read is capped, so a crafted library cannot make the code-object readers read or allocate
without limit. Stdlib only (part of the contract: the kernels stage and the coverage scanner run it).

Also the one way any part of imagebuild opens a file it did not write (`open_regular`, `read_bounded`): opened
without blocking (a FIFO would hang an open for reading), refused unless it is a regular file (`/dev/zero`, a
FIFO, a folder), optionally without following a final symlink, and read up to a stated limit.
"""

from __future__ import annotations

import errno
import os
import stat
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO


class VerifyError(Exception):
    """Bad input (unreadable file, unknown arch spelling): exit code 2, as a usage error."""


class BeyondDecompressed(VerifyError):
    """A read past the decompressed prefix of a compressed bundle (the reader may decompress more and retry)."""


class UnreadableFile(VerifyError, OSError):
    """A file that is not regular, cannot be opened, or is larger than the reader's bound. Both a VerifyError
    (the in-image readers) and an OSError (the host's command layer prints it as one `error:` line, exit 2)."""

    def __init__(self, path: str | os.PathLike[str], reason: str, code: int = errno.EINVAL) -> None:
        OSError.__init__(self, code, reason, str(path))

    def __str__(self) -> str:
        return f"cannot read {self.filename}: {self.strerror}"


class MissingFile(UnreadableFile, FileNotFoundError):
    """A file that is not there: also a FileNotFoundError, so `except FileNotFoundError` still says "absent"."""


# Every length read from a file is checked against what remains before it is used; these caps bound what one
# crafted header can make us read or allocate (real libraries are far below each).
MAX_READ = 1 << 20  # one header table, string table or decompressed bundle header
MAX_ENTRIES = 1 << 16  # entries of one bundle or fat binary
MAX_WALKED = 1 << 22  # entries walked in one library (torch's: one bundle or fat binary per source file)
MAX_ID_LEN = 1024  # one bundle entry ID
MAX_UNCOMPRESSED = 1 << 30  # the uncompressed size a compressed bundle may declare
MAX_BUNDLES = 1 << 16  # compressed bundles decompressed in one section (torch's libraries: one per source file)
MAX_INFLATED = 1 << 28  # bytes decompressed in one section, all bundle headers together
HEADER_GUESS = 1 << 12  # decompressed first; a bundle header longer than this is decompressed again to MAX_READ
CHUNK = 1 << 19  # a search reads CHUNK plus the magic's length: within MAX_READ


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"), (stat.S_ISFIFO, "a FIFO")):
        if test(mode):
            return name
    return "a block device" if stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) else "not a regular file"


def open_regular(path: str | os.PathLike[str], *, follow: bool = True) -> BinaryIO:
    """Open for reading without blocking, refusing what is not a regular file; `follow=False` also refuses a
    symlink (O_NOFOLLOW: for files planted in an image, never for a path a user named). UnreadableFile else."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow:
            raise UnreadableFile(path, "is a symlink (not followed)", errno.ELOOP) from None
        kind = MissingFile if exc.errno == errno.ENOENT else UnreadableFile
        raise kind(path, exc.strerror or str(exc), exc.errno or errno.EIO) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise UnreadableFile(path, f"is {_kind(mode)}, not a regular file")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def read_bounded(path: str | os.PathLike[str], limit: int, *, follow: bool = True, what: str = "file") -> bytes:
    """The whole of a regular file of at most `limit` bytes (open_regular's rules); larger is UnreadableFile.
    Reads at most limit + 1 bytes whatever the file claims, so a file that grows while read is still bounded."""
    with open_regular(path, follow=follow) as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise UnreadableFile(path, f"{what} is larger than the {_size(limit)} allowed", errno.EFBIG)
    return data


def read_text_bounded(path: str | os.PathLike[str], limit: int, *, follow: bool = True, what: str = "file") -> str:
    """read_bounded, decoded as UTF-8 (a UnicodeDecodeError is the caller's to report)."""
    return read_bounded(path, limit, follow=follow, what=what).decode("utf-8")


def _size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} bytes"


class Blob:
    """Bounded random access to a byte range of an open regular file or of bytes in memory.

    `size` is the logical size that offsets are checked against; `available` is how much can really be read
    (less than size only for the decompressed prefix of a compressed bundle). The last search window is kept:
    a walk over many small neighbouring headers (a run of empty bundles) reads each byte of the file once, not
    once per header, and jumps over holes of a sparse file (SEEK_DATA) instead of reading their zeros.
    """

    def __init__(self, source: bytes | BinaryIO, size: int, base: int = 0, available: int | None = None) -> None:
        self.source, self.size, self.base = source, size, base
        self.available = size if available is None else min(size, available)
        self._window: tuple[int, bytes] = (0, b"")
        self.bytes_read = 0  # what this blob really read from its source (tests hold the linear bound with it)

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
            raise BeyondDecompressed(f"{what} at offset {offset} lies beyond the {self.available} bytes decompressed")
        start, window = self._window
        if start <= offset and offset + length <= start + len(window):  # inside the last search window
            return window[offset - start : offset - start + length]
        if isinstance(self.source, bytes):
            data = self.source[self.base + offset : self.base + offset + length]
        else:
            self.source.seek(self.base + offset)
            data = self.source.read(length)
            self.bytes_read += len(data)
        if len(data) != length:
            raise VerifyError(f"{what} at offset {offset}: the file ended early")
        return data

    def unpack(self, fmt: str, offset: int, what: str) -> tuple[int, ...]:
        return struct.unpack(fmt, self.read(offset, struct.calcsize(fmt), what))

    def _next_data(self, pos: int) -> int:
        """pos, or the start of the next data after a hole of a sparse file (self.available when none)."""
        if isinstance(self.source, bytes) or not hasattr(os, "SEEK_DATA"):
            return pos
        try:
            fd = self.source.fileno()
            here = os.lseek(fd, 0, os.SEEK_CUR)  # the buffered reader's idea of the position is kept true
        except (AttributeError, ValueError, OSError):  # not a real file
            return pos
        try:
            found = os.lseek(fd, self.base + pos, os.SEEK_DATA) - self.base
        except OSError as exc:  # ENXIO: only a hole up to the end of the file
            found = self.available if exc.errno == errno.ENXIO else pos
        finally:
            os.lseek(fd, here, os.SEEK_SET)
        return max(pos, min(found, self.available))

    def find(self, magics: tuple[bytes, ...], start: int) -> int:
        """The next offset of any of magics at or after start, or -1. One pass: windows of CHUNK bytes overlap
        by a magic's length, the last one is reused by the next call, and holes are skipped."""
        overlap = max(map(len, magics)) - 1
        pos = start
        while pos < self.available:
            win_start, window = self._window
            if not (win_start <= pos < win_start + len(window)):
                pos = self._next_data(pos)
                if pos >= self.available:
                    break
                length = min(CHUNK + overlap, self.available - pos)
                self._window = (0, b"")
                window = self.read(pos, length, "search")
                win_start = pos
                self._window = (win_start, window)
            best = -1
            for magic in magics:  # each search stops where an earlier magic was found: linear in the window
                hit = window.find(magic, pos - win_start, len(window) if best < 0 else best + len(magic) - 1)
                if hit >= 0:
                    best = hit
            if best >= 0:
                return win_start + best
            win_end = win_start + len(window)
            if win_end >= self.available:
                break
            pos = max(pos + 1, win_end - overlap)
            if win_start <= pos < win_end:  # the overlap: read again with what follows it
                self._window = (0, b"")
        return -1

    def chunks(self, offset: int, end: int) -> Iterator[bytes]:
        while offset < end:
            length = min(CHUNK, end - offset)
            yield self.read(offset, length, "compressed data")
            offset += length


def open_blob(path: str | os.PathLike[str]) -> tuple[BinaryIO, Blob]:
    """A regular file opened for bounded random access (open_regular's rules, symlinks followed: a library a
    user names may be one); the caller closes the file."""
    fh = open_regular(Path(path))
    return fh, Blob(fh, os.fstat(fh.fileno()).st_size)
