"""The serving runtime's Triton flash-attention path, exercised through a stand-in runtime module.

The stand-in has the runtime's varlen contract (`triton_attention(q, k, v, o, cu_q, cu_k, max_q, max_k, causal,
sm_scale)`, q as [tokens, heads, dim]) but computes with SDPA: it proves the suite's plumbing and that a wrong
result fails the check. The real Triton kernel runs where a runtime is installed (GPU images in CI).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.test_smoke_helpers import NO_KERNELS, checks_by_name, cpu_manifest, run_smoke, write_json

STAND_IN = """
import torch
import torch.nn.functional as F


def triton_attention(q, k, v, o, cu_q, cu_k, max_q, max_k, causal=False, sm_scale=1.0, bias=None):
    for i in range(len(cu_q) - 1):
        start, end = int(cu_q[i]), int(cu_q[i + 1])
        qi, ki, vi = (t[start:end].transpose(0, 1) for t in (q, k, v))
        out = F.scaled_dot_product_attention(qi, ki, vi, is_causal={causal_expr}, scale=sm_scale)
        o[start:end] = out.transpose(0, 1)
    return o, None
"""


def _runtime_package(tmp_path: Path, causal_expr: str = "causal") -> str:
    root = tmp_path / "runtime"
    module = root / "text_generation_server" / "utils"
    module.mkdir(parents=True)
    (root / "text_generation_server" / "__init__.py").write_text("")
    (module / "__init__.py").write_text("")
    (module / "flash_attn_triton.py").write_text(STAND_IN.format(causal_expr=causal_expr))
    return str(root)


def test_stand_in_runtime_module_is_found_and_needs_a_gpu_on_cpu(tmp_path: Path) -> None:
    manifest = write_json(tmp_path / "manifest.json", cpu_manifest())
    report = tmp_path / "report.json"
    proc = run_smoke(
        tmp_path,
        "--device",
        "cpu",
        "--manifest",
        str(manifest),
        "--report",
        str(report),
        "--only",
        "attention",
        sitecustomize=NO_KERNELS,
        extra_paths=(_runtime_package(tmp_path),),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    triton = checks_by_name(report)["attention"]["numbers"]["triton"]
    assert triton["runtime_module"] == "text_generation_server.utils.flash_attn_triton"
    assert triton["runtime_path"] == {"tested": False, "reason": "needs a GPU"}


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA or ROCm GPU")
@pytest.mark.parametrize(("causal_expr", "passes"), [("causal", True), ("not causal", False)])
def test_stand_in_runtime_triton_attention_on_gpu(tmp_path: Path, causal_expr: str, passes: bool) -> None:
    report = tmp_path / "report.json"
    proc = run_smoke(
        tmp_path,
        "--device",
        "cuda",
        "--report",
        str(report),
        "--only",
        "attention",
        sitecustomize=NO_KERNELS,
        extra_paths=(_runtime_package(tmp_path, causal_expr),),
    )
    check = checks_by_name(report)["attention"]
    cases = check["numbers"]["triton"]["runtime_path"]
    if passes:
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert len(cases) == 2 and all(c["err_ratio"] <= 1 for c in cases.values())
    else:
        assert proc.returncode == 1 and check["status"] == "failed"
        assert "runtime triton_attention" in check["reason"]
