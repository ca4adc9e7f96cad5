"""imagebuild_kernels without a GPU: op registration, CPU numerics, fake (meta) implementations, input errors,
torch.compile, and a CPU-only `pip install ./kernels` that compiles nothing."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

KERNELS = Path(__file__).resolve().parents[1] / "kernels"
if importlib.util.find_spec("imagebuild_kernels") is None:  # not installed: the source tree has the CPU ops
    sys.path.insert(0, str(KERNELS))
import imagebuild_kernels as k  # noqa: E402

REL_TOL = {torch.float32: 1e-6, torch.float16: 1e-3, torch.bfloat16: 8e-3}


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    assert not torch.isnan(out).any()
    return ((out.double() - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def silu_ref(x: torch.Tensor) -> torch.Tensor:
    d = x.shape[-1] // 2
    xd = x.double()
    return torch.nn.functional.silu(xd[..., :d]) * xd[..., d:]


def test_ops_are_registered_under_their_names() -> None:
    assert callable(torch.ops.imagebuild.silu_and_mul)
    assert callable(torch.ops.imagebuild.skinny_linear)
    assert callable(torch.ops.imagebuild.silu_and_mul_out)
    assert {"silu_and_mul", "skinny_linear"} <= set(k.__all__)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", [(0, 16), (1, 2), (1, 14), (3, 26), (7, 2002), (2, 3, 48)])
def test_silu_and_mul_cpu_matches_float64(dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    x = torch.randn(shape, dtype=dtype) * 3
    got = torch.ops.imagebuild.silu_and_mul(x)
    assert got.shape == (*shape[:-1], shape[-1] // 2) and got.dtype == dtype
    if got.numel():
        assert rel_err(got, silu_ref(x)) < REL_TOL[dtype]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_silu_and_mul_out_writes_the_given_tensor(dtype: torch.dtype) -> None:
    x = torch.randn(5, 2 * 13, dtype=dtype)
    out = torch.full((5, 13), float("nan"), dtype=dtype)
    assert k.silu_and_mul(x, out=out) is out
    assert rel_err(out, silu_ref(x)) < REL_TOL[dtype]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("m", [1, 7, 8, 9])
def test_skinny_linear_cpu_matches_float64(dtype: torch.dtype, m: int) -> None:
    x = torch.randn(m, 40, dtype=dtype)
    w = torch.randn(17, 40, dtype=dtype) * 40**-0.5
    b = torch.randn(17, dtype=dtype)
    assert rel_err(k.skinny_linear(x, w), x.double() @ w.double().T) < REL_TOL[dtype]
    ref = x.double() @ w.double().T + b.double()
    assert rel_err(k.skinny_linear(x, w, b), ref) < REL_TOL[dtype]


SILU_ERRORS = [
    (lambda: k.silu_and_mul(torch.randn(4, 16, dtype=torch.float64)), "expected x of dtype float16, bfloat16"),
    (lambda: k.silu_and_mul(torch.randn(4, 15)), r"last dim even\), got \[4, 15\]"),
    (lambda: k.silu_and_mul(torch.randn(16, 4).T), r"expected a contiguous x, got strides \[1, 4\]"),
    (lambda: k.silu_and_mul(torch.randn(4, 16), out=torch.empty(4, 16)), r"expected out of shape \[4, 8\]"),
    (lambda: k.silu_and_mul(torch.randn(4, 16), out=torch.empty(4, 8, dtype=torch.float16)), "out of dtype Float"),
    (lambda: k.silu_and_mul(torch.randn(4, 16), out=torch.empty(8, 4).T), "expected a contiguous out"),
]
LINEAR_ERRORS = [
    (lambda: k.skinny_linear(torch.randn(2, 8), torch.randn(4, 8)), "expected x of dtype float16 or bfloat16"),
    (
        lambda: k.skinny_linear(torch.randn(2, 8, dtype=torch.half), torch.randn(4, 8, dtype=torch.bfloat16)),
        "expected weight of dtype Half, got BFloat16",
    ),
    (lambda: k.skinny_linear(torch.randn(2, 8).half(), torch.randn(4, 6).half()), r"weight of shape \[N, 8\]"),
    (lambda: k.skinny_linear(torch.randn(2, 2, 8).half(), torch.randn(4, 8).half()), r"shape \[M, K\]"),
    (lambda: k.skinny_linear(torch.randn(8, 2).half().T, torch.randn(4, 8).half()), "expected a contiguous x"),
    (
        lambda: k.skinny_linear(torch.randn(2, 8).half(), torch.randn(4, 8).half(), torch.randn(5).half()),
        r"expected bias of shape \[4\], got \[5\]",
    ),
]


@pytest.mark.parametrize(("call", "message"), SILU_ERRORS + LINEAR_ERRORS)
def test_bad_input_gives_one_clear_error(call, message: str) -> None:
    with pytest.raises(ValueError, match=message) as info:
        call()
    assert str(info.value).startswith("imagebuild::")


@pytest.mark.skipif(k.HAS_DEVICE_KERNELS, reason="this install has the compiled extension")
def test_library_path_without_extension_is_a_clear_error() -> None:
    with pytest.raises(RuntimeError, match="installed CPU-only"):
        k.library_path()


def test_fake_implementations_give_shapes_without_data() -> None:
    x = torch.empty(6, 2 * 24, device="meta", dtype=torch.bfloat16)
    assert torch.ops.imagebuild.silu_and_mul(x).shape == (6, 24)
    w = torch.empty(100, 24, device="meta", dtype=torch.bfloat16)
    out = torch.ops.imagebuild.skinny_linear(torch.empty(3, 24, device="meta", dtype=torch.bfloat16), w)
    assert out.shape == (3, 100) and out.device.type == "meta"
    with pytest.raises(ValueError, match="last dim even"):
        torch.ops.imagebuild.silu_and_mul(torch.empty(6, 7, device="meta"))


@pytest.mark.parametrize(
    ("op", "args"),
    [
        ("silu_and_mul", lambda: (torch.randn(3, 2 * 8),)),
        ("silu_and_mul_out", lambda: (torch.empty(3, 8), torch.randn(3, 2 * 8))),
        ("skinny_linear", lambda: (torch.randn(2, 16).half(), torch.randn(8, 16).half(), torch.randn(8).half())),
    ],
)
def test_opcheck(op: str, args) -> None:
    """torch's own checks of a custom op: schema, fake tensor, AOT dispatch (what torch.compile relies on)."""
    torch.library.opcheck(getattr(torch.ops.imagebuild, op).default, args())


def test_torch_compile_fullgraph_on_cpu() -> None:
    def f(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        h = k.silu_and_mul(x)
        k.silu_and_mul(x, out=out)
        return k.skinny_linear(h, w) + out.sum()

    x = torch.randn(4, 2 * 32, dtype=torch.bfloat16)
    w = torch.randn(16, 32, dtype=torch.bfloat16)
    out_c, out_e = torch.empty(4, 32, dtype=torch.bfloat16), torch.empty(4, 32, dtype=torch.bfloat16)
    got = torch.compile(f, fullgraph=True, backend="inductor")(x, w, out_c)
    want = f(x, w, out_e)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(out_c, out_e)


def test_torch_compile_reports_bad_input() -> None:
    with pytest.raises(Exception, match="last dim even"):
        torch.compile(lambda x: k.silu_and_mul(x), fullgraph=True)(torch.randn(2, 5))


def test_cpu_only_install_compiles_nothing(tmp_path: Path) -> None:
    """`pip install ./kernels` with IMAGEBUILD_KERNELS_CPU_ONLY=1: no extension, ops usable from the install."""
    target = tmp_path / "site"
    source = tmp_path / "kernels"  # a copy: pip builds in the source tree, keep the checkout clean
    shutil.copytree(KERNELS, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "*.so"))
    env = {**os.environ, "IMAGEBUILD_KERNELS_CPU_ONLY": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    build = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-build-isolation", "--no-deps", "--target", str(target)]
        + [str(source)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert build.returncode == 0, build.stderr
    pkg = target / "imagebuild_kernels"
    assert (pkg / "__init__.py").exists()
    assert not list(pkg.glob("_C*")), "a CPU-only install must not build the extension"
    probe = (
        "import torch, imagebuild_kernels as k; "
        "assert not k.HAS_DEVICE_KERNELS; "
        "print(torch.ops.imagebuild.silu_and_mul(torch.ones(1, 4)).tolist())"
    )
    run = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env={**env, "PYTHONPATH": str(target)}
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[[0.7310585975646973, 0.7310585975646973]]"
