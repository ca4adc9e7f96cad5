"""Op schemas of the `imagebuild` torch library, with CPU and fake (meta) implementations.

The schemas live here, not in C++, so a CPU-only install (no compiler, IMAGEBUILD_KERNELS_CPU_ONLY=1) still has
the ops; the compiled extension `_C` only adds the CUDA (HIP on ROCm) implementations.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from imagebuild_kernels import _checks

LIB = torch.library.Library("imagebuild", "DEF")  # module-level: the library must outlive every caller
SCHEMAS = {
    "silu_and_mul": "silu_and_mul(Tensor x) -> Tensor",
    "silu_and_mul_out": "silu_and_mul_out(Tensor(a!) out, Tensor x) -> ()",
    "skinny_linear": "skinny_linear(Tensor x, Tensor weight, Tensor? bias=None) -> Tensor",
    # Benchmark hooks: the same kernels with an explicit launch configuration (0 = the default choice).
    "_silu_and_mul_cfg": "_silu_and_mul_cfg(Tensor(a!) out, Tensor x, int cfg) -> ()",
    "_skinny_linear_cfg": "_skinny_linear_cfg(Tensor x, Tensor weight, Tensor? bias, int cfg) -> Tensor",
    # The measured dispatch table (rows: dtype, N, K, M, cfg) and what it picks for one call (-1: F.linear).
    "_skinny_set_table": "_skinny_set_table(Tensor rows, int cc, int sm_count) -> ()",
    "_skinny_choice": "_skinny_choice(Tensor x, Tensor weight) -> int",
}
for _schema in SCHEMAS.values():
    LIB.define(_schema)

# torch >= 2.4 names it register_fake; the torch 2.3 images have the same thing as impl_abstract.
_register_fake = getattr(torch.library, "register_fake", None) or torch.library.impl_abstract


def _silu_ref(x: torch.Tensor) -> torch.Tensor:
    d = x.shape[-1] // 2
    xf = x.float()
    return (F.silu(xf[..., :d]) * xf[..., d:]).to(x.dtype)


def silu_and_mul_cpu(x: torch.Tensor) -> torch.Tensor:
    _checks.silu_out_shape(x)
    return _silu_ref(x)


def silu_and_mul_out_cpu(out: torch.Tensor, x: torch.Tensor) -> None:
    _checks.check_silu_out(out, x)
    out.copy_(_silu_ref(x))


def silu_and_mul_cfg_cpu(out: torch.Tensor, x: torch.Tensor, cfg: int) -> None:
    silu_and_mul_out_cpu(out, x)


def skinny_linear_cpu(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    _checks.linear_out_shape(x, weight, bias)
    b = None if bias is None else bias.float()
    return F.linear(x.float(), weight.float(), b).to(x.dtype)


def skinny_linear_cfg_cpu(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, cfg: int) -> torch.Tensor:
    return skinny_linear_cpu(x, weight, bias)


for _name, _fn in {
    "silu_and_mul": silu_and_mul_cpu,
    "silu_and_mul_out": silu_and_mul_out_cpu,
    "skinny_linear": skinny_linear_cpu,
    "_silu_and_mul_cfg": silu_and_mul_cfg_cpu,
    "_skinny_linear_cfg": skinny_linear_cfg_cpu,
}.items():
    LIB.impl(_name, _fn, "CPU")


@_register_fake("imagebuild::silu_and_mul", lib=LIB)
def _silu_and_mul_fake(x: torch.Tensor) -> torch.Tensor:
    return x.new_empty(_checks.silu_out_shape(x))


@_register_fake("imagebuild::silu_and_mul_out", lib=LIB)
def _silu_and_mul_out_fake(out: torch.Tensor, x: torch.Tensor) -> None:
    _checks.check_silu_out(out, x)


@_register_fake("imagebuild::_silu_and_mul_cfg", lib=LIB)
def _silu_and_mul_cfg_fake(out: torch.Tensor, x: torch.Tensor, cfg: int) -> None:
    _checks.check_silu_out(out, x)


@_register_fake("imagebuild::skinny_linear", lib=LIB)
def _skinny_linear_fake(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    return x.new_empty(_checks.linear_out_shape(x, weight, bias))


@_register_fake("imagebuild::_skinny_linear_cfg", lib=LIB)
def _skinny_linear_cfg_fake(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, cfg: int) -> torch.Tensor:
    return x.new_empty(_checks.linear_out_shape(x, weight, bias))


def register_missing_device_kernels(reason: str) -> None:
    """Without the compiled extension, GPU tensors get a clear error instead of the dispatcher's."""

    def _no_kernel(*args: object, **kwargs: object) -> None:
        raise RuntimeError(f"imagebuild_kernels has no GPU kernels in this install: {reason}")

    for name in SCHEMAS:
        LIB.impl(name, _no_kernel, "CUDA")
