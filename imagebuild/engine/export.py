"""An image's filesystem on the host: `docker create` + `docker export`, unpacked safely under a size limit.

For images that cannot run the coverage scanner (no python3 in them): the host scans the exported tree instead.
The tar stream comes from the engine, but its names and links are the image's, untrusted: every member goes through
tarfile's `data` filter (no absolute paths, no `..`, no links leaving the tree, no device nodes or FIFOs, no setuid
bits), hard links are kept only inside the tree, and the bytes written are counted against `limit`, checked on each
member's declared size before anything of it is written. Debian 12's own Python is 3.11.2, older than that filter
(3.11.4, PEP 706): there the same rules are applied by `_data_filter` (the venv setup.sh makes uses that Python).
"""

from __future__ import annotations

import copy
import os
import subprocess
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from imagebuild.engine.docker import Engine

DEFAULT_LIMIT = 64 << 30  # bytes unpacked at most: IMAGEBUILD_EXPORT_LIMIT overrides
LIMIT_ENV = "IMAGEBUILD_EXPORT_LIMIT"
CREATE_TIMEOUT = 120
EXPORT_TIMEOUT = 3600


HAS_DATA_FILTER = hasattr(tarfile, "data_filter")  # Python 3.11.4+ (PEP 706)


class ExportError(Exception):
    """The engine could not export the image, or the tree is over the limit."""


class _Refused(Exception):
    """A member the data filter's rules refuse (the fallback's own FilterError)."""


_REFUSED: tuple[type[BaseException], ...] = (getattr(tarfile, "FilterError", _Refused), _Refused, OSError)


@dataclass
class ExportStats:
    files: int = 0
    bytes: int = 0
    skipped: list[str] = field(default_factory=list)  # members refused by the filter, by name (first 20)
    skipped_count: int = 0


def unpack(stream: IO[bytes], dest: Path, limit: int) -> ExportStats:
    """Unpack a tar stream into `dest` (which must exist); members the `data` filter refuses are skipped."""
    stats = ExportStats()
    with tarfile.open(fileobj=stream, mode="r|") as tar:
        for member in tar:
            if member.isfile() and stats.bytes + member.size > limit:
                raise ExportError(
                    f"the image's filesystem is over the export limit of {limit} bytes ({LIMIT_ENV} raises it)"
                )
            if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
                _skip(stats, member.name)
                continue
            try:
                if HAS_DATA_FILTER:
                    tar.extract(member, dest, set_attrs=False, filter="data")
                else:
                    tar.extract(_data_filter(member, dest), dest, set_attrs=False)
            except _REFUSED:
                _skip(stats, member.name)
                continue
            if member.isfile():
                stats.files += 1
                stats.bytes += member.size
    return stats


def _inside(root: str, *parts: str) -> bool:
    """Whether the path, its symlinks on disk resolved, stays under root (itself included)."""
    return os.path.commonpath([root, os.path.realpath(os.path.join(root, *parts))]) == root


def _data_filter(member: tarfile.TarInfo, dest: Path) -> tarfile.TarInfo:
    """PEP 706's `data` rules for a Python without them, on the members unpack lets through (files, directories,
    links; mode bits are never applied: set_attrs=False): a leading `/` dropped from the name, the name and a hard
    link's target resolved inside dest, a symlink's target relative and resolved inside dest."""
    root = os.path.realpath(dest)
    name = member.name.lstrip("/")
    if not name or not _inside(root, name):
        raise _Refused(member.name)
    kept = copy.copy(member)
    kept.name = name
    if member.issym():
        if os.path.isabs(member.linkname) or not _inside(root, os.path.dirname(name), member.linkname):
            raise _Refused(member.name)
    elif member.islnk():
        kept.linkname = member.linkname.lstrip("/")
        if not _inside(root, kept.linkname):
            raise _Refused(member.name)
    return kept


def _skip(stats: ExportStats, name: str) -> None:
    stats.skipped_count += 1
    if len(stats.skipped) < 20:
        stats.skipped.append(name[:200])


def export_filesystem(engine: Engine, image: str, dest: Path, limit: int | None = None) -> ExportStats:
    """The image's merged filesystem unpacked into `dest`: a stopped container is created (never started: the
    image needs no shell or entrypoint), exported as a tar stream and removed."""
    if limit is None:
        from imagebuild.envvars import env_int

        limit = env_int(LIMIT_ENV, DEFAULT_LIMIT, minimum=1)
    env = {**os.environ, **engine.env}
    try:
        created = subprocess.run(
            [engine.client, "create", "--network", "none", image, "/imagebuild-export-never-runs"],
            capture_output=True,
            text=True,
            timeout=CREATE_TIMEOUT,
            env=env,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ExportError(f"docker create {image}: {exc}") from None
    if created.returncode != 0:
        tail = (created.stderr.strip().splitlines() or [f"exit {created.returncode}"])[-1]
        raise ExportError(f"docker create {image} failed: {tail[:300]}")
    cid = created.stdout.strip()
    try:
        return _export(engine.client, cid, dest, limit, env)
    finally:
        subprocess.run(
            [engine.client, "rm", "-f", "-v", cid], capture_output=True, timeout=CREATE_TIMEOUT, env=env, check=False
        )


def _export(client: str, cid: str, dest: Path, limit: int, env: dict[str, str]) -> ExportStats:
    proc = subprocess.Popen([client, "export", cid], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert proc.stdout is not None and proc.stderr is not None
    try:
        stats = unpack(proc.stdout, dest, limit)
    except tarfile.TarError as exc:
        proc.kill()
        proc.wait()
        raise ExportError(f"docker export {cid[:12]}: not a tar stream ({exc})") from None
    except ExportError:
        proc.kill()
        proc.wait()
        raise
    try:
        err = proc.stderr.read(4096).decode("utf-8", "replace")
        code = proc.wait(timeout=EXPORT_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise ExportError(f"docker export {cid[:12]} did not finish within {EXPORT_TIMEOUT} s") from None
    if code != 0:
        raise ExportError(f"docker export {cid[:12]} failed: {(err.strip().splitlines() or [f'exit {code}'])[-1]}")
    return stats
