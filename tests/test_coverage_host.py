"""`imagebuild coverage IMAGE` on an image without python3 (issue 24): its filesystem is exported and scanned from
the host with the same stdlib scanner, unpacked safely (the tar's names are the image's: untrusted), and the
command says which way it scanned."""

from __future__ import annotations

import io
import os
import struct
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from imagebuild.engine.export import ExportError, unpack
from imagebuild.prove.host_scan import FROM_HOST, scan_root
from tests.test_kernel_verify import elf_with, fatbin

TAG = "imagebuild-h24:coverage-no-python"


def amdgpu_code_object(mach: int) -> bytes:
    ident = b"\x7fELF" + bytes([2, 1, 1, 64, 2]) + bytes(7)
    return ident + struct.pack("<HHIQQQIHHHHHH", 3, 224, 1, 0, 0, 0, mach, 64, 0, 0, 64, 0, 0) + bytes(64)


def tar_of(members: list[tuple[tarfile.TarInfo, bytes | None]]) -> io.BytesIO:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    buf.seek(0)
    return buf


def member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, link, 0o755 if kind == tarfile.DIRTYPE else 0o644
    return info


@pytest.fixture(params=["stdlib data filter", "fallback for Python < 3.11.4"])
def data_filter(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways unpack applies the `data` rules: tarfile's own filter, and the fallback Debian 12's Python 3.11.2
    (the venv's interpreter on a stock machine) takes."""
    if request.param.startswith("stdlib"):
        if not hasattr(tarfile, "data_filter"):
            pytest.skip("this Python has no tarfile data filter (3.11.4+); the fallback case runs instead")
    else:
        monkeypatch.setattr("imagebuild.engine.export.HAS_DATA_FILTER", False)
    return str(request.param)


def test_unpack_keeps_the_tree_and_refuses_what_leaves_it(tmp_path: Path, data_filter: str) -> None:
    dest = tmp_path / "root"
    dest.mkdir()
    stream = tar_of(
        [
            (member("usr", tarfile.DIRTYPE), None),
            (member("usr/lib/libok.so"), b"x" * 10),
            (member("../escape.so"), b"evil"),
            (member("/etc/abs-file"), b"abs"),  # absolute names are made relative by the data filter
            (member("usr/lib/out", tarfile.SYMTYPE, "/etc/passwd"), None),
            (member("usr/lib/up", tarfile.SYMTYPE, "../../../../../etc"), None),
            (member("usr/lib/fifo", tarfile.FIFOTYPE), None),
            (member("usr/lib/hard", tarfile.LNKTYPE, "usr/lib/libok.so"), None),
        ]
    )
    stats = unpack(stream, dest, limit=1 << 20)
    assert (dest / "usr/lib/libok.so").read_bytes() == b"x" * 10
    assert not (tmp_path / "escape.so").exists() and not (dest / "usr/lib/out").exists()
    assert not (dest / "usr/lib/up").exists() and not (dest / "usr/lib/fifo").exists()
    assert {"../escape.so", "usr/lib/out", "usr/lib/up", "usr/lib/fifo"} <= set(stats.skipped)
    assert (dest / "usr/lib/hard").read_bytes() == b"x" * 10  # a hard link inside the tree is kept
    assert (dest / "etc/abs-file").read_bytes() == b"abs" and not Path("/etc/abs-file").exists()
    assert stats.files >= 2


def test_unpack_refuses_a_path_through_a_symlink_and_a_hard_link_out_of_the_tree(
    tmp_path: Path, data_filter: str
) -> None:
    dest = tmp_path / "root"
    dest.mkdir()
    (tmp_path / "outside").mkdir()
    stream = tar_of(
        [
            (member("in", tarfile.SYMTYPE, "."), None),  # a symlink inside the tree: kept
            (member("in/../../outside/planted"), b"evil"),  # through it and out
            (member("hard-out", tarfile.LNKTYPE, "../outside"), None),
            (member("dir", tarfile.DIRTYPE), None),
            (member("dir/ok"), b"ok"),
        ]
    )
    stats = unpack(stream, dest, limit=1 << 20)
    assert not (tmp_path / "outside" / "planted").exists() and not (dest / "hard-out").exists()
    assert (dest / "dir/ok").read_bytes() == b"ok"
    assert {"in/../../outside/planted", "hard-out"} <= set(stats.skipped)


def test_unpack_stops_at_the_limit_before_writing(tmp_path: Path) -> None:
    stream = tar_of([(member("big.bin"), b"y" * 4096)])
    with pytest.raises(ExportError, match="over the export limit of 1000 bytes"):
        unpack(stream, tmp_path, limit=1000)
    assert not (tmp_path / "big.bin").exists()


def test_scan_root_reports_the_images_paths(tmp_path: Path) -> None:
    lib = tmp_path / "usr/lib/libx.so"
    lib.parent.mkdir(parents=True)
    lib.write_bytes(elf_with({".nv_fatbin": fatbin([(2, 90, False), (2, 120, False)])}))
    doc = scan_root(tmp_path)
    assert doc["root"] == "/"
    assert [lib["path"] for lib in doc["libraries"]] == ["/usr/lib/libx.so"]
    assert doc["libraries"][0]["arches"] == {"sm_120": "present", "sm_90": "present"}


@pytest.fixture
def no_python_image() -> Iterator[Any]:
    from imagebuild.engine.docker import find_engine
    from imagebuild.errors import ConfigError

    try:
        engine = find_engine()
    except ConfigError as exc:
        if os.environ.get("IMAGEBUILD_REQUIRE_ENGINE") == "1":
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    env = {**os.environ, **engine.env}
    with tempfile.TemporaryDirectory() as tmp:
        ctx = Path(tmp)
        (ctx / "libx.so").write_bytes(elf_with({".nv_fatbin": fatbin([(2, 80, False), (2, 90, False)])}))
        (ctx / "k.hsaco").write_bytes(amdgpu_code_object(0x02A))  # gfx803, as in rocBLAS 5.5's kernel folder
        kernels = "/opt/rocblas/library/Kernels.so-000-gfx803.hsaco"
        (ctx / "Dockerfile").write_text(f"FROM scratch\nCOPY libx.so /usr/lib/libx.so\nCOPY k.hsaco {kernels}\n")
        subprocess.run([*engine.build_prefix(), "-q", "-t", TAG, tmp], check=True, capture_output=True, env=env)
    yield engine
    subprocess.run([engine.client, "rmi", "-f", TAG], capture_output=True, env=env, check=False)


@pytest.mark.docker
def test_coverage_of_an_image_without_python3(cli, no_python_image: Any) -> None:
    res = cli("coverage", TAG)
    assert res.exit_code == 0, res.stderr
    assert f"coverage: scanned {FROM_HOST}" in res.stderr
    assert "/usr/lib/libx.so" in res.stdout and "/opt/rocblas/library" in res.stdout  # a kernel folder: one row
    res = cli("coverage", TAG, "--json", "--arch", "sm_90;gfx803;sm_120")
    assert res.exit_code == 0, res.stderr
    import json

    doc = json.loads(res.stdout)
    by_path = {lib["path"]: lib["arches"] for lib in doc["libraries"]}
    assert by_path["/usr/lib/libx.so"]["sm_90"] == "present" and by_path["/usr/lib/libx.so"]["sm_120"] == "absent"
    assert by_path["/opt/rocblas/library"]["gfx803"] == "present"  # read as amdgcn-mach-0x2a, absent, before
