"""Build the CUDA/HIP extension with torch.utils.cpp_extension, or nothing for a CPU-only install.

The arch list must be given (PYTORCH_ROCM_ARCH / TORCH_CUDA_ARCH_LIST): torch would otherwise build for the
GPUs of the build machine, and an image build has none.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from setuptools import setup

HERE = Path(__file__).resolve().parent


def _fail(msg: str) -> None:
    sys.stderr.write(f"error: imagebuild_kernels: {msg}\n")
    raise SystemExit(2)


def _mode() -> str:
    """'cpu' (no compilation), 'cuda' or 'rocm', from IMAGEBUILD_KERNELS_CPU_ONLY and the installed torch."""
    if os.environ.get("IMAGEBUILD_KERNELS_CPU_ONLY", "") == "1":
        return "cpu"
    try:
        import torch
    except ImportError:
        _fail(
            "torch is not importable in the build environment: install with `pip install --no-build-isolation` "
            "next to the image's torch, or set IMAGEBUILD_KERNELS_CPU_ONLY=1 for a CPU-only install"
        )
    if getattr(torch.version, "hip", None):
        return "rocm"
    if getattr(torch.version, "cuda", None):
        return "cuda"
    return "cpu"


def _ext_modules(mode: str) -> list:
    if mode == "cpu":
        return []
    var = "PYTORCH_ROCM_ARCH" if mode == "rocm" else "TORCH_CUDA_ARCH_LIST"
    if not os.environ.get(var, "").strip():
        _fail(f"{var} is not set: give the resolved arch list (a build never autodetects)")
    from torch.utils.cpp_extension import CUDAExtension

    return [
        CUDAExtension(
            "imagebuild_kernels._C",
            ["csrc/ops.cu", "csrc/skinny_launch_f16.cu", "csrc/skinny_launch_bf16.cu"],
            include_dirs=[str(HERE / "csrc")],
            # no -std: torch.utils.cpp_extension adds the standard its headers need when none is given (C++17 for
            # torch 2.3, C++20 for 2.14, whose ATen.h stops a C++17 build with "#error C++20 or later")
            extra_compile_args={"cxx": ["-O3"], "nvcc": ["-O3"]},
        )
    ]


MODE = _mode()
_cmdclass = {}
if MODE != "cpu":
    from torch.utils.cpp_extension import BuildExtension

    _cmdclass["build_ext"] = BuildExtension

setup(ext_modules=_ext_modules(MODE), cmdclass=_cmdclass)
