"""The compiled kernels against float64 references on a GPU: fresh random inputs, poisoned outputs, odd sizes.

Skipped (with the reason) where there is no GPU or the extension was not built; bench/gpu_kernels.sh runs it on
the GPU machine after building the extension for that GPU.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

if importlib.util.find_spec("imagebuild_kernels") is None:  # not installed: use the source tree (CPU ops only)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kernels"))
import imagebuild_kernels as k  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA or ROCm GPU"),
    pytest.mark.skipif(not k.HAS_DEVICE_KERNELS, reason="imagebuild_kernels built without its GPU extension"),
]

# ||out - ref|| / ||ref|| limits: output rounding dominates (fp16 2^-11, bf16 2^-8 per element).
REL_TOL = {torch.float32: 5e-6, torch.float16: 1e-3, torch.bfloat16: 8e-3}
SILU_CFGS = range(0, 14)
# 0: the table's choice; -1: F.linear; every variant; K split over clusters of 2, 4, 8 blocks (sm_90).
LINEAR_CFGS = [0, -1, *range(1, 24)]
SPLIT_CFGS = [201, 401, 801, 211, 411, 811, 212, 815, 416, 218, 220, 421, 822, 223]


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    assert not torch.isnan(out).any(), "NaN in the output: an element was not written"
    return ((out.double() - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def silu_ref(x: torch.Tensor) -> torch.Tensor:
    d = x.shape[-1] // 2
    xd = x.double()
    return torch.nn.functional.silu(xd[..., :d]) * xd[..., d:]


def misaligned(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """A contiguous tensor whose data pointer is not 16-byte aligned (forces the scalar paths)."""
    n = 1
    for s in shape:
        n *= s
    buf = torch.randn(n + 1, device="cuda", dtype=dtype)
    t = buf[1:].view(shape)
    assert t.data_ptr() % 16 != 0 and t.is_contiguous()
    return t


SILU_SHAPES = [(0, 16), (1, 16), (1, 14), (3, 26), (5, 8192), (7, 2002), (2, 3, 48), (33, 2 * 14336), (64, 2 * 28672)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", SILU_SHAPES)
def test_silu_and_mul_matches_float64(dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    x = torch.randn(shape, device="cuda", dtype=dtype) * 3
    ref = silu_ref(x)
    for cfg in SILU_CFGS:
        out = torch.full((*shape[:-1], shape[-1] // 2), float("nan"), device="cuda", dtype=dtype)
        torch.ops.imagebuild._silu_and_mul_cfg(out, x, cfg)
        if out.numel():
            assert rel_err(out, ref) < REL_TOL[dtype], f"cfg {cfg}"
    got = k.silu_and_mul(x)
    if got.numel():
        assert rel_err(got, ref) < REL_TOL[dtype]
    assert got.shape == ref.shape


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_silu_and_mul_misaligned_pointers(dtype: torch.dtype) -> None:
    x = misaligned((9, 2 * 64), dtype)
    out = misaligned((9, 64), dtype).fill_(float("nan"))
    k.silu_and_mul(x, out=out)
    assert rel_err(out, silu_ref(x)) < REL_TOL[dtype]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("nk", [(1, 8), (17, 40), (100, 264), (257, 1000), (4096, 4096), (8197, 1032), (64, 28672)])
@pytest.mark.parametrize("m", [1, 2, 3, 5, 7, 8, 9, 13, 16, 17])
def test_skinny_linear_matches_float64(dtype: torch.dtype, nk: tuple[int, int], m: int) -> None:
    n, kk = nk
    x = torch.randn(m, kk, device="cuda", dtype=dtype)
    w = torch.randn(n, kk, device="cuda", dtype=dtype) * kk**-0.5
    b = torch.randn(n, device="cuda", dtype=dtype)
    cfgs = LINEAR_CFGS + (SPLIT_CFGS if torch.cuda.get_device_capability() >= (9, 0) else [])
    for bias in (None, b):
        ref = x.double() @ w.double().T + (0 if bias is None else bias.double())
        for cfg in cfgs:
            torch.cuda.empty_cache()
            poison = torch.full((m * n + 4096,), float("nan"), device="cuda", dtype=dtype)
            del poison  # the caching allocator hands this NaN-filled block to the output next
            out = torch.ops.imagebuild._skinny_linear_cfg(x, w, bias, cfg)
            assert out.shape == (m, n)
            assert rel_err(out, ref) < REL_TOL[dtype], f"cfg {cfg} bias {bias is not None}"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_skinny_linear_misaligned_falls_back(dtype: torch.dtype) -> None:
    x = misaligned((3, 64), dtype)
    w = torch.randn(40, 64, device="cuda", dtype=dtype)
    assert rel_err(k.skinny_linear(x, w), x.double() @ w.double().T) < REL_TOL[dtype]


def test_gpu_errors_are_clear() -> None:
    x = torch.randn(4, 16, device="cuda", dtype=torch.float16)
    with pytest.raises(ValueError, match="expected x of dtype float16, bfloat16 or float32"):
        k.silu_and_mul(x.to(torch.float64))
    with pytest.raises(ValueError, match="last dim even"):
        k.silu_and_mul(x[:, :15])
    with pytest.raises(ValueError, match="expected a contiguous x"):
        k.silu_and_mul(x.T)
    with pytest.raises(ValueError, match="expected out of shape"):
        k.silu_and_mul(x, out=torch.empty(4, 16, device="cuda", dtype=torch.float16))
    with pytest.raises(ValueError, match="expected out on"):
        k.silu_and_mul(x, out=torch.empty(4, 8, dtype=torch.float16))
    w = torch.randn(8, 16, device="cuda", dtype=torch.float16)
    with pytest.raises(ValueError, match="expected x of dtype float16 or bfloat16"):
        k.skinny_linear(x.float(), w.float())
    with pytest.raises(ValueError, match=r"expected weight of shape \[N, 16\]"):
        k.skinny_linear(x, w[:, :8].contiguous())
    with pytest.raises(ValueError, match="expected a contiguous weight"):
        k.skinny_linear(x, torch.randn(16, 8, device="cuda", dtype=torch.float16).T)
    with pytest.raises(ValueError, match="expected weight on"):
        k.skinny_linear(x, w.cpu())


def test_ops_under_torch_compile_on_gpu() -> None:
    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return k.skinny_linear(k.silu_and_mul(x), w) * 2

    x = torch.randn(4, 2 * 256, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(128, 256, device="cuda", dtype=torch.bfloat16) * 256**-0.5
    got = torch.compile(f, fullgraph=True)(x, w)
    ref = (silu_ref(x).to(torch.bfloat16).double() @ w.double().T) * 2
    assert rel_err(got, ref) < REL_TOL[torch.bfloat16]


@pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability() < (9, 0),
    reason="K split needs thread-block clusters (sm_90)",
)
@pytest.mark.parametrize("cfg", SPLIT_CFGS)
def test_skinny_linear_split_is_deterministic(cfg: int) -> None:
    x = torch.randn(5, 4104, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(1000, 4104, device="cuda", dtype=torch.bfloat16)
    first = torch.ops.imagebuild._skinny_linear_cfg(x, w, None, cfg)
    for _ in range(3):
        assert torch.equal(torch.ops.imagebuild._skinny_linear_cfg(x, w, None, cfg), first)


def test_bad_cfg_is_a_clear_error() -> None:
    x = torch.randn(2, 64, device="cuda", dtype=torch.float16)
    w = torch.randn(32, 64, device="cuda", dtype=torch.float16)
    for cfg in (24, 301, 206):
        with pytest.raises(ValueError, match=f"launch configuration {cfg} is not valid"):
            torch.ops.imagebuild._skinny_linear_cfg(x, w, None, cfg)


def test_choice_follows_the_python_rule() -> None:
    """csrc/ops.cu's lookup and _table.choose agree on measured, nearby, far and odd shapes."""
    from imagebuild_kernels import _table

    table = _table.load_table()
    props = torch.cuda.get_device_properties(0)
    cc, sms = 10 * props.major + props.minor, props.multi_processor_count
    shapes = [(4096, 4096), (4100, 4096), (6000, 4096), (4096, 14336), (128256, 4096), (300, 300), (2048, 1536)]
    shapes += [(e["N"], e["K"]) for e in (table or {}).get("entries", [])[::97]]
    for dtype, name in ((torch.float16, "float16"), (torch.bfloat16, "bfloat16")):
        for n, kk in shapes:
            w = torch.empty(n, kk, device="cuda", dtype=dtype)
            for m in (1, 3, 8, 9, 16, 17):
                x = torch.empty(m, kk, device="cuda", dtype=dtype)
                want = _table.choose(table, name, n, kk, m, cc=cc, sms=sms).cfg
                assert torch.ops.imagebuild._skinny_choice(x, w) == want, (name, n, kk, m)


def test_default_dispatch_matches_reference_on_table_shapes() -> None:
    """Whatever the table picks (ours or F.linear), the default op computes the product."""
    for n, kk, m in ((4096, 4096, 1), (6144, 4096, 8), (2048, 1536, 13), (4096, 14336, 16)):
        x = torch.randn(m, kk, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, kk, device="cuda", dtype=torch.bfloat16) * kk**-0.5
        assert rel_err(k.skinny_linear(x, w), x.double() @ w.double().T) < REL_TOL[torch.bfloat16]
