"""The one atomic file writer of the host and the image.

A reader (a build context copy, a smoke run, torch reading a results file) must never see half a file, and a
file that is copied into an image must be readable there by any user: mkstemp's 0600 is replaced by `mode`.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomic(path: str | os.PathLike[str], data: str | bytes, mode: int = 0o644) -> Path:
    """Write data (text as UTF-8) to a temp file in path's folder, fsync, set mode, rename over path.

    Creates missing parent folders. Raises OSError (the caller turns it into its one-line error); the temp file
    never stays behind.
    """
    target = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
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
        os.replace(tmp, target)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise OSError(exc.errno, exc.strerror, str(target)) from exc
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
