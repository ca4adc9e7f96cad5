"""Issue 21, class 1: the one writer refuses an existing output path that is not a regular file (a device node,
a FIFO, a directory, a symlink to any of these), before anything is written, with one line and exit 2.

Every case checks that the thing at the path is unchanged afterwards (same kind, same inode) and that no temp
file was left beside it. Device nodes are made with mknod in tmp (root) or reached through a symlink to
/dev/null; the real /dev/null is never the output path itself.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from imagecontract.atomic import NotRegularOutput, check_output, write_atomic

REPO = Path(__file__).resolve().parents[1]
IS_ROOT = os.geteuid() == 0


def _device(tmp: Path) -> Path:
    node = tmp / "null-node"
    os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # the same device as /dev/null
    return node


def _fifo(tmp: Path) -> Path:
    path = tmp / "fifo"
    os.mkfifo(path)
    return path


def _folder(tmp: Path) -> Path:
    path = tmp / "folder"
    path.mkdir()
    (path / "inside").write_text("kept\n")
    return path


def _link_to(make: Callable[[Path], Path]) -> Callable[[Path], Path]:
    def made(tmp: Path) -> Path:
        link = tmp / "link"
        link.symlink_to(make(tmp))
        return link

    return made


def _dev_null_link(tmp: Path) -> Path:
    link = tmp / "to-dev-null"
    link.symlink_to("/dev/null")
    return link


KINDS: dict[str, Callable[[Path], Path]] = {
    "fifo": _fifo,
    "folder": _folder,
    "link-to-fifo": _link_to(_fifo),
    "link-to-folder": _link_to(_folder),
    "link-to-dev-null": _dev_null_link,
}
if IS_ROOT:
    KINDS |= {"device": _device, "link-to-device": _link_to(_device)}


def _state(tmp: Path) -> dict[str, tuple[int, int]]:
    """Every name under tmp with its kind and inode, links not followed, plus /dev/null's."""
    out = {str(p.relative_to(tmp)): (p.lstat().st_mode, p.lstat().st_ino) for p in sorted(tmp.rglob("*"))}
    dev_null = os.lstat("/dev/null")
    out["/dev/null"] = (dev_null.st_mode, dev_null.st_ino)
    return out


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_write_atomic_refuses_what_is_not_a_regular_file(tmp_path: Path, kind: str) -> None:
    path = KINDS[kind](tmp_path)
    before = _state(tmp_path)
    with pytest.raises(NotRegularOutput) as caught:
        write_atomic(path, "x\n")
    assert caught.value.filename == str(path)
    assert "not a regular file" in str(caught.value.strerror)
    assert "\n" not in str(caught.value)
    assert _state(tmp_path) == before  # nothing replaced, no temp file beside it


def test_regular_files_and_links_to_them_are_still_replaced(tmp_path: Path) -> None:
    plain = tmp_path / "plain.json"
    plain.write_text("old\n")
    write_atomic(plain, "new\n")
    assert plain.read_text() == "new\n"
    target = tmp_path / "target.json"
    target.write_text("old\n")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    write_atomic(link, "new\n")  # the link is replaced by a file; its target is left as it was
    assert link.read_text() == "new\n" and not link.is_symlink() and target.read_text() == "old\n"
    dangling = tmp_path / "dangling.json"
    dangling.symlink_to(tmp_path / "absent")
    write_atomic(dangling, "x\n")
    assert dangling.read_text() == "x\n" and not (tmp_path / "absent").exists()
    check_output(tmp_path / "absent" / "deeper")  # a missing folder is the write's to report


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_the_verifier_cli_refuses_its_json_out(tmp_path: Path, kind: str) -> None:
    """The in-image verifier (`kernels verify --json-out`, run by the kernels stage): exit 2, one line."""
    library = tmp_path / "lib.so"
    library.write_bytes(b"\x7fELF\x02\x01\x01" + b"\0" * 57)
    path = KINDS[kind](tmp_path)
    before = _state(tmp_path)
    proc = subprocess.run(
        [sys.executable, str(REPO / "imagecontract/verify.py"), str(library), "--arch", "", "--json-out", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "not a regular file" in lines[0], proc.stderr
    assert _state(tmp_path) == before


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("option", ["--report", "--junit"])
def test_the_smoke_suite_refuses_its_report_paths_before_any_check(tmp_path: Path, kind: str, option: str) -> None:
    path = KINDS[kind](tmp_path)
    before = _state(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "smoke", option, str(path), "--only", "environment"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: cannot write") and "not a regular file" in lines[0]
    assert "smoke: device" not in proc.stdout  # no check ran
    assert _state(tmp_path) == before
