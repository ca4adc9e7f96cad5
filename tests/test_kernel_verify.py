"""Code-object listing and comparison on libraries laid out byte for byte as the toolchains lay them out.

The files are written here from the formats' specifications (ELF64 with `.hip_fatbin` clang offload bundles,
plain and zlib-compressed, and `.nv_fatbin` CUDA fat binaries); pyelftools reads each one back first, so the
test files are real ELF. Builds by the real compilers are checked in tests/test_kernels_toolchain.py.
"""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from click.testing import CliRunner
from elftools.elf.elffile import ELFFile

from imagebuild.cli import main
from imagecontract import codeobjects as co
from imagecontract import verify as kv

SCRIPT = Path(kv.__file__)


def offload_bundle(ids: list[str]) -> bytes:
    """A clang offload bundle: magic, entry count, (offset, size, id) per entry, then 4 KiB-aligned payloads."""
    header_len = 24 + 8 + sum(24 + len(i) for i in ids)
    payloads, offsets, pos = [], [], -(-header_len // 4096) * 4096
    for i in ids:
        body = b"" if i.startswith("host") else b"\x7fELF" + i.encode() * 8
        offsets.append((pos if body else header_len, len(body)))
        payloads.append(body)
        pos = -(-(pos + len(body)) // 4096) * 4096
    out = bytearray(co.BUNDLE_MAGIC + struct.pack("<Q", len(ids)))
    for i, (off, size) in zip(ids, offsets, strict=True):
        out += struct.pack("<QQQ", off, size, len(i)) + i.encode()
    for (off, _), body in zip(offsets, payloads, strict=True):
        if body:
            out += b"\0" * (off - len(out)) + body
    return bytes(out)


def ccob(bundle: bytes) -> bytes:
    """A version-2 compressed bundle (zlib): CCOB, version, method, total size, plain size, hash, data."""
    data = zlib.compress(bundle)
    return b"CCOB" + struct.pack("<HHIIQ", 2, 0, 24 + len(data), len(bundle), 0x1234) + data


def fatbin(entries: list[tuple[int, int, bool]]) -> bytes:
    """A CUDA fat binary: 16-byte header, then per entry a 64-byte header (kind, arch at +28, flags at +40)."""
    body = bytearray()
    for kind, arch, arch_specific in entries:
        payload = (b"\x7fELF" if kind == co.FATBIN_KIND_ELF else b".version 9.0\n").ljust(64, b"\0")
        flags = 0x11 | (co.FATBIN_FLAG_ARCH_SPECIFIC if arch_specific else 0)
        head = struct.pack("<HHIQ", kind, 0x0101, 64, len(payload))
        head += struct.pack("<IIHHIIIQ", 0, 0, 8, 1, arch, 0, 0, flags).ljust(48, b"\0")
        body += head + payload
    return struct.pack("<IHHQ", co.FATBIN_MAGIC, 1, 16, len(body)) + bytes(body)


def elf_with(sections: dict[str, bytes]) -> bytes:
    """A minimal ELF64 shared object holding the given PROGBITS sections plus .shstrtab."""
    names = [""] + list(sections) + [".shstrtab"]
    shstr = b"\0".join(n.encode() for n in names) + b"\0"
    name_off = {n: shstr.index(n.encode() + b"\0") if n else 0 for n in names}
    blob = bytearray(b"\0" * 64)
    placed = []
    for name, data in [*sections.items(), (".shstrtab", shstr)]:
        blob += b"\0" * (-len(blob) % 8)
        placed.append((name, len(blob), len(data)))
        blob += data
    blob += b"\0" * (-len(blob) % 8)
    shoff = len(blob)
    blob += b"\0" * 64  # null section header
    for name, off, size in placed:
        stype = 3 if name == ".shstrtab" else 1
        blob += struct.pack("<IIQQQQIIQQ", name_off[name], stype, 0, 0, off, size, 0, 0, 8, 0)
    ident = b"\x7fELF" + bytes([2, 1, 1, 0]) + b"\0" * 8
    header = ident + struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, 0, shoff, 0, 64, 0, 0, 64, len(names), len(names) - 1)
    blob[:64] = header
    return bytes(blob)


def write(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    with path.open("rb") as fh:  # must be a valid ELF for an independent reader too
        elf = ELFFile(fh)
        assert {s.name for s in elf.iter_sections()} >= {".shstrtab"}
    return path


HIP_IDS = [
    "host-x86_64-unknown-linux--",
    "hipv4-amdgcn-amd-amdhsa--gfx908",
    "hipv4-amdgcn-amd-amdhsa--gfx90a:xnack+",
    "hipv4-amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-",
]


@pytest.fixture
def hip_lib(tmp_path: Path) -> Path:
    return write(tmp_path, "hip.so", elf_with({".text": b"\x90" * 32, ".hip_fatbin": offload_bundle(HIP_IDS)}))


@pytest.fixture
def cuda_lib(tmp_path: Path) -> Path:
    fb = fatbin([(2, 80, False), (2, 90, False), (1, 90, False)])
    return write(tmp_path, "cuda.so", elf_with({".nv_fatbin": fb + b"\0" * 8 + fatbin([(2, 90, False)])}))


@pytest.mark.parametrize(
    ("text", "code", "ptx"),
    [
        ("gfx90a;gfx942", ("gfx90a", "gfx942"), ()),
        ("gfx942:sramecc+:xnack-", ("gfx942:sramecc+:xnack-",), ()),
        ("sm_80,sm_90", ("sm_80", "sm_90"), ()),
        ("8.0;9.0", ("sm_80", "sm_90"), ()),
        ("9.0+PTX", ("sm_90",), ("compute_90",)),
        (" 8.0  9.0a ", ("sm_80", "sm_90a"), ()),
        ("Hopper", ("sm_90",), ("compute_90",)),
    ],
)
def test_parse_arch_list_forms(text: str, code: tuple[str, ...], ptx: tuple[str, ...]) -> None:
    got = kv.parse_arch_list(text)
    assert got.code_objects == code
    assert got.ptx == ptx


@pytest.mark.parametrize("bad", ["", "gfx", "sm90", "9", "gfx90a;mi300", "9.0+SASS", "compute_90"])
def test_parse_arch_list_rejects_unknown(bad: str) -> None:
    with pytest.raises(co.VerifyError):
        kv.parse_arch_list(bad)


def test_lists_hip_code_objects_with_features(hip_lib: Path) -> None:
    listing = co.list_code_objects(hip_lib)
    assert listing.code_objects == ["gfx908", "gfx90a:xnack+", "gfx942:sramecc+:xnack-"]
    assert listing.ptx == []
    assert "host-x86_64-unknown-linux--" in listing.entries


FULL_REQUEST = "gfx908;gfx90a:xnack+;gfx942:sramecc+:xnack-"


def test_hip_compare_follows_the_loaders_target_id_rules(hip_lib: Path) -> None:
    """A code object with a feature set loads only where that feature has that sign (LLVM isCompatibleTargetID)."""
    listing = co.list_code_objects(hip_lib)
    assert kv.compare(listing, kv.parse_arch_list(FULL_REQUEST)).ok
    # gfx90a (any xnack) also means xnack- GPUs, where a gfx90a:xnack+ code object does not load
    result = kv.compare(listing, kv.parse_arch_list("gfx90a:xnack+;gfx942:sramecc+:xnack-;gfx1100;gfx90a"))
    assert result.missing == ["gfx1100", "gfx90a"]
    assert result.unexpected == ["gfx908"]


def test_several_bundles_and_a_compressed_one(tmp_path: Path) -> None:
    one = offload_bundle(HIP_IDS[:2])
    two = ccob(offload_bundle([HIP_IDS[0], "hipv4-amdgcn-amd-amdhsa--gfx942"]))
    lib = write(tmp_path, "multi.so", elf_with({".hip_fatbin": one + b"\0" * (-len(one) % 4096) + two}))
    assert co.list_code_objects(lib).code_objects == ["gfx908", "gfx942"]


def test_lists_cuda_elf_and_ptx_separately(cuda_lib: Path) -> None:
    listing = co.list_code_objects(cuda_lib)
    assert listing.code_objects == ["sm_80", "sm_90"]
    assert listing.ptx == ["compute_90"]
    assert kv.compare(listing, kv.parse_arch_list("8.0;9.0+PTX")).ok
    no_ptx = kv.compare(listing, kv.parse_arch_list("8.0;9.0"))
    assert no_ptx.unexpected == ["compute_90"]


def test_arch_specific_cuda_target_is_its_own_arch(tmp_path: Path) -> None:
    lib = write(tmp_path, "a.so", elf_with({".nv_fatbin": fatbin([(2, 90, True)])}))
    listing = co.list_code_objects(lib)
    assert listing.code_objects == ["sm_90a"]
    assert kv.compare(listing, kv.parse_arch_list("9.0a")).ok
    assert not kv.compare(listing, kv.parse_arch_list("9.0")).ok


def test_library_without_device_code_differs(tmp_path: Path) -> None:
    lib = write(tmp_path, "plain.so", elf_with({".text": b"\x90" * 16}))
    listing = co.list_code_objects(lib)
    assert listing.code_objects == []
    assert kv.compare(listing, kv.parse_arch_list("gfx90a")).missing == ["gfx90a"]


def test_not_an_elf_is_a_usage_error(tmp_path: Path) -> None:
    path = tmp_path / "x.txt"
    path.write_text("hello")
    with pytest.raises(co.VerifyError, match="not an ELF"):
        co.list_code_objects(path)


def run_script(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The in-image path: a copy of the contract package alone, its verifier run isolated (no imagebuild)."""
    copy = cwd / "contract" / "imagecontract"
    if not copy.exists():
        shutil.copytree(SCRIPT.parent, copy, ignore=shutil.ignore_patterns("__pycache__"))
    script = copy / SCRIPT.name
    return subprocess.run([sys.executable, "-I", str(script), *args], capture_output=True, text=True, cwd=cwd)


def test_standalone_match_writes_contract_json(hip_lib: Path, tmp_path: Path) -> None:
    out = tmp_path / "opt" / "kernels.json"
    done = run_script(str(hip_lib), "--arch", FULL_REQUEST, "--json-out", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    doc = json.loads(out.read_text())
    assert doc == {
        "library": str(hip_lib),
        "requested": ["gfx908", "gfx90a:xnack+", "gfx942:sramecc+:xnack-"],
        "code_objects": ["gfx908", "gfx90a:xnack+", "gfx942:sramecc+:xnack-"],
        "ptx": [],
    }
    assert [p.name for p in out.parent.iterdir()] == ["kernels.json"]  # no temp file left


def test_a_staged_copy_is_recorded_under_its_installed_path(cuda_lib: Path, tmp_path: Path) -> None:
    """The cross Dockerfile verifies the library where it staged it (/out/opt/venv/...); kernels.json names the path
    the final image has (it named /out/... in the first cuda13.0-torch2.14 build, issue 31)."""
    out = tmp_path / "kernels.json"
    installed = "/opt/venv/lib/python3.11/site-packages/imagebuild_kernels/_C.so"
    done = run_script(str(cuda_lib), "--arch", "8.0;9.0+PTX", "--installed-as", installed, "--json-out", str(out),
                      cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(out.read_text())["library"] == installed
    assert done.stdout.splitlines()[0] == f"{installed}:"


def test_standalone_mismatch_exits_1_and_writes_nothing(cuda_lib: Path, tmp_path: Path) -> None:
    out = tmp_path / "kernels.json"
    done = run_script(str(cuda_lib), "--arch", "9.0", "--json-out", str(out), cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "error: code objects differ from the requested arches: not requested compute_90, sm_80"
    ]
    assert not out.exists()


def test_standalone_bad_input_exits_2(tmp_path: Path) -> None:
    done = run_script(str(tmp_path / "missing.so"), "--arch", "gfx90a", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith("error: cannot read")
    assert "Traceback" not in done.stderr


def test_cli_verify_exit_codes(hip_lib: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    ok = runner.invoke(main, ["kernels", "verify", str(hip_lib), "--arch", FULL_REQUEST.replace(";", ","), "--json"])
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.stdout)["code_objects"][0] == "gfx908"
    diff = runner.invoke(main, ["kernels", "verify", str(hip_lib), "--arch", FULL_REQUEST.split(";", 1)[1]])
    assert diff.exit_code == 1
    assert "error: code objects differ from the requested arches: not requested gfx908" in diff.stderr
    bad = runner.invoke(main, ["kernels", "verify", str(hip_lib), "--arch", "mi300"])
    assert bad.exit_code == 2
    assert bad.stderr.count("\n") == 1 and bad.stderr.startswith("error: unknown GPU target 'mi300'")
