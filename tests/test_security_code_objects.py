"""The code-object reader against hostile files: every length checked against what remains, every loop advances,
decompression bounded, files streamed (never read whole), and target features matched as the loader does.

Each hostile file runs through the standalone script in a child process with a wall-clock timeout and an
address-space limit, so a hang or an unbounded allocation fails the test instead of stalling the run.
"""

from __future__ import annotations

import os
import resource
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from imagecontract import codeobjects as co
from imagecontract import verify as kv
from tests.test_kernel_verify import ccob, elf_with, fatbin, offload_bundle

SCRIPT = Path(kv.__file__)
MEMORY_LIMIT = 256 << 20  # address space of the child: far below what the crafted headers ask for
HIP = ["host-x86_64-unknown-linux--", "hipv4-amdgcn-amd-amdhsa--gfx942"]
U64_MAX = (1 << 64) - 1


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def verify(path: Path | str, arch: str = "gfx942", timeout: float = 20) -> subprocess.CompletedProcess[str]:
    """The standalone script, bounded in time and memory; a hang raises TimeoutExpired (a failure)."""
    return subprocess.run(
        [sys.executable, "-I", str(SCRIPT), str(path), "--arch", arch],
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=_limit_memory,
    )


def assert_clean_error(done: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.startswith("error: ") and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr) < 400
    for needle in needles:
        assert needle in done.stderr, done.stderr


def put(data: bytes, offset: int, fmt: str, *values: int) -> bytes:
    out = bytearray(data)
    struct.pack_into(fmt, out, offset, *values)
    return bytes(out)


def hostile_files() -> dict[str, bytes]:
    """One crafted file per hole: lengths past the end, zero-size headers, absurd counts."""
    bundle = offload_bundle(HIP)
    fb = fatbin([(2, 90, False)])
    elf = elf_with({".hip_fatbin": bundle})
    shoff = struct.unpack_from("<Q", elf, 0x28)[0]
    return {
        # the example: a 16-byte fat binary whose header and body sizes are zero looped forever
        "fatbin-zero-sizes": struct.pack("<IHHQ", co.FATBIN_MAGIC, 1, 0, 0),
        "fatbin-size-2^60": put(fb, 8, "<Q", 1 << 60),
        "fatbin-entry-header-zero": put(fb, 16 + 4, "<I", 0),
        "fatbin-entry-payload-2^63": put(fb, 16 + 8, "<Q", 1 << 63),
        "bundle-count-2^60": put(bundle, 24, "<Q", 1 << 60),
        "bundle-entry-size-2^60": put(bundle, 32 + 8, "<Q", 1 << 60),
        "bundle-entry-offset-max": put(bundle, 32, "<Q", U64_MAX),
        "bundle-id-len-2^60": put(bundle, 32 + 16, "<Q", 1 << 60),
        "ccob-total-2^60": put(ccob(bundle), 8, "<Q", 1 << 60)[:24],
        "ccob-total-below-header": put(ccob(bundle), 8, "<I", 3),
        "ccob-unknown-version": put(ccob(bundle), 4, "<H", 9),
        "elf-shoff-2^60": put(elf, 0x28, "<Q", 1 << 60),
        "elf-shnum-max": put(elf, 0x3C, "<H", 0xFFFF),
        "elf-shentsize-zero": put(elf, 0x3A, "<H", 0),
        "elf-shstrndx-out-of-range": put(elf, 0x3E, "<H", 0xFFF0),
        "elf-section-offset-2^60": put(elf, shoff + 64 + 24, "<Q", 1 << 60),
        "elf-section-size-2^62": put(elf, shoff + 64 + 32, "<Q", 1 << 62),
        "elf-truncated": elf[:40],
    }


@pytest.mark.parametrize("name", sorted(hostile_files()))
def test_crafted_headers_are_refused_quickly_in_bounded_memory(name: str, tmp_path: Path) -> None:
    path = tmp_path / name
    path.write_bytes(hostile_files()[name])
    assert_clean_error(verify(path, timeout=10))


def test_compressed_bundle_declaring_4_gib_is_refused(tmp_path: Path) -> None:
    """A small compressed bundle (v3) that declares 4 GiB uncompressed: refused by the cap, nothing allocated."""
    data = zlib.compress(offload_bundle(HIP) + bytes(4 << 20))
    head = b"CCOB" + struct.pack("<HHQQQ", 3, 0, 32 + len(data), 4 << 30, 0)
    path = tmp_path / "bomb.ccob"
    path.write_bytes(head + data)
    assert_clean_error(verify(path), "uncompressed", "more than")


@pytest.fixture(scope="module")
def zlib_bomb() -> bytes:
    """512 MiB of zeros after a real bundle header: about 500 KB compressed (a one-second build)."""
    compressor = zlib.compressobj(1)
    out = bytearray(compressor.compress(offload_bundle(HIP)))
    zeros = bytes(1 << 20)
    for _ in range(512):
        out += compressor.compress(zeros)
    return bytes(out + compressor.flush())


def test_decompression_stops_at_the_bundle_header(zlib_bomb: bytes, tmp_path: Path) -> None:
    """Declared honestly (512 MiB, under the cap): still only the header is inflated, within 256 MiB of memory."""
    plain = len(offload_bundle(HIP)) + (512 << 20)
    path = tmp_path / "honest-bomb.ccob"
    path.write_bytes(b"CCOB" + struct.pack("<HHQQQ", 3, 0, 32 + len(zlib_bomb), plain, 0) + zlib_bomb)
    done = verify(path)
    assert done.returncode == 0, done.stderr
    assert "code object  gfx942" in done.stdout


@pytest.mark.skipif(shutil.which("zstd") is None, reason="the zstd command is installed by scripts/setup.sh")
def test_zstd_bundle_is_read_through_the_command_with_bounded_output(tmp_path: Path) -> None:
    raw = tmp_path / "plain"
    raw.write_bytes(offload_bundle(HIP) + bytes(64 << 20))
    subprocess.run(["zstd", "-q", "-1", str(raw), "-o", str(tmp_path / "z")], check=True)
    data = (tmp_path / "z").read_bytes()
    path = tmp_path / "zstd.ccob"
    path.write_bytes(b"CCOB" + struct.pack("<HHQQQ", 3, 1, 32 + len(data), raw.stat().st_size, 0) + data)
    done = verify(path)
    assert done.returncode == 0, done.stderr
    assert co.list_code_objects(path).code_objects == ["gfx942"]
    corrupt = tmp_path / "corrupt.ccob"
    corrupt.write_bytes(b"CCOB" + struct.pack("<HHQQQ", 3, 1, 32 + 64, 1 << 20, 0) + b"\xff" * 64)
    assert_clean_error(verify(corrupt), "zstd")


def test_a_large_file_is_streamed_not_read_whole(tmp_path: Path) -> None:
    """512 MiB (sparse) after a bundle: the old reader needed it all in memory, this one reads in chunks."""
    path = tmp_path / "big.hipfb"
    with path.open("wb") as fh:
        fh.write(offload_bundle(HIP))
        fh.truncate(512 << 20)
    done = verify(path, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "code object  gfx942" in done.stdout


def test_non_regular_files_are_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path in ("/dev/zero", str(fifo), str(tmp_path)):
        assert_clean_error(verify(path, timeout=10), "not a regular file")


# --- target features, as the loader matches them ---------------------------------------------------------


def listing(*code_objects: str) -> co.Listing:
    return co.Listing("lib.so", code_objects=list(code_objects))


@pytest.mark.parametrize(
    ("have", "request_", "missing", "unexpected"),
    [
        # the example: built only for xnack+, asked for xnack-
        (["gfx942:xnack+"], "gfx942:xnack-", ["gfx942:xnack-"], ["gfx942:xnack+"]),
        (["gfx942:xnack-"], "gfx942:xnack-", [], []),
        # no feature set (any) loads on both settings
        (["gfx942"], "gfx942:xnack-", [], []),
        (["gfx942"], "gfx942:xnack+", [], []),
        (["gfx942"], "gfx942:sramecc+:xnack-", [], []),
        # asking for any xnack means GPUs of both settings: one variant alone does not do
        (["gfx942:xnack+"], "gfx942", ["gfx942"], []),
        (["gfx942:xnack+", "gfx942:xnack-"], "gfx942", [], []),
        # a feature the request leaves open must be covered both ways
        (["gfx942:sramecc+:xnack-"], "gfx942:xnack-", ["gfx942:xnack-"], []),
        (["gfx942:sramecc+:xnack-", "gfx942:sramecc-:xnack-"], "gfx942:xnack-", [], []),
        # a feature the loader does not know never parses, so that code object never loads
        (["gfx942:bogus+"], "gfx942", ["gfx942"], ["gfx942:bogus+"]),
        # processors still differ
        (["gfx90a"], "gfx942", ["gfx942"], ["gfx90a"]),
    ],
)
def test_features_match_as_the_loader_does(
    have: list[str], request_: str, missing: list[str], unexpected: list[str]
) -> None:
    result = kv.compare(listing(*have), kv.parse_arch_list(request_))
    assert (result.missing, result.unexpected) == (missing, unexpected)


def test_cli_refuses_a_feature_mismatch(tmp_path: Path) -> None:
    path = tmp_path / "xnack.so"
    path.write_bytes(elf_with({".hip_fatbin": offload_bundle([HIP[0], "hipv4-amdgcn-amd-amdhsa--gfx942:xnack+"])}))
    done = verify(path, "gfx942:xnack-")
    assert done.returncode == 1
    assert "missing gfx942:xnack-" in done.stderr and "not requested gfx942:xnack+" in done.stderr
    assert verify(path, "gfx942:xnack+").returncode == 0
