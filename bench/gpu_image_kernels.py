"""Issue 31 item 2 on the GPU machine: the kernels library compiled inside the cuda13.0-torch2.14 image (nvcc 13.0.88
from the wheels) carries code that runs on an H200.

The library was built against torch 2.14, which the GPU machine does not have (it has torch 2.11), so it is not
imported: its sm_90 cubin is taken out with NVIDIA's cuobjdump, loaded with the CUDA driver API (ctypes on
libcuda) and one SiLU-and-mul kernel of it is launched on torch 2.11 tensors, its result compared with
`silu(x[:, :d]) * x[:, d:]` from torch. The code-object list of NVIDIA's tool is compared with the in-image
verifier's kernels.json (the image's own record).

  python3 bench/gpu_image_kernels.py LIB.so KERNELS.json OUT.json
"""

from __future__ import annotations

import ctypes
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _cuobjdump(*args: str) -> str:
    return subprocess.run(["cuobjdump", *args], capture_output=True, text=True, check=True).stdout


def _elf_arches(lib: Path) -> list[str]:
    """sm_XX of every ELF entry cuobjdump lists (names like _C.1.sm_90.cubin)."""
    return sorted({m.group(1) for m in re.finditer(r"\.(sm_[0-9]+[af]?)\.cubin", _cuobjdump("--list-elf", str(lib)))})


def _check(result: int, what: str) -> None:
    if result != 0:
        raise RuntimeError(f"{what}: CUresult {result}")


def _launch_silu(cubin: bytes, out: dict) -> None:
    import torch
    import torch.nn.functional as F

    torch.cuda.init()
    torch.zeros(1, device="cuda")  # the primary context, current on this thread for the driver calls
    cuda = ctypes.CDLL("libcuda.so.1")
    module = ctypes.c_void_p()
    _check(cuda.cuModuleLoadData(ctypes.byref(module), ctypes.c_char_p(cubin)), "cuModuleLoadData")
    count = ctypes.c_uint()
    _check(cuda.cuModuleGetFunctionCount(ctypes.byref(count), module), "cuModuleGetFunctionCount")
    funcs = (ctypes.c_void_p * count.value)()
    _check(cuda.cuModuleEnumerateFunctions(funcs, count, module), "cuModuleEnumerateFunctions")
    names = []
    for f in funcs:
        name = ctypes.c_char_p()
        _check(cuda.cuFuncGetName(ctypes.byref(name), ctypes.c_void_p(f)), "cuFuncGetName")
        names.append((name.value.decode(), f))
    out.setdefault("functions_per_sm_90_cubin", []).append(len(names))
    # silu_and_mul_flat_kernel<float, VEC, UNROLL>(float* out, const float* x, uint32_t nv, uint32_t total)
    flat = [(n, f) for n, f in names if re.search(r"silu_and_mul_flat_kernelIfLi(\d+)ELi(\d+)E", n)]
    if not flat:
        raise RuntimeError(f"no float flat SiLU kernel among {len(names)} functions")
    name, func = flat[0]
    vec, unroll = (int(g) for g in re.search(r"silu_and_mul_flat_kernelIfLi(\d+)ELi(\d+)E", name).groups())
    tokens, d = 4096, 4096  # d a multiple of VEC; x is 128 MiB, over the H200 L2
    x = torch.randn(tokens, 2 * d, device="cuda", dtype=torch.float32)
    y = torch.empty(tokens, d, device="cuda", dtype=torch.float32)
    nv, total, block = d // vec, tokens * (d // vec), 256
    grid = (total + block * unroll - 1) // (block * unroll)
    args = [ctypes.c_uint64(y.data_ptr()), ctypes.c_uint64(x.data_ptr()), ctypes.c_uint32(nv), ctypes.c_uint32(total)]
    params = (ctypes.c_void_p * len(args))(*[ctypes.cast(ctypes.byref(a), ctypes.c_void_p) for a in args])
    torch.cuda.synchronize()
    start = time.perf_counter()
    _check(cuda.cuLaunchKernel(ctypes.c_void_p(func), grid, 1, 1, block, 1, 1, 0, None, params, None), "cuLaunchKernel")
    torch.cuda.synchronize()
    want = F.silu(x[:, :d]) * x[:, d:]
    out["launched"] = {
        "kernel": name,
        "vec": vec,
        "unroll": unroll,
        "shape": [tokens, 2 * d],
        "grid": grid,
        "block": block,
        "first_launch_s": round(time.perf_counter() - start, 4),
        "max_abs_diff_vs_torch": float((y - want).abs().max()),
        "allclose_rtol_1e-5_atol_1e-6": bool(torch.allclose(y, want, rtol=1e-5, atol=1e-6)),
        "gpu": torch.cuda.get_device_name(),
        "torch_here": torch.__version__,
    }


def main(lib: Path, kernels_json: Path, out_path: Path) -> int:
    out: dict = {"library": lib.name, "bytes": lib.stat().st_size}
    recorded = json.loads(kernels_json.read_text())
    out["kernels_json"] = {k: recorded.get(k) for k in ("requested", "code_objects", "ptx")}
    out["cuobjdump_elf_arches"] = _elf_arches(lib)
    out["cuobjdump_ptx"] = sorted(set(re.findall(r"compute_[0-9]+[af]?", _cuobjdump("--list-ptx", str(lib)))))
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["cuobjdump", "-xelf", "all", str(lib.resolve())], cwd=tmp, check=True, capture_output=True)
        cubins = sorted(Path(tmp).glob("*sm_90.cubin"))
        out["sm_90_cubins"] = [c.name for c in cubins]
        errors = []
        for cubin in cubins:  # one per compiled file: the SiLU kernels are in ops.cu's
            try:
                _launch_silu(cubin.read_bytes(), out)
                out["launched"]["cubin"] = cubin.name
                break
            except Exception as exc:  # recorded, not hidden: the result file says what failed
                errors.append(f"{cubin.name}: {type(exc).__name__}: {exc}")
        out["launch_errors"] = errors
    out_path.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))
    ok = out.get("launched", {}).get("allclose_rtol_1e-5_atol_1e-6", False)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])))
