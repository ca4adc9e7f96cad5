"""CUDA arch coverage (issue 31, item 3): the fat binary parser and CUDA's compatibility rule, tested on device code
nvcc 13 compiles here with known arches and on real NVIDIA binaries from PyPI wheels, each read a second way by
NVIDIA's own cuobjdump (the PyPI wheel nvidia-cuda-cuobjdump).

Wheels come from PyPI with pip (pinned version and sha256: pip refuses any other bytes), cached under
build/cache/pypi-wheels; nothing over 1 MB is committed. The small set (cuRAND 77 MB, CuPy 69 MB, flashinfer
62 MB, cuobjdump 0.3 MB) runs by default; the serving stack itself (torch 2.14.0 555 MB, vLLM 0.33.0 336 MB,
NCCL 2.30.7 216 MB, cuDNN 9.24.0.43 553 MB) runs with IMAGEBUILD_BIG_WHEELS=1 and must match
tests/data/arch-coverage-vllm-0.33.0.json. IMAGEBUILD_OFFLINE=1 skips the tests that download (saying so);
otherwise a failed download is a failure.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from imagebuild.prove.coverage import Required, disallowed, judge
from imagebuild.prove.host_scan import scan_root
from imagecontract import codeobjects as co
from imagecontract import cuda_fatbin as cf
from imagecontract.blob import Blob, VerifyError
from imagecontract.coverage import arch_table, scan, status

REPO = Path(__file__).resolve().parents[1]
CACHE = REPO / "build" / "cache" / "pypi-wheels"
NVCC = Path("/usr/local/bin/nvcc")
ARCHES = ["sm_75", "sm_80", "sm_90", "sm_90a", "sm_100", "sm_100a", "sm_103", "sm_110", "sm_120", "sm_121", "sm_121a"]
GOLDEN = REPO / "tests" / "data" / "arch-coverage-vllm-0.33.0.json"

# (distribution, version, wheel file, sha256): read from PyPI 2026-12-03.
CUOBJDUMP = (
    "nvidia-cuda-cuobjdump",
    "13.5.37",
    "nvidia_cuda_cuobjdump-13.5.37-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
    "38780fee50863252a0b8926357faa91615ca1c8346490563f33a06100cd73f58",
)
SMALL = [
    (
        "nvidia-curand",
        "10.4.5.25",
        "nvidia_curand-10.4.5.25-py3-none-manylinux_2_27_x86_64.whl",
        "22bb226a857e5888fe6b54ae465fc4371296bcff13a35f79e19691bcf454f529",
    ),
    (
        "cupy-cuda13x",
        "14.2.0",
        "cupy_cuda13x-14.2.0-cp312-cp312-manylinux2014_x86_64.whl",
        "9aafadbe29db3d4285026044aafeb28f2a3de4bd0df70718ec6892b7d27a4ded",
    ),
    (
        "flashinfer-python",
        "0.7.2.post1",
        "flashinfer_python-0.7.2.post1-py3-none-any.whl",
        "bfdc18b9e1e4d8d0730fe4343dc0e284cd0c160086de80f99888bc4867922d49",
    ),
]
BIG = [
    (
        "torch",
        "2.14.0",
        "torch-2.14.0-cp312-cp312-manylinux_2_28_x86_64.whl",
        "fecffb58f51fd643d213acd68da21cc3fc19bea05a3bc64b4ee55128f47a4963",
    ),
    (
        "vllm",
        "0.33.0",
        "vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl",
        "4b6bdec4ab269990bf70d45a3c1e94c3760a27064513760193b26d6f0da883aa",
    ),
    (
        "nvidia-nccl-cu13",
        "2.30.7",
        "nvidia_nccl_cu13-2.30.7-py3-none-manylinux_2_18_x86_64.whl",
        "cefa7fdb9710efd0f39c5f1be1d61ff6fc9a996c451265bd7fbdcf9455ed4b50",
    ),
    (
        "nvidia-cudnn-cu13",
        "9.24.0.43",
        "nvidia_cudnn_cu13-9.24.0.43-py3-none-manylinux_2_27_x86_64.whl",
        "71f181cd810e90f9b6023b01186fe82d13d65f0ec098581ee201d39fad769e4b",
    ),
    (
        "nvidia-cutlass-dsl-libs-cu13",
        "4.8.0",
        "nvidia_cutlass_dsl_libs_cu13-4.8.0-cp312-cp312-manylinux_2_28_x86_64.whl",
        "463cd7f0c452ffeeecb530a15aeb1b10cbbd2c8da6c5aa2fecf65f836258a732",
    ),
]
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_18_x86_64", "manylinux2014_x86_64")
MAX_MEMBER = 1 << 30  # one file taken out of a wheel

offline = pytest.mark.skipif(
    os.environ.get("IMAGEBUILD_OFFLINE") == "1", reason="IMAGEBUILD_OFFLINE=1: PyPI wheels not downloaded"
)
needs_nvcc = pytest.mark.skipif(not NVCC.exists(), reason=f"CUDA toolchain: {NVCC} not found")


# --- helpers: pinned wheels, their libraries, cuobjdump -----------------------------------------------------


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def wheel(pin: tuple[str, str, str, str]) -> Path:
    """The pinned wheel from the cache, or downloaded by pip (hash-checked: `--hash` makes pip refuse others)."""
    name, version, filename, sha = pin
    path = CACHE / filename
    if path.exists() and _sha256(path) == sha:
        return path
    CACHE.mkdir(parents=True, exist_ok=True)
    req = CACHE / f"{name}.req.txt"
    req.write_text(f"{name}=={version} --hash=sha256:{sha}\n")
    argv = [sys.executable, "-m", "pip", "download", "--isolated", "--disable-pip-version-check", "--no-deps"]
    argv += ["--only-binary", ":all:", "--dest", str(CACHE), "--index-url", "https://pypi.org/simple"]
    argv += [f"--platform={p}" for p in PLATFORMS] + ["--python-version", "3.12", "--implementation", "cp"]
    proc = subprocess.run([*argv, "-r", str(req)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert _sha256(path) == sha
    return path


def unpack(whl: Path, dest: Path, keep: re.Pattern[str]) -> list[Path]:
    """The wheel's members matching `keep` plus its dist-info RECORD, under dest (names checked, sizes bounded)."""
    out = []
    with zipfile.ZipFile(whl) as zf:
        for info in zf.infolist():
            name = info.filename
            if not (keep.search(name) or name.endswith(".dist-info/RECORD")) or info.is_dir():
                continue
            assert not name.startswith("/") and ".." not in Path(name).parts and info.file_size < MAX_MEMBER
            target = dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src, target.open("wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            out.append(target)
    return out


@pytest.fixture(scope="module")
def cuobjdump(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if os.environ.get("IMAGEBUILD_OFFLINE") == "1":
        pytest.skip("IMAGEBUILD_OFFLINE=1: cuobjdump's wheel not downloaded")
    dest = tmp_path_factory.mktemp("cuobjdump")
    (tool,) = [p for p in unpack(wheel(CUOBJDUMP), dest, re.compile(r"/bin/cuobjdump$")) if p.name == "cuobjdump"]
    tool.chmod(0o755)
    return tool


def cuobjdump_lists(tool: Path, path: Path) -> tuple[set[str], set[str]]:
    """cubins and PTX as cuobjdump lists them (`…​.sm_90a.cubin`, `…​.sm_90.ptx` read as compute_90)."""
    out = subprocess.run(
        [str(tool), "--list-elf", "--list-ptx", str(path)], capture_output=True, text=True, timeout=600
    ).stdout
    cubins = set(re.findall(r"^ELF file\s+\d+: .*\.(sm_\d+[af]?)\.cubin$", out, re.M))
    ptx = {"compute_" + m for m in re.findall(r"^PTX file\s+\d+: .*\.sm_(\d+[af]?)\.ptx$", out, re.M)}
    return cubins, ptx


def carried_by(path: Path) -> cf.Carried:
    with path.open("rb") as fh:
        return cf.carried(co.elf_section_blobs(Blob(fh, os.fstat(fh.fileno()).st_size)))


def agree_with_cuobjdump(tool: Path, path: Path) -> cf.Carried:
    """Our reading equals cuobjdump's; cuobjdump prints a family cubin without its `f` (sm_100f -> sm_100), its
    PTX with it: the fat binary header's flag 0x200000 is where we read it."""
    found = carried_by(path)
    cubins, ptx = cuobjdump_lists(tool, path)
    assert {n.removesuffix("f") for n in found.cubins} == cubins, path
    assert set(found.ptx) == ptx, path
    return found


# --- the rule ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("device", "cubins", "ptx", "kind", "source"),
    [
        ("sm_90", ["sm_90a"], [], "cubin exact", "sm_90a"),  # a 9.0 GPU runs sm_90a code
        ("sm_90a", ["sm_80", "sm_90"], [], "cubin exact", "sm_90"),  # the suffix asks for a 9.0 GPU, no more
        ("sm_86", ["sm_80"], [], "cubin compatible", "sm_80"),
        ("sm_89", ["sm_80", "sm_86"], [], "cubin compatible", "sm_86"),  # the nearest older minor
        ("sm_121", ["sm_120"], [], "cubin compatible", "sm_120"),
        ("sm_121a", ["sm_120"], [], "cubin compatible", "sm_120"),
        ("sm_121", ["sm_120a"], [], "none", None),  # an `a` cubin runs on its own chip only
        ("sm_103", ["sm_100a"], [], "none", None),
        ("sm_103", ["sm_100f"], [], "family", "sm_100f"),
        ("sm_121", ["sm_120f"], [], "family", "sm_120f"),
        ("sm_110", ["sm_100f"], [], "none", None),  # a family ends at its major (11.0 is Thor's own)
        ("sm_100", ["sm_103f"], [], "none", None),  # never backwards
        ("sm_80", ["sm_86"], [], "none", None),
        ("sm_90", ["sm_80"], [], "none", None),  # another major: no cubin runs
        ("sm_90", ["sm_80"], ["compute_80"], "ptx-jit", "compute_80"),
        ("sm_120", [], ["compute_75", "compute_90"], "ptx-jit", "compute_90"),  # the newest PTX that runs
        ("sm_100", [], ["compute_90a"], "none", None),  # `a` PTX: its own chip only
        ("sm_90", [], ["compute_90a"], "ptx-jit", "compute_90a"),
        ("sm_103", [], ["compute_100f"], "ptx-jit", "compute_100f"),
        ("sm_120", [], ["compute_100f"], "none", None),
        ("sm_75", ["sm_80", "sm_90"], ["compute_80"], "none", None),  # PTX never runs backwards either
        ("sm_120", ["sm_120"], ["compute_120"], "cubin exact", "sm_120"),  # a cubin beats PTX
        ("not-an-arch", ["sm_80"], [], "none", None),
    ],
)
def test_cuda_rule(device: str, cubins: list[str], ptx: list[str], kind: str, source: str | None) -> None:
    cell = cf.cuda_cell(device, cubins, ptx)
    assert (cell.kind, cell.source) == (kind, source)
    assert status(device, cubins, ptx) == cf.STATUS_OF[kind]


def test_required_library_without_the_arch_fails_naming_it_and_what_it_carries() -> None:
    libs = [
        {"path": "/sp/vllm/_flashmla_C.abi3.so", "owner": "python:vllm", "code": ["sm_90a", "sm_100f"], "ptx": []},
        {
            "path": "/sp/vllm/_C_stable_libtorch.abi3.so",
            "owner": "python:vllm",
            "code": ["sm_80"],
            "ptx": ["compute_80"],
        },
        {"path": "/sp/nvidia/nccl/lib/libnccl.so.2", "owner": "python:nvidia-nccl-cu13", "code": ["sm_80"], "ptx": []},
    ]
    requested = ["sm_90", "sm_120"]
    raw = {
        "requested": requested,
        "libraries": [
            {
                "path": lib["path"],
                "kind": "library",
                "files": 1,
                "owner": lib["owner"],
                "code_objects": lib["code"],
                "ptx": lib["ptx"],
                "arches": {a: status(a, lib["code"], lib["ptx"]) for a in requested},
            }
            for lib in libs
        ],
        "manifest": None,
        "scan": {"files_seen": 3, "files_read": 3, "seconds": 0.0},
    }
    need = [Required.parse("vllm:_C_stable_libtorch*"), Required.parse("nvidia_nccl_cu13")]
    doc = judge(raw, {}, "t", need)
    assert not doc.ok
    bad = {(g.library.rsplit("/", 1)[1], g.arch) for g in doc.gaps if not g.allowed}
    assert bad == {("libnccl.so.2", "sm_90"), ("libnccl.so.2", "sm_120")}  # _C runs on both through PTX
    optional = {(g.library.rsplit("/", 1)[1], g.arch) for g in doc.gaps if g.allowed}
    assert optional == {("_flashmla_C.abi3.so", "sm_120")}  # not required: recorded
    line = disallowed(doc)
    assert "\n" not in line
    assert line.startswith(
        "arch coverage: /sp/nvidia/nccl/lib/libnccl.so.2 has no sm_90 code (required (nvidia-nccl-cu13) on every "
        "requested arch; it carries sm_80)"
    )
    assert judge(raw, {}, "t", need[:1]).ok  # without NCCL required, nothing refuses


# --- the parser: bounds ------------------------------------------------------------------------------------


def fatbin(entries: list[tuple[int, int, int]], header: int = 64, fat_extra: int = 0) -> bytes:
    """A container of entries (kind, arch, flags), each with an 8-byte payload."""
    body = b""
    for kind, arch, flags in entries:
        head = bytearray(header)
        struct.pack_into("<HHIQ", head, 0, kind, 0x101, header, 8)
        if header >= cf.ENTRY_MIN:
            struct.pack_into("<I", head, 28, arch)
            struct.pack_into("<Q", head, 40, flags)
        body += bytes(head) + b"\0" * 8
    return struct.pack("<IHHQ", cf.FATBIN_MAGIC, 1, 16, len(body) + fat_extra) + body


def test_parser_reads_kinds_and_variants() -> None:
    data = fatbin([(2, 90, 0x100011), (2, 100, 0x1200011), (1, 120, 0x8011), (8, 90, 0x18011), (2, 80, 0x11)])
    names = [e.name for e in cf.container_entries(Blob(data, len(data)))]
    assert names == ["sm_90a", "sm_100f", "compute_120", "lto_90", "sm_80"]
    assert co.list_blob(Path("x.fatbin"), Blob(data, len(data))).code_objects == ["sm_100f", "sm_80", "sm_90a"]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (fatbin([(2, 80, 0)], fat_extra=1 << 40), "runs past the end"),
        (fatbin([(2, 80, 0)], header=40), "header size 40 is too small"),
        (fatbin([(2, 80, 0)])[:-4], "runs past the end"),
        (fatbin([(2, 123456, 0)]), "arch 123456 is not a compute capability"),
        (struct.pack("<IHHQ", cf.FATBIN_MAGIC, 1, 8, 0) + b"\0" * 64, "header size 8 is below 16"),
    ],
)
def test_parser_refuses_hostile_containers(data: bytes, message: str) -> None:
    with pytest.raises(VerifyError, match=message):
        cf.container_entries(Blob(data, len(data)))


def test_an_entry_payload_cannot_run_past_its_container() -> None:
    data = bytearray(fatbin([(2, 80, 0), (2, 90, 0)]))
    struct.pack_into("<Q", data, 16 + 8, 1 << 20)  # the first entry's payload claims 1 MiB
    with pytest.raises(VerifyError, match="runs past its fat binary"):
        cf.container_entries(Blob(bytes(data), len(data)))


@settings(derandomize=True, database=None, deadline=1000, max_examples=1500)
@given(st.data())
def test_fuzzed_sections_end_in_a_result_or_one_short_error(data: st.DataObject) -> None:
    """Mutated `.nv_fatbin` / `__nv_relfatbin` / `.nvFatBinSegment` sections and PTX heads: carried() returns or
    raises VerifyError with one short line; never another exception, never a hang (the deadline)."""
    from tests.test_kernel_verify import elf_with

    good = fatbin([(2, 80, 0x11), (2, 100, 0x1200011), (1, 90, 0x108011)])
    wrapper = struct.pack("<IIQQ", cf.WRAPPER_MAGIC, 1, 0, 0)
    parts = {cf.LOADED: bytearray(good + good), cf.RELOCATABLE: bytearray(good), cf.WRAPPERS: bytearray(wrapper * 2)}
    for _ in range(data.draw(st.integers(1, 5))):
        name = data.draw(st.sampled_from(sorted(parts)))
        section = parts[name]
        at = data.draw(st.integers(0, max(0, len(section) - 1)))
        fmt = data.draw(st.sampled_from(["<H", "<I", "<Q", "cut"]))
        if fmt == "cut":
            del section[at:]
        else:
            value = data.draw(st.sampled_from([0, 1, 15, 16, 47, 48, 0x7FFFFFFF, 0xFFFFFFFF, (1 << 64) - 1]))
            section[at : at + struct.calcsize(fmt)] = struct.pack(fmt, value & ((1 << (8 * struct.calcsize(fmt))) - 1))
    elf = elf_with({name: bytes(section) for name, section in parts.items()})
    try:
        found = cf.carried(co.elf_section_blobs(Blob(elf, len(elf))))
    except VerifyError as exc:
        assert str(exc) and "\n" not in str(exc) and len(str(exc)) < 300
        return
    assert all(e.kind in ("cubin", "ptx", "lto") or e.kind.startswith("kind-") for e in found.loaded)
    target = cf.ptx_text_target(b".version 9.0\n" + data.draw(st.binary(max_size=200)))
    assert target is None or re.fullmatch(r"compute_\d{2,4}[af]?", target)


# --- nvcc's own output ---------------------------------------------------------------------------------------

GENCODE = [
    ("compute_80", "sm_80"),
    ("compute_90a", "sm_90a"),
    ("compute_100f", "sm_100f"),
    ("compute_120", "sm_120"),
    ("compute_90", "compute_90"),
]


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not NVCC.exists():
        pytest.skip(f"CUDA toolchain: {NVCC} not found")
    tmp = tmp_path_factory.mktemp("nvcc")
    (tmp / "k.cu").write_text("__global__ void k(float *x) { x[threadIdx.x] *= 2.0f; }\n")
    argv = [str(NVCC), "-shared", "-Xcompiler", "-fPIC", str(tmp / "k.cu"), "-o", str(tmp / "libk.so")]
    for arch, code in GENCODE:
        argv += ["-gencode", f"arch={arch},code={code}"]
    subprocess.run(argv, check=True, capture_output=True, timeout=600)
    return tmp / "libk.so"


@pytest.mark.toolchain
def test_nvcc_fat_binary_lists_exactly_what_was_compiled(synthetic: Path) -> None:
    found = carried_by(synthetic)
    assert found.cubins == ["sm_80", "sm_90a", "sm_100f", "sm_120"]
    assert found.ptx == ["compute_90"]
    assert found.wrappers >= 1  # one per registered fat binary (k.cu's, and any the static cudart brings)
    cells = {a: cf.cuda_cell(a, found.cubins, found.ptx).text() for a in ARCHES}
    assert cells == {
        "sm_75": "none",
        "sm_80": "cubin exact (sm_80)",
        "sm_90": "cubin exact (sm_90a)",
        "sm_90a": "cubin exact (sm_90a)",
        "sm_100": "cubin exact (sm_100f)",
        "sm_100a": "cubin exact (sm_100f)",
        "sm_103": "family from sm_100f",
        "sm_110": "ptx-jit from compute_90",
        "sm_120": "cubin exact (sm_120)",
        "sm_121": "cubin compatible from sm_120",
        "sm_121a": "cubin compatible from sm_120",
    }


@pytest.mark.toolchain
@offline
def test_nvcc_fat_binary_agrees_with_cuobjdump(synthetic: Path, cuobjdump: Path) -> None:
    agree_with_cuobjdump(cuobjdump, synthetic)


def test_a_broken_fat_binary_is_one_error_line_and_the_scan_goes_on(tmp_path: Path) -> None:
    good = fatbin([(2, 80, 0)])
    bad = bytearray(fatbin([(2, 90, 0)]))
    struct.pack_into("<Q", bad, 8, 1 << 40)
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "good.fatbin").write_bytes(good + b"\0" * 64)
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "bad.fatbin").write_bytes(bytes(bad) + b"\0" * 64)
    result = scan(tmp_path)
    assert [(Path(r.path).name, r.code_objects) for r in result.libraries] == [("a", ["sm_80"])]
    (error,) = result.errors
    assert error.startswith("unreadable: ") and "bad.fatbin" in error and "runs past the end" in error


# --- real NVIDIA binaries from PyPI ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if os.environ.get("IMAGEBUILD_OFFLINE") == "1":
        pytest.skip("IMAGEBUILD_OFFLINE=1: PyPI wheels not downloaded")
    site = tmp_path_factory.mktemp("site")
    for pin in SMALL:
        unpack(wheel(pin), site, re.compile(r"\.so(\.\d+)*$|\.ptx$"))
    return site


SMALL_EXPECTED = {
    # libcurand.so.10 (nvidia-curand 10.4.5.25): sm_75 .. sm_120 cubins and PTX for each
    "/nvidia/cu13/lib/libcurand.so.10": {
        "sm_75": "cubin exact (sm_75)",
        "sm_80": "cubin exact (sm_80)",
        "sm_90": "cubin exact (sm_90)",
        "sm_90a": "cubin exact (sm_90)",
        "sm_100": "cubin exact (sm_100)",
        "sm_100a": "cubin exact (sm_100)",
        "sm_103": "cubin compatible from sm_100",
        "sm_110": "cubin exact (sm_110)",
        "sm_120": "cubin exact (sm_120)",
        "sm_121": "cubin compatible from sm_120",
        "sm_121a": "cubin compatible from sm_120",
    },
    # CuPy 14.2.0's cub module: sm_75 .. sm_90, sm_100f, sm_120f, PTX compute_120: nothing for Thor (sm_110)
    "/cupy/cuda/cub.cpython-312-x86_64-linux-gnu.so": {
        "sm_75": "cubin exact (sm_75)",
        "sm_80": "cubin exact (sm_80)",
        "sm_90": "cubin exact (sm_90)",
        "sm_90a": "cubin exact (sm_90)",
        "sm_100": "cubin exact (sm_100f)",
        "sm_100a": "cubin exact (sm_100f)",
        "sm_103": "family from sm_100f",
        "sm_110": "none",
        "sm_120": "cubin exact (sm_120f)",
        "sm_121": "family from sm_120f",
        "sm_121a": "family from sm_120f",
    },
}


@offline
def test_flashinfer_ships_ptx_text_for_one_chip(small_site: Path) -> None:
    """flashinfer 0.7.2.post1 has no fat binary: its prebuilt device code is four PTX text files `.target sm_103a`
    (KDA kernels), which only a 10.3 GPU (B300/GB300) can JIT; required, every other arch refuses."""
    raw = scan_root(small_site, "sm_100,sm_103,sm_120")
    rows = {lib["path"]: lib for lib in raw["libraries"]}
    kda = rows["/flashinfer/data/csrc/kda/ptx"]
    assert (kda["kind"], kda["files"], kda["owner"]) == ("kernel-files", 4, "python:flashinfer-python")
    assert (kda["code_objects"], kda["ptx"]) == ([], ["compute_103a"])
    assert kda["via"] == {"sm_100": "none", "sm_103": "ptx-jit from compute_103a", "sm_120": "none"}
    doc = judge(raw, {}, "wheels", [Required.parse("flashinfer-python")])
    assert {g.arch for g in doc.gaps if not g.allowed} == {"sm_100", "sm_120"}
    assert "it carries no cubins + PTX compute_103a" in disallowed(doc)


@needs_nvcc
@pytest.mark.toolchain
def test_ptx_text_files_nvcc_writes_are_read_by_their_target(tmp_path: Path) -> None:
    (tmp_path / "k.cu").write_text("__global__ void k(float *x) { x[threadIdx.x] *= 2.0f; }\n")
    for arch in ("compute_90a", "compute_100f", "compute_120"):
        out = tmp_path / "ptx" / f"{arch}.ptx"
        out.parent.mkdir(exist_ok=True)
        subprocess.run([str(NVCC), "-ptx", f"-arch={arch}", str(tmp_path / "k.cu"), "-o", str(out)], check=True)
        assert cf.ptx_text_target(out.read_bytes()) == arch
    (row,) = scan(tmp_path / "ptx").libraries
    assert (row.kind, row.files, row.ptx) == ("kernel-files", 3, ["compute_100f", "compute_120", "compute_90a"])
    assert status("sm_121", row.code_objects, row.ptx) == "ptx"  # compute_120 JITs forward
    assert cf.ptx_text_target(b"// no target line\n.version 9.0\n") is None


@offline
def test_real_wheels_through_the_scanner(small_site: Path) -> None:
    """The in-image scanner run over the unpacked wheels (as host_scan does for an exported image): rows, owners
    from the wheels' RECORD files, and the rule's answer per library x arch."""
    raw = scan_root(small_site, ",".join(ARCHES))
    doc = judge(raw, {}, "wheels")
    rows = {lib.path: lib for lib in doc.libraries}
    assert rows["/nvidia/cu13/lib/libcurand.so.10"].owner == "python:nvidia-curand"
    assert rows["/cupy/cuda/cub.cpython-312-x86_64-linux-gnu.so"].owner == "python:cupy-cuda13x"
    for path, cells in SMALL_EXPECTED.items():
        assert rows[path].via == cells, path
    table = arch_table([lib.to_dict() for lib in doc.libraries], ARCHES)
    cub = table["libraries"]["/cupy/cuda/cub.cpython-312-x86_64-linux-gnu.so"]
    assert cub["carries"] == "sm_75, sm_80, sm_86, sm_89, sm_90, sm_100f, sm_120f + PTX compute_120"
    assert cub["arches"]["sm_103"] == {"kind": "family", "from": "sm_100f"}
    assert cub["arches"]["sm_110"] == {"kind": "none", "from": None}
    assert doc.ok  # nothing required: every gap is recorded, none refuses


@offline
def test_real_wheels_a_required_library_refuses_an_arch(small_site: Path) -> None:
    """Ask for Jetson Thor (sm_110) with CuPy required: cuRAND carries sm_110, CuPy does not (its newest PTX is
    compute_120), so the check fails naming CuPy's libraries and what they carry; sm_121a passes (cuRAND's
    sm_120 cubin, CuPy's sm_120f family cubin)."""
    need = [Required.parse("nvidia-curand"), Required.parse("cupy-cuda13x")]
    ok = judge(scan_root(small_site, "sm_80,sm_90a,sm_100,sm_121a"), {}, "wheels", need)
    assert ok.ok, disallowed(ok)
    doc = judge(scan_root(small_site, "sm_90,sm_110"), {}, "wheels", need)
    assert not doc.ok
    refused = {g.library for g in doc.gaps if not g.allowed}
    assert refused and all(p.startswith("/cupy/") for p in refused)
    assert {g.arch for g in doc.gaps if not g.allowed} == {"sm_110"}
    line = disallowed(doc)
    assert "\n" not in line and "/cupy/" in line and "has no sm_110 code (required (cupy-cuda13x)" in line
    assert "it carries sm_75, sm_80, sm_86, sm_89, sm_90, sm_100f, sm_120f + PTX compute_120" in line


@offline
def test_real_wheels_are_read_by_their_headers_only(small_site: Path) -> None:
    """cuRAND's 100 MiB library: its 13 fat binaries' headers are read, not their payloads (under 64 KiB)."""
    path = small_site / "nvidia/cu13/lib/libcurand.so.10"
    with path.open("rb") as fh:
        whole = Blob(fh, os.fstat(fh.fileno()).st_size)
        sections = co.elf_section_blobs(whole)
        found = cf.carried(sections)
        read = whole.bytes_read + sum(s.bytes_read for s in sections.values())
    assert path.stat().st_size > 90 << 20 and found.wrappers == 13
    assert 0 < read < 64 << 10, read


@offline
def test_real_wheels_agree_with_cuobjdump(small_site: Path, cuobjdump: Path) -> None:
    libs = [p for p in small_site.rglob("*.so*") if carried_by(p).loaded]
    assert len(libs) >= 4
    for path in libs:
        agree_with_cuobjdump(cuobjdump, path)


@pytest.mark.docker
@offline
def test_the_build_hook_fails_an_image_whose_required_library_lacks_a_requested_arch(
    small_site: Path, tmp_path: Path
) -> None:
    """The build's own hook (add_coverage, as `imagebuild build` runs it after BuildKit) on a real image holding
    CuPy's real cub module: required and asked for sm_110 it fails the target (exit 3 by raise_on_failure) with
    one line naming the library and what it carries, and adds no layer; asked for sm_90 + sm_121a it passes."""
    from test_coverage import component_manifest, image_with, result_for

    from imagebuild.building.buildkit import raise_on_failure
    from imagebuild.engine.docker import find_engine
    from imagebuild.errors import BuildFailed, ConfigError
    from imagebuild.prove.coverage import add_coverage

    try:
        engine = find_engine()
    except ConfigError as exc:
        pytest.skip(str(exc))
    cub = small_site / "cupy/cuda/cub.cpython-312-x86_64-linux-gnu.so"
    need = {"coverage-cuda": [Required.parse("cupy")]}
    tags = []
    try:
        for arches, ok in ((["sm_90", "sm_121a"], True), (["sm_90", "sm_110"], False)):
            tag = f"imagebuild-test/coverage:cuda31-{'ok' if ok else 'gap'}"
            tags.append(tag)
            image_id = image_with(engine, tag, {"cupy/cuda/cub.so": cub}, component_manifest("cuda", arches, {}))
            tags.append(image_id)  # ours alone (FROM the shared base + our layers): removed after the tags
            result = result_for("coverage-cuda", image_id, tag)
            add_coverage(engine, [result], REPO / "matrix.yaml", tmp_path / "build-report.json", need)
            if ok:
                assert result.ok and result.image_id != image_id, result.failed_step  # the coverage layer added
                continue
            assert not result.ok and result.image_id == image_id  # no layer on a failed image
            site = "/usr/local/lib/python3.11/dist-packages"
            assert result.failed_step == (
                f"arch coverage: {site}/cupy/cuda/cub.so has no sm_110 code (required (cupy) on every requested "
                "arch; it carries sm_75, sm_80, sm_86, sm_89, sm_90, sm_100f, sm_120f + PTX compute_120)"
            )
            with pytest.raises(BuildFailed) as info:
                raise_on_failure([result], tmp_path / "build-report.json")
            assert info.value.exit_code == 3 and "sm_110" in str(info.value)
    finally:
        for name in sorted(tags, key=lambda t: t.startswith("sha256:")):  # tags first, then the images left
            subprocess.run([engine.client, "rmi", "-f", name], capture_output=True, check=False)


# --- the serving stack itself (opt-in: 1.7 GB of wheels) ---------------------------------------------------


def stack_table(site: Path) -> dict[str, Any]:
    """The arch table of the unpacked stack, with paths relative to the site folder."""
    raw = scan_root(site, ",".join(ARCHES))
    return arch_table(raw["libraries"], ARCHES)


@pytest.mark.skipif(os.environ.get("IMAGEBUILD_BIG_WHEELS") != "1", reason="set IMAGEBUILD_BIG_WHEELS=1 (1.7 GB)")
def test_serving_stack_wheels_match_the_committed_table(tmp_path: Path) -> None:
    """torch 2.14.0, vLLM 0.33.0, NCCL 2.30.7, cuDNN 9.24.0.43 and the CUTLASS DSL 4.8.0: the table per library x
    arch, and the verdicts with torch, vLLM's two general extensions, NCCL and cuDNN required: sm_80..sm_121a pass;
    sm_75 fails naming torch's libtorch_cuda_linalg.so (it carries sm_80 and up); sm_110 (Thor) fails on cuDNN and
    torch. The CUTLASS DSL's libraries carry no device code (it compiles kernels at run time): no row of theirs."""
    golden = json.loads(GOLDEN.read_text())
    for pin in BIG:
        assert golden["wheels"][pin[2]] == pin[3]
        unpack(wheel(pin), tmp_path, re.compile(r"\.so(\.\d+)*$"))
    assert len(list((tmp_path / "nvidia_cutlass_dsl").rglob("*.so*"))) >= 2
    assert stack_table(tmp_path) == golden["table"]
    need = [Required.parse(r) for r in golden["required"]]
    for arches, verdict in golden["verdicts"].items():
        doc = judge(scan_root(tmp_path, arches), {}, "vllm-0.33.0-wheels", need)
        assert doc.ok == verdict["ok"] and (None if doc.ok else disallowed(doc)) == verdict["line"], arches
        assert sorted({f"{g.library} {g.arch}" for g in doc.gaps if g.allowed}) == verdict["optional_gaps"]
    assert golden["verdicts"]["sm_75,sm_80"]["line"].startswith(
        "arch coverage: /torch/lib/libtorch_cuda_linalg.so has no sm_75 code (required (torch)"
    )
