#!/usr/bin/env python3
"""Assemble a CUDA home from wheels (issue 31 item 2), so torch.utils.cpp_extension compiles a component with nvcc.

A CUDA platform of wheels has no toolkit folder: the CUDA 13 wheels install into one tree, site-packages/nvidia/cu13
(bin/, include/, lib/, nvvm/), and the venv's nvcc (whatever a runtime pulled in, vLLM 0.33: 13.5) need not match
the CUDA release torch was built with (13.0; CCCL then stops the compile with "CUDA compiler and CUDA toolkit
headers are incompatible"). So the compiler comes from its own pinned set (matrix.yaml platforms.<p>.cuda_compiler,
placed in COMPILER), and the home is links: bin/ and nvvm/ of the compiler, include/ with the compiler's entries
first and the venv's library headers (cuda_runtime, cuBLAS, cuSPARSE, ...: torch's own versions) after, lib/ with
the venv's libraries plus the unversioned names the linker asks for (-lcudart -> libcudart.so.13).

Usage: cuda_home.py OUT COMPILER VENV   (COMPILER and VENV are site-packages folders or a venv root)
Stdlib only: it runs in the image's build stage before anything is installed. Exit 2 with one line when a part
is missing.
"""

from __future__ import annotations

import glob
import os
import re
import sys
from pathlib import Path


def _fail(message: str) -> None:
    print(f"error: cuda_home: {message}", file=sys.stderr)
    sys.exit(2)


def _cuda_tree(root: Path, what: str, need: str) -> Path:
    """The nvidia/cu<N> folder under root (a site-packages or a venv) that holds need."""
    found = sorted(glob.glob(str(root / "nvidia" / "cu*" / need)))
    found += sorted(glob.glob(str(root / "lib" / "python3*" / "site-packages" / "nvidia" / "cu*" / need)))
    if not found:
        _fail(f"{what} {root} has no nvidia/cu*/{need}")
    return Path(found[0]).parents[len(Path(need).parts) - 1]


def _link_entries(source: Path, dest: Path) -> None:
    """Link every entry of source into dest, keeping what dest already has."""
    if not source.is_dir():
        return
    for entry in sorted(source.iterdir()):
        target = dest / entry.name
        if not target.exists() and not target.is_symlink():
            target.symlink_to(entry)


def assemble(out: Path, compiler_root: Path, venv_root: Path) -> Path:
    """Build the CUDA home at out; returns the compiler's nvcc."""
    compiler = _cuda_tree(compiler_root, "compiler set", "bin/nvcc")
    libraries = _cuda_tree(venv_root, "venv", "include/cuda_runtime_api.h")
    if out.exists():
        _fail(f"{out} exists: give a new folder")
    for sub in ("include", "lib"):
        (out / sub).mkdir(parents=True)
    (out / "bin").symlink_to(compiler / "bin")
    if (compiler / "nvvm").is_dir():
        (out / "nvvm").symlink_to(compiler / "nvvm")
    _link_entries(compiler / "include", out / "include")
    _link_entries(libraries / "include", out / "include")
    _link_entries(libraries / "lib", out / "lib")
    _link_entries(compiler / "lib", out / "lib")
    for versioned in sorted((out / "lib").iterdir()):
        match = re.fullmatch(r"(lib[A-Za-z0-9_+-]+\.so)\.[0-9]+", versioned.name)
        if match and not (out / "lib" / match.group(1)).exists():
            (out / "lib" / match.group(1)).symlink_to(versioned.name)
    if not (out / "lib" / "libcudart.so").exists():
        _fail(f"venv {venv_root} has no libcudart.so.* under {libraries / 'lib'}")
    return out / "bin" / "nvcc"


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        _fail("usage: cuda_home.py OUT COMPILER VENV")
    nvcc = assemble(Path(argv[0]), Path(argv[1]), Path(argv[2]))
    print(f"cuda_home: {argv[0]}: nvcc {os.path.realpath(nvcc)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
