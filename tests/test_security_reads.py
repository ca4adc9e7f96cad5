"""Issue 21, class 4: files read by the tool or the in-image code are opened without blocking and without
following links where they need not be, refused unless regular, and read with a bound; the code-object reader is
linear in the file's size and skips the holes of a sparse file; the coverage scan records a file it cannot read
as unreadable and goes on.

Planted files run through the real scanner script (`python3 imagecontract/coverage.py`, as the host runs it in
an image) in a child with a wall-clock timeout and a 512 MiB address-space limit: a hang or an unbounded read
fails the test rather than stalling it.
"""

from __future__ import annotations

import json
import os
import resource
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from imagecontract import blob as bl
from imagecontract import codeobjects as co
from tests.test_kernel_verify import offload_bundle

REPO = Path(__file__).resolve().parents[1]
SCANNER = REPO / "imagecontract" / "coverage.py"
MEMORY_LIMIT = 512 << 20
HIP = ["host-x86_64-unknown-linux--", "hipv4-amdgcn-amd-amdhsa--gfx942"]
EMPTY = co.BUNDLE_MAGIC + struct.pack("<Q", 0)


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def run_scanner(root: Path, timeout: float = 60) -> tuple[dict[str, object], float]:
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-I", str(SCANNER), "--root", str(root)],
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=_limit_memory,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout), time.monotonic() - started


# --- the shared helper -------------------------------------------------------------------------------------


@pytest.mark.parametrize("follow", [True, False])
def test_read_bounded_refuses_devices_fifos_folders_and_oversize(tmp_path: Path, follow: bool) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    zero = tmp_path / "zero"
    zero.symlink_to("/dev/zero")
    big = tmp_path / "big"
    big.write_bytes(b"x" * 1001)
    cases = {fifo: "is a FIFO", tmp_path: "is a directory", big: "larger than the 1000 bytes allowed"}
    cases[zero] = "is a character device" if follow else "is a symlink (not followed)"
    for path, needle in cases.items():
        started = time.monotonic()
        with pytest.raises(bl.UnreadableFile) as caught:
            bl.read_bounded(path, 1000, follow=follow)
        assert time.monotonic() - started < 1  # a FIFO without a writer is not waited for
        assert needle in str(caught.value) and str(path) in str(caught.value), caught.value
        assert isinstance(caught.value, OSError) and isinstance(caught.value, bl.VerifyError)
    exact = tmp_path / "exact"
    exact.write_bytes(b"y" * 1000)
    assert bl.read_bounded(exact, 1000, follow=follow) == b"y" * 1000


# --- the code-object reader: linear, holes skipped ---------------------------------------------------------


def test_runs_of_empty_bundles_read_each_byte_about_once(tmp_path: Path) -> None:
    """The issue's case: a run of empty bundles used to re-read a 512 KiB window per 32-byte bundle (4 MiB: 74 s)."""
    for mib in (1, 4):
        path = tmp_path / f"empty-{mib}.co"
        path.write_bytes(EMPTY * ((mib << 20) // len(EMPTY)) + offload_bundle(HIP))
        with bl.open_regular(path) as fh:
            blob = bl.Blob(fh, path.stat().st_size)
            started = time.monotonic()
            listing = co.list_blob(path, blob)
            seconds = time.monotonic() - started
        assert listing.code_objects == ["gfx942"]
        assert blob.bytes_read <= 1.05 * path.stat().st_size + 2 * bl.CHUNK, (mib, blob.bytes_read)
        assert seconds < 10 * mib, seconds


def _elf_with_section_at(path: Path, offset: int, section: bytes, size: int) -> None:
    """An ELF64 whose one .hip_fatbin section spans [offset, offset + size): a hole (never written), then
    `section` at its end; the name table and section headers follow."""
    shstr = b"\0.hip_fatbin\0.shstrtab\0"
    end = offset + size
    str_off = end
    shoff = -(-(str_off + len(shstr)) // 8) * 8
    headers = b"\0" * 64
    headers += struct.pack("<IIQQQQIIQQ", 1, 1, 0, 0, offset, size, 0, 0, 8, 0)
    headers += struct.pack("<IIQQQQIIQQ", 13, 3, 0, 0, str_off, len(shstr), 0, 0, 1, 0)
    ident = b"\x7fELF" + bytes([2, 1, 1, 0]) + b"\0" * 8
    header = ident + struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, 0, shoff, 0, 64, 0, 0, 64, 3, 2)
    with open(path, "wb") as fh:
        fh.write(header)
        fh.seek(end - len(section))
        fh.write(section)
        fh.write(shstr)
        fh.seek(shoff)
        fh.write(headers)


def _holes_supported(tmp_path: Path) -> bool:
    probe = tmp_path / "probe"
    with open(probe, "wb") as fh:
        fh.seek(64 << 20)
        fh.write(b"x")
    with open(probe, "rb") as fh:
        try:
            found = os.lseek(fh.fileno(), 0, os.SEEK_DATA)
        except OSError:
            found = 0
    probe.unlink()
    return found > 0


def test_a_64_mib_library_of_runs_of_empty_bundles_is_read_in_linear_time(tmp_path: Path) -> None:
    """64 MiB .hip_fatbin: runs of 4,096 empty bundles between 2 MiB of filler (no magic), one real bundle."""
    run = EMPTY * 4096
    filler = b"\xa5" * (2 << 20)
    body = bytearray()
    while len(body) < (64 << 20):
        body += run + filler
    section = bytes(body) + offload_bundle(HIP)
    path = tmp_path / "lib.so"
    _elf_with_section_at(path, 4096, section, len(section))
    started = time.monotonic()
    listing = co.list_code_objects(path)
    seconds = time.monotonic() - started
    assert listing.code_objects == ["gfx942"]
    assert seconds < 30, seconds  # about 1.5 s here; quadratic would be hours


def test_a_16_gib_sparse_section_is_not_read_in_full(tmp_path: Path) -> None:
    if not _holes_supported(tmp_path):
        pytest.skip("this filesystem does not report holes (SEEK_DATA)")
    path = tmp_path / "sparse.so"
    bundle = offload_bundle(HIP)
    _elf_with_section_at(path, 4096, bundle, 16 << 30)
    assert path.stat().st_blocks * 512 < (1 << 20)  # really sparse
    with bl.open_regular(path) as fh:
        whole = bl.Blob(fh, path.stat().st_size)
        started = time.monotonic()
        section = co.elf_section_blobs(whole)[".hip_fatbin"]
        ids = co.hip_bundle_ids(section)
        seconds = time.monotonic() - started
    assert ids == HIP and section.bytes_read < (4 << 20) and seconds < 5, (section.bytes_read, seconds)
    listing = co.list_code_objects(path)
    assert listing.code_objects == ["gfx942"]


@settings(max_examples=60, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(
    runs=st.lists(st.tuples(st.integers(0, 3000), st.integers(0, 70_000)), min_size=1, max_size=6),
    tail=st.booleans(),
)
def test_generated_runs_give_the_same_answer_as_in_memory(runs: list[tuple[int, int]], tail: bool) -> None:
    """Windowed search from a file == the same bytes in memory, for generated runs of bundles and filler (the
    window reuse and the overlap at window edges cannot lose or invent a bundle)."""
    data = bytearray()
    for count, gap in runs:
        data += EMPTY * count + b"\x5a" * gap
    if tail:
        data += offload_bundle(HIP)
    import tempfile

    with tempfile.NamedTemporaryFile() as tmp:
        tmp.write(data)
        tmp.flush()
        with bl.open_regular(tmp.name) as fh:
            from_file = co.hip_bundle_ids(bl.Blob(fh, len(data)))
    assert from_file == co.hip_bundle_ids(bytes(data)) == (HIP if tail else [])


# --- the coverage scan on planted files --------------------------------------------------------------------


def _plant(root: Path) -> dict[str, Path]:
    """A real library with an owner, and every hostile file the issue names."""
    libdir = root / "usr/lib/x86_64-linux-gnu"
    libdir.mkdir(parents=True)
    (libdir / "libreal.co").write_bytes(offload_bundle(HIP))
    info = root / "var/lib/dpkg/info"
    info.mkdir(parents=True)
    (info / "libreal0.list").write_text("/usr/lib/x86_64-linux-gnu/libreal.co\n")
    (info / "zero.list").symlink_to("/dev/zero")
    os.mkfifo(info / "fifo.list")
    site = root / "usr/lib/python3/dist-packages"
    big = site / "planted-1.0.dist-info"
    big.mkdir(parents=True)
    (big / "RECORD").write_text("a" * (200 << 10) + ",,\n")  # one field over csv's 128 KiB limit
    opt = root / "opt/imagebuild"
    opt.mkdir(parents=True)
    (opt / "manifest.json").symlink_to("/dev/zero")
    (libdir / "libzero.so").symlink_to("/dev/zero")  # a symlink is never followed by the walk
    os.mkfifo(libdir / "libfifo.so")
    return {"zero.list": info / "zero.list", "fifo.list": info / "fifo.list", "RECORD": big / "RECORD"}


def test_the_scan_records_planted_files_as_unreadable_and_goes_on(tmp_path: Path) -> None:
    planted = _plant(tmp_path)
    doc, seconds = run_scanner(tmp_path)
    scan = doc["scan"]
    assert isinstance(scan, dict)
    errors = "\n".join(scan["errors"])
    for name, path in planted.items():
        assert f"unreadable: cannot read {path}" in errors or f"unreadable: {path}" in errors, (name, errors)
    assert "manifest.json: is a symlink" in errors
    assert doc["manifest"] is None
    libs = doc["libraries"]
    assert isinstance(libs, list)
    assert [(lib["path"].rsplit("/", 1)[-1], lib["owner"], lib["code_objects"]) for lib in libs] == [
        ("x86_64-linux-gnu", "dpkg:libreal0", ["gfx942"])
    ]
    assert seconds < 30


def test_a_manifest_that_is_a_fifo_or_too_big_is_recorded(tmp_path: Path) -> None:
    opt = tmp_path / "opt/imagebuild"
    opt.mkdir(parents=True)
    os.mkfifo(opt / "manifest.json")
    doc, _ = run_scanner(tmp_path)
    assert doc["manifest"] is None and "is a FIFO" in "\n".join(doc["scan"]["errors"])  # type: ignore[index]
    (opt / "manifest.json").unlink()
    (opt / "manifest.json").write_text('{"x": "' + "y" * (2 << 20) + '"}')
    doc, _ = run_scanner(tmp_path)
    assert doc["manifest"] is None and "larger than" in "\n".join(doc["scan"]["errors"])  # type: ignore[index]


# --- files a user names: the password file, shapes, TunableOp results, smoke documents, docker config -----


def _hostile_files(tmp_path: Path) -> dict[str, Path]:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    zero = tmp_path / "zero"
    zero.symlink_to("/dev/zero")
    return {"fifo": fifo, "dev-zero": zero, "folder": tmp_path}


def test_named_files_are_refused_unless_regular_and_small(tmp_path: Path) -> None:
    """Each reader, given a FIFO, /dev/zero or a folder: one short error of its own kind within a second, no
    hang, no MemoryError (these were read whole, or hung on the FIFO's open)."""
    from imagebuild.engine.cosign import read_password
    from imagebuild.errors import ConfigError
    from imagebuild.tunableop.results import load as load_results
    from smoke.manifest import ManifestError, load_json

    readers = {
        "password": (lambda p: read_password(p), ConfigError),
        "tunableop": (lambda p: load_results(p), ConfigError),
        "smoke document": (lambda p: load_json(str(p), "baseline"), ManifestError),
    }
    for kind, path in _hostile_files(tmp_path).items():
        for name, (reader, error) in readers.items():
            started = time.monotonic()
            with pytest.raises(error) as caught:
                reader(path)
            assert time.monotonic() - started < 1, (name, kind)
            assert "\n" not in str(caught.value) and len(str(caught.value)) < 300, (name, kind, caught.value)


def test_a_docker_config_that_is_not_a_regular_file_is_one_line(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    from imagebuild.engine.registry import _docker_config_auth
    from imagebuild.errors import ConfigError

    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    os.mkfifo(tmp_path / "config.json")
    with pytest.raises(ConfigError) as caught:
        _docker_config_auth("127.0.0.1:5000")
    assert "config.json" in str(caught.value) and "FIFO" in str(caught.value)
