"""image/cross/cuda_home.py: the CUDA home a wheels-only CUDA image compiles our kernels in (issue 31 item 2).

The trees are laid out as the CUDA 13 wheels lay them out (site-packages/nvidia/cu13/{bin,include,lib,nvvm}); the
files are empty stand-ins (the real compile runs in the image build: bench/vllm_cuda_build.sh).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "image" / "cross" / "cuda_home.py"


def _tree(root: Path, files: list[str]) -> Path:
    for name in files:
        path = root / "nvidia" / "cu13" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{root.name}:{name}\n")
    return root


def _run(*args: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True, check=False)


def test_compiler_headers_win_and_the_venv_fills_in_libraries(tmp_path: Path) -> None:
    compiler = _tree(
        tmp_path / "compiler",
        [
            "bin/nvcc",
            "nvvm/bin/cicc",
            "include/crt/host_defines.h",
            "include/cccl/cuda/std/version",
            "include/cuda_runtime_api.h",
        ],
    )
    venv_site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    _tree(
        venv_site,
        [
            "bin/nvcc",
            "include/cuda_runtime_api.h",
            "include/crt/host_defines.h",
            "include/cublas_v2.h",
            "lib/libcudart.so.13",
            "lib/libcublas.so.13",
        ],
    )
    out = tmp_path / "home"
    done = _run(out, compiler, tmp_path / "venv")
    assert done.returncode == 0, done.stderr
    assert (out / "bin" / "nvcc").read_text() == "compiler:bin/nvcc\n"  # the pinned compiler, not the venv's nvcc
    assert (out / "nvvm" / "bin" / "cicc").exists()
    # torch's CUDA release headers come with the compiler set; what it lacks (cuBLAS) comes from the venv
    assert (out / "include" / "cuda_runtime_api.h").read_text() == "compiler:include/cuda_runtime_api.h\n"
    assert (out / "include" / "crt" / "host_defines.h").read_text().startswith("compiler:")
    assert (out / "include" / "cublas_v2.h").read_text() == "site-packages:include/cublas_v2.h\n"
    # the linker's -lcudart finds the versioned library the wheel ships
    assert (out / "lib" / "libcudart.so").resolve() == (venv_site / "nvidia" / "cu13" / "lib" / "libcudart.so.13")
    assert (out / "lib" / "libcublas.so").exists()


def test_a_compiler_set_without_nvcc_is_one_line_and_exit_2(tmp_path: Path) -> None:
    compiler = _tree(tmp_path / "compiler", ["include/cuda_runtime_api.h"])
    venv = _tree(tmp_path / "venv", ["include/cuda_runtime_api.h", "lib/libcudart.so.13"])
    done = _run(tmp_path / "home", compiler, venv)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "has no nvidia/cu*/bin/nvcc" in done.stderr
    assert not (tmp_path / "home").exists()  # nothing half made


def test_a_venv_without_the_cuda_runtime_is_refused(tmp_path: Path) -> None:
    compiler = _tree(tmp_path / "compiler", ["bin/nvcc"])
    venv = _tree(tmp_path / "venv", ["include/cublas_v2.h"])
    done = _run(tmp_path / "home", compiler, venv)
    assert done.returncode == 2 and "include/cuda_runtime_api.h" in done.stderr
