"""Compile the device code alone (kernels/tools/device_check.cu, no torch) for given GPU arches, without a GPU.

HIP: clang-19 with one --offload-arch per gfx target and a device-lib folder holding Debian's ROCm bitcode plus
an `oclc_isa_version_942.bc` made from the gfx940 one (Debian's ROCm 5.2 lacks it). CUDA: nvcc, one -gencode per
sm target (`+PTX` / compute_XX adds PTX). Used by tests/test_kernels_toolchain.py and by hand:
    python3 kernels/tools/compile_device_check.py --hip gfx908,gfx90a,gfx942 --out /tmp/hip.so
    python3 kernels/tools/compile_device_check.py --cuda sm_80,sm_90 --out /tmp/cuda.so
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SOURCE = Path(__file__).resolve().parent / "device_check.cu"
LLVM = Path(os.environ.get("IMAGEBUILD_LLVM_BIN", "/usr/lib/llvm-19/bin"))
BITCODE = Path(os.environ.get("IMAGEBUILD_ROCM_BITCODE", "/usr/lib/x86_64-linux-gnu/amdgcn/bitcode"))
NVCC = Path(os.environ.get("IMAGEBUILD_NVCC", "/usr/local/cuda/bin/nvcc"))


def hip_available() -> str | None:
    """None when the HIP toolchain is usable, else why not."""
    for tool in ("clang++", "llvm-dis", "llvm-as"):
        if not (LLVM / tool).exists():
            return f"{LLVM / tool} not found (Debian packages clang-19 llvm-19)"
    if not (BITCODE / "oclc_isa_version_940.bc").exists():
        return f"{BITCODE} has no ROCm device bitcode (Debian package rocm-device-libs)"
    if not Path("/usr/include/hip/hip_runtime.h").exists():
        return "HIP headers not found (Debian package libamdhip64-dev)"
    return None


def cuda_available() -> str | None:
    return None if NVCC.exists() else f"{NVCC} not found"


def device_lib_dir(dest: Path) -> Path:
    """Debian's bitcode plus oclc_isa_version_942.bc (the gfx940 constant 9400 changed to 9402)."""
    dest.mkdir(parents=True, exist_ok=True)
    for bc in BITCODE.glob("*.bc"):
        shutil.copy2(bc, dest / bc.name)
    if not (dest / "oclc_isa_version_942.bc").exists():
        text = subprocess.run(
            [str(LLVM / "llvm-dis"), str(BITCODE / "oclc_isa_version_940.bc"), "-o", "-"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        patched, n = re.subn(r"\bi32 9400\b", "i32 9402", text)
        if n == 0:
            raise RuntimeError("oclc_isa_version_940.bc holds no 'i32 9400' constant to patch")
        subprocess.run(
            [str(LLVM / "llvm-as"), "-", "-o", str(dest / "oclc_isa_version_942.bc")],
            input=patched,
            check=True,
            text=True,
        )
    return dest


def compile_hip(arches: list[str], out: Path, *, compress: bool = False, libdir: Path | None = None) -> Path:
    with tempfile.TemporaryDirectory() as tmp:
        lib = libdir or device_lib_dir(Path(tmp) / "bitcode")
        cmd = [str(LLVM / "clang++"), "-x", "hip", "-std=c++17", "-O2", "-fPIC", "-shared", "-D__HIP_PLATFORM_AMD__"]
        cmd += [f"--offload-arch={a}" for a in arches]
        cmd += ["--rocm-path=/usr", f"--rocm-device-lib-path={lib}", str(SOURCE), "-o", str(out)]
        if compress:
            cmd.insert(1, "--offload-compress")
        subprocess.run(cmd, check=True, env={**os.environ, "HIP_PLATFORM": "amd"})
    return out


def compile_cuda(arches: list[str], out: Path) -> Path:
    """arches: sm_XX (machine code) or compute_XX (PTX)."""
    cmd = [str(NVCC), "-std=c++17", "-O2", "-shared", "-Xcompiler", "-fPIC"]
    for a in arches:
        num = a.split("_", 1)[1]
        code = f"sm_{num}" if a.startswith("sm_") else f"compute_{num}"
        cmd += ["-gencode", f"arch=compute_{num},code={code}"]
    subprocess.run([*cmd, str(SOURCE), "-o", str(out)], check=True)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--hip", help="comma-separated gfx targets")
    group.add_argument("--cuda", help="comma-separated sm_XX / compute_XX targets")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--compress", action="store_true", help="HIP: compressed offload bundle")
    args = parser.parse_args()
    why = hip_available() if args.hip else cuda_available()
    if why:
        print(f"error: {why}", file=sys.stderr)
        return 2
    if args.hip:
        compile_hip(args.hip.split(","), args.out, compress=args.compress)
    else:
        compile_cuda(args.cuda.split(","), args.out)
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
