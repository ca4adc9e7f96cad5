"""The arch tables complete from LLVM's lists (issue 24): every EF_AMDGPU_MACH value of AMDGCN (gfx6-gfx8, gfx950,
gfx12, generic targets) decodes to its processor, CUDA targets through sm_120/sm_120a and torch's spellings parse,
and `imagebuild arches` says why a platform's toolchain cannot build one."""

from __future__ import annotations

import struct

import pytest

from imagecontract import targets as T
from imagecontract.amdgpu_elf import MACH_NAMES, amdgpu_target


def code_object(mach: int, abi_version: int = 2, xnack: int = 0, sramecc: int = 0) -> bytes:
    """The first 64 bytes of an AMDGPU ELF (HSA OS ABI) whose e_flags carry `mach` and v4 feature settings."""
    ident = b"\x7fELF" + bytes([2, 1, 1, 64, abi_version]) + bytes(7)
    flags = mach | (xnack << 8) | (sramecc << 10)
    return ident + struct.pack("<HHIQQQIHHHHHH", 3, 224, 1, 0, 0, 0, flags, 64, 0, 0, 64, 0, 0)


# Values as LLVM's AMDGPU_MACH_LIST gives them (ROCm/llvm-project@06c62775, llvm/include/llvm/BinaryFormat/ELF.h).
LLVM_VALUES = {
    "gfx600": 0x020,
    "gfx705": 0x03B,
    "gfx801": 0x028,
    "gfx803": 0x02A,
    "gfx810": 0x02B,
    "gfx90a": 0x03F,
    "gfx942": 0x04C,
    "gfx950": 0x04F,
    "gfx1152": 0x055,
    "gfx1200": 0x048,
    "gfx1201": 0x04E,
    "gfx1250": 0x049,
    "gfx12-generic": 0x059,
    "gfx9-4-generic": 0x05F,
}


@pytest.mark.parametrize(("name", "mach"), sorted(LLVM_VALUES.items()))
def test_llvm_values_decode(name: str, mach: int) -> None:
    assert MACH_NAMES[mach] == name
    assert amdgpu_target(code_object(mach)) == name


def test_every_amdgcn_value_from_0x20_up_is_named_or_reserved() -> None:
    reserved = {0x027, 0x04D, 0x056, 0x057, 0x05C, 0x05E}  # reserved in LLVM (0x05c/0x05e: no processor yet)
    named = {m for m in range(0x020, 0x060) if m not in reserved}
    assert named <= set(MACH_NAMES), sorted(hex(m) for m in named - set(MACH_NAMES))
    for name in MACH_NAMES.values():
        assert name in T.AMD_FEATURES, name  # every decoded processor is a target the host accepts
        assert T.parse_target(name).processor == name


def test_gfx803_from_rocblas_5_5_is_no_longer_unknown() -> None:
    """rocBLAS 5.5's kernel folder read as `amdgcn-mach-0x2a`, absent (issue 24)."""
    assert amdgpu_target(code_object(0x02A)) == "gfx803"
    assert amdgpu_target(code_object(0x0A0)) == "amdgcn-mach-0xa0"  # an unknown value still shows, never matches


def test_gfx950_features_v4() -> None:
    assert amdgpu_target(code_object(0x04F, xnack=2, sramecc=3)) == "gfx950:sramecc+:xnack-"
    assert T.parse_target("gfx950:xnack-:sramecc+").id == "gfx950:sramecc+:xnack-"
    with pytest.raises(T.TargetError, match="gfx1201 takes: none"):
        T.parse_target("gfx1201:xnack+")


def test_generic_code_objects_load_on_their_members_only() -> None:
    assert T.loads_on("gfx11-generic", "gfx1100")
    assert T.loads_on("gfx11-generic", "gfx1151")
    assert not T.loads_on("gfx11-generic", "gfx1200")
    assert T.loads_on("gfx9-4-generic:xnack-", "gfx950:sramecc+:xnack-")
    assert not T.loads_on("gfx9-4-generic:xnack-", "gfx942:sramecc+:xnack+")
    assert not T.loads_on("gfx9-generic", "gfx90a")  # gfx90a is not a gfx9-generic member


@pytest.mark.parametrize(
    ("spec", "ids"),
    [
        ("sm_120", ["sm_120"]),
        ("sm_120a", ["sm_120a"]),
        ("12.0a", ["sm_120a"]),
        ("10.0a;10.3", ["sm_100a", "sm_103"]),
        ("sm_110", ["sm_110"]),
        ("Blackwell", ["sm_100", "sm_103", "sm_120", "sm_121+PTX"]),
        ("Blackwell+Tegra", ["sm_110"]),
        ("Maxwell", ["sm_50", "sm_52+PTX"]),
    ],
)
def test_cuda_targets_through_blackwell(spec: str, ids: list[str]) -> None:
    assert [t.id for t in T.parse_list(spec)] == ids


def test_torch_spelling_of_every_sm_it_accepts() -> None:
    for sm, capability in T.NVIDIA_SMS.items():
        if capability in T.TORCH_CUDA_ARCHES:
            assert T.parse_target(capability).processor == sm
    assert "10.1" not in T.TORCH_CUDA_ARCHES and "12.0a" in T.TORCH_CUDA_ARCHES


@pytest.mark.parametrize(
    ("target", "version", "gap"),
    [
        ("sm_100", "12.1", "sm_100 needs CUDA >= 12.8; CUDA 12.1's nvcc has no sm_100"),
        ("sm_120a", "12.8", None),
        ("sm_121", "12.8", "sm_121 needs CUDA >= 12.9"),
        ("sm_110", "12.9", "sm_110 needs CUDA >= 13.0"),
        ("sm_70", "13.0", "CUDA 13.0 dropped sm_70 (the last toolkit with it is CUDA 12.9)"),
        ("sm_101", "12.8", "torch's TORCH_CUDA_ARCH_LIST does not accept 10.1 (sm_101)"),
        ("sm_88", "13.0", "no CUDA toolkit known here builds sm_88"),
        ("sm_90", "12.1", None),
    ],
)
def test_toolchain_gap(target: str, version: str, gap: str | None) -> None:
    found = T.toolchain_gap(T.parse_target(target), "nvidia", version)
    assert found == gap if gap is None else (found or "").startswith(gap), found


def test_arches_says_why_the_platform_cannot_build_it(cli) -> None:
    res = cli("arches", "cuda12.1-torch2.3", "--arch", "sm_120")
    assert res.exit_code == 2
    assert "sm_120 needs CUDA >= 12.8; CUDA 12.1's nvcc has no sm_120" in res.stderr
    res = cli("arches", "rocm6.1-torch2.3", "--arch", "gfx950")
    assert res.exit_code == 2 and "not an arch of target rocm6.1-torch2.3's platform" in res.stderr
    assert "unknown GPU target" not in res.stderr  # a real target: known, but not built by this platform
