"""The one atomic file writer of the host and the image, and its one rule for what may be replaced.

A reader (a build context copy, a smoke run, torch reading a results file) must never see half a file, and a
file that is copied into an image must be readable there by any user: mkstemp's 0600 is replaced by `mode`.

The rule (issue 21): an output path that exists and is not a regular file (a device such as /dev/null or
/dev/full, a FIFO, a socket, a directory, or a symlink to any of these) is refused before anything is written.
A rename over it would replace the device node or FIFO for the whole machine (as root), or hang or fail
half-way. A symlink to a regular file, or a dangling one, is replaced by the new file (the link, not its target).
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
)


class NotRegularOutput(OSError):
    """An output path that exists and is not a regular file (an OSError: every CLI prints it as one `error:`
    line with exit 2)."""


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def check_output(path: str | os.PathLike[str]) -> None:
    """Refuse (NotRegularOutput) an existing `path` that is not a regular file, following symlinks; nothing is
    touched. Absent paths (and dangling links, and a file above the folder: the write reports that) pass."""
    target = Path(path)
    try:
        st = os.stat(target)
    except (FileNotFoundError, NotADirectoryError):
        return
    except OSError as exc:  # a loop of links, a name too long: the write would fail the same way
        raise OSError(exc.errno, exc.strerror, str(target)) from None
    if stat.S_ISREG(st.st_mode):
        return
    via = " (through a symlink)" if target.is_symlink() else ""
    raise NotRegularOutput(
        errno.EEXIST, f"exists and is {_kind(st.st_mode)}{via}, not a regular file: not replaced", str(target)
    )


def write_atomic(path: str | os.PathLike[str], data: str | bytes, mode: int = 0o644) -> Path:
    """Write data (text as UTF-8) to a temp file in path's folder, fsync, set mode, rename over path.

    Refuses an existing non-regular path first (`check_output`). Creates missing parent folders. Raises OSError
    (the caller turns it into its one-line error); the temp file never stays behind.
    """
    target = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    check_output(target)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as exc:  # name the file asked for, not the temp file
        raise OSError(exc.errno, exc.strerror, str(target)) from exc
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(payload)
            fh.flush()
            os.fsync(fh.fileno())
            os.fchmod(fh.fileno(), mode)
        check_output(target)  # planted while we wrote: still refused, the temp file removed
        os.replace(tmp, target)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, NotRegularOutput):
            raise
        raise OSError(exc.errno, exc.strerror, str(target)) from exc
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
