"""Small pieces every command shares: loading the matrix named by --matrix, warnings, JSON output."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from imagebuild.errors import ConfigError
from imagebuild.matrix import Matrix, load_matrix
from imagecontract.atomic import check_output

if TYPE_CHECKING:
    from imagebuild.plan.target_plan import TargetPlan

F = TypeVar("F", bound=Callable[..., Any])


def matrix_from(ctx: click.Context) -> Matrix:
    """The matrix named by the top-level --matrix option, loaded once per invocation."""
    root = ctx.find_root()
    cached: Matrix | None = root.obj.get("matrix")
    if cached is None:
        cached = root.obj["matrix"] = load_matrix(root.obj["matrix_path"])
    return cached


def warn(message: str) -> None:
    click.echo(f"warning: {message}", err=True)


def echo_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True))


def echo_plans(plans: Iterable[TargetPlan]) -> None:
    """`--dry-run`: every command prints its target plans the same way, then what it would do with them."""
    for plan in plans:
        for line in plan.describe():
            click.echo(line)


def write_all(files: Mapping[Path, str]) -> set[Path]:
    """Write every file or none: each is staged as a temp file beside its destination (fsynced, mode 0644), and
    only when all are staged are they renamed into place. A read-only or full folder, a file where a folder goes
    or a folder where a file goes fails before any destination changes. Returns the files whose content changed."""
    changed = {path: text for path, text in files.items() if _differs(path, text)}
    staged: list[tuple[str, Path]] = []
    made: list[Path] = []
    try:
        for path, text in changed.items():
            try:
                check_output(path)  # the one writer rule: a device, FIFO or folder there is refused
                _no_file_above(path)
                for parent in reversed([path.parent, *path.parent.parents]):
                    if not parent.exists():
                        parent.mkdir()
                        made.append(parent)
                fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
                staged.append((tmp, path))
                with os.fdopen(fd, "wb") as handle:
                    handle.write(text.encode("utf-8"))
                    handle.flush()
                    os.fsync(handle.fileno())
                    os.fchmod(handle.fileno(), 0o644)
            except OSError as exc:  # name the file asked for, not a temp file
                raise OSError(exc.errno, exc.strerror, str(path)) from exc
        for tmp, path in staged:
            os.replace(tmp, path)
        staged.clear()
        made.clear()
    finally:
        for tmp, _ in staged:
            Path(tmp).unlink(missing_ok=True)
        for folder in reversed(made):
            with contextlib.suppress(OSError):
                folder.rmdir()
    return set(changed)


def _differs(path: Path, text: str) -> bool:
    if path.is_dir():
        raise OSError(errno.EISDIR, "is a directory, not a file", str(path))
    check_output(path)  # a FIFO or device there is refused before it is read (a read would wait on a FIFO)
    try:
        return path.read_bytes() != text.encode("utf-8")
    except (FileNotFoundError, NotADirectoryError):  # a file above it is reported when the write is staged
        return True


_PLATFORM = re.compile(r"[a-z0-9]+/[a-z0-9]+(?:/[a-z0-9]+)?", re.ASCII)


def platform_option(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> tuple[str, ...]:
    """click callback for a repeatable `--platform`: an empty value (an unset CI variable; it used to mean
    linux/amd64 alone), a value that is not OS/ARCH[/VARIANT], or one given twice is a usage error (exit 2),
    refused at parse time before any work. Which platforms a target has is the plan's to check."""
    seen: set[str] = set()
    for item in value:
        if not item.strip():
            raise ConfigError("--platform is empty (an unset variable?): give OS/ARCH such as linux/arm64")
        if not _PLATFORM.fullmatch(item):
            raise ConfigError(f"--platform {item[:60]!r} is not OS/ARCH[/VARIANT] such as linux/arm64")
        if item in seen:
            raise ConfigError(f"--platform {item} given twice")
        seen.add(item)
    return value


def platforms_option(help: str) -> Callable[[F], F]:
    """The repeatable `--platform` option every command that acts per OCI platform takes (checked by
    platform_option), as `platforms`."""
    return click.option("--platform", "platforms", multiple=True, callback=platform_option, help=help)


MAX_ERROR = 300  # characters of an error line: a hostile input is quoted, never copied whole


def one_line(exc: BaseException) -> str | None:
    """The error line for a failure a command did not catch itself: a file that cannot be written or read (a
    read-only or full folder, a file where a folder goes), bytes that are not UTF-8, JSON that does not parse.
    None for anything else (a bug: the traceback shows)."""
    if isinstance(exc, UnicodeDecodeError):
        message = f"not UTF-8 text (byte {exc.start}: {exc.reason})"
    elif isinstance(exc, json.JSONDecodeError):
        message = f"not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
    elif isinstance(exc, OSError):
        where = f"{exc.filename}: " if exc.filename else ""
        message = f"{where}{exc.strerror or exc}"
    else:
        return None
    message = " ".join(message.split())
    return message if len(message) <= MAX_ERROR else message[: MAX_ERROR - 3] + "..."


def check_writable(path: Path) -> None:
    """Refuse, before any work with effects (a push), an output file that could not be written afterwards: its
    folder is created and a temp file is made and removed there; a folder at `path` is refused."""
    try:
        if path.is_dir():
            raise OSError(errno.EISDIR, "is a directory, not a file", str(path))
        check_output(path)
        _no_file_above(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".probe", dir=path.parent)
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {one_line(OSError(exc.errno, exc.strerror))}") from None


def _no_file_above(path: Path) -> None:
    """A file where a folder of `path` should be is said as such (mkdir would say "File exists")."""
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise OSError(errno.ENOTDIR, f"{parent} is a file, not a folder", str(path))
            return
