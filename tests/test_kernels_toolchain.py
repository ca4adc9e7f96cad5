"""The device code compiles for every arch we ship, and the built binaries hold exactly the requested code objects.

Needs no GPU: clang-19 builds HIP for gfx908/gfx90a/gfx942, nvcc builds sm_80/sm_90 (and PTX). Our listing is
cross-checked against roc-obj-ls (the ROCm tool) where it is installed. Skipped, with the reason, only when a
compiler is absent; .ci/run installs both.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from imagebuild.cli import main
from imagecontract import codeobjects as co

TOOL = Path(__file__).resolve().parents[1] / "kernels" / "tools" / "compile_device_check.py"
_spec = importlib.util.spec_from_file_location("compile_device_check", TOOL)
assert _spec and _spec.loader
cdc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cdc)

pytestmark = pytest.mark.toolchain
needs_hip = pytest.mark.skipif(cdc.hip_available() is not None, reason=f"HIP toolchain: {cdc.hip_available()}")
needs_nvcc = pytest.mark.skipif(cdc.cuda_available() is not None, reason=f"CUDA toolchain: {cdc.cuda_available()}")

GFX = ["gfx908", "gfx90a", "gfx942"]


@pytest.fixture(scope="module")
def bitcode(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Debian's ROCm bitcode plus the generated oclc_isa_version_942.bc."""
    return cdc.device_lib_dir(tmp_path_factory.mktemp("bitcode"))


@pytest.fixture(scope="module")
def hip_build(tmp_path_factory: pytest.TempPathFactory, bitcode: Path) -> Path:
    return cdc.compile_hip(GFX, tmp_path_factory.mktemp("hip") / "device_check_hip.so", libdir=bitcode)


@pytest.fixture(scope="module")
def cuda_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return cdc.compile_cuda(["sm_80", "sm_90"], tmp_path_factory.mktemp("cuda") / "device_check_cuda.so")


def verify(path: Path, arch: str) -> tuple[int, str]:
    res = CliRunner().invoke(main, ["kernels", "verify", str(path), "--arch", arch])
    return res.exit_code, res.output


@needs_hip
def test_hip_build_holds_exactly_the_requested_gfx(hip_build: Path) -> None:
    assert co.list_code_objects(hip_build).code_objects == GFX
    assert verify(hip_build, "gfx908;gfx90a;gfx942")[0] == 0
    assert verify(hip_build, "gfx908 gfx90a gfx942:sramecc+:xnack-")[0] == 0  # compared on processor names


@needs_hip
def test_hip_wrong_request_is_caught(hip_build: Path) -> None:
    code, out = verify(hip_build, "gfx90a;gfx942")
    assert code == 1
    assert "not requested gfx908" in out
    code, out = verify(hip_build, "gfx908;gfx90a;gfx942;gfx1100")
    assert code == 1
    assert "missing gfx1100" in out


@needs_hip
@pytest.mark.skipif(shutil.which("roc-obj-ls") is None, reason="roc-obj-ls not installed (Debian package hipcc)")
def test_hip_listing_agrees_with_roc_obj_ls(hip_build: Path) -> None:
    text = subprocess.run(["roc-obj-ls", str(hip_build)], capture_output=True, text=True, check=True).stdout
    theirs = sorted(m.group(1) for m in re.finditer(r"amdgcn-amd-amdhsa--(\S+)", text))
    assert theirs == GFX
    assert co.list_code_objects(hip_build).code_objects == theirs


@needs_hip
def test_hip_compressed_bundle(tmp_path: Path, bitcode: Path) -> None:
    out = cdc.compile_hip(["gfx90a", "gfx942"], tmp_path / "c.so", compress=True, libdir=bitcode)
    section = co.elf_sections(out.read_bytes())[".hip_fatbin"]
    assert section.startswith(co.CCOB_MAGIC), "clang did not compress the bundle"
    zstd_method = int.from_bytes(section[6:8], "little") == 1
    if zstd_method and not (shutil.which("zstd") or importlib.util.find_spec("zstandard")):
        pytest.skip("zstd-compressed bundle, and neither the zstd command nor the zstandard package is installed")
    assert co.list_code_objects(out).code_objects == ["gfx90a", "gfx942"]


@needs_nvcc
def test_cuda_build_holds_exactly_the_requested_sm(cuda_build: Path) -> None:
    listing = co.list_code_objects(cuda_build)
    assert listing.code_objects == ["sm_80", "sm_90"]
    assert listing.ptx == []
    assert verify(cuda_build, "8.0;9.0")[0] == 0
    assert verify(cuda_build, "sm_80,sm_90")[0] == 0


@needs_nvcc
def test_cuda_wrong_request_is_caught(cuda_build: Path) -> None:
    code, out = verify(cuda_build, "9.0")
    assert code == 1 and "not requested sm_80" in out
    code, out = verify(cuda_build, "8.0;9.0+PTX")
    assert code == 1 and "missing compute_90" in out


@needs_nvcc
def test_cuda_ptx_is_listed_separately(tmp_path: Path) -> None:
    out = cdc.compile_cuda(["sm_90", "compute_90"], tmp_path / "ptx.so")
    listing = co.list_code_objects(out)
    assert listing.code_objects == ["sm_90"]
    assert listing.ptx == ["compute_90"]
    assert verify(out, "9.0+PTX")[0] == 0
