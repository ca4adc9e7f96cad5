"""The image's custom ops in the smoke suite: required when the manifest includes them, checked when present.

The ops here are plain-torch stand-ins registered under ``torch.ops.imagebuild`` (the contract of kernels/),
so the suite's handling of the ops is tested without the compiled kernels; the real ones run in the image.
"""

from __future__ import annotations

from pathlib import Path

from tests.test_smoke_helpers import (
    NO_KERNELS,
    REFERENCE_OPS,
    REPO,
    checks_by_name,
    cpu_manifest,
    run_smoke,
    write_json,
)

KERNELS_INCLUDED = {"imagebuild-kernels": {"included": True, "arches": [], "experimental": [], "reason": None}}


def test_missing_ops_fail_when_manifest_includes_kernels(tmp_path: Path) -> None:
    manifest = write_json(tmp_path / "m.json", cpu_manifest(components=KERNELS_INCLUDED))
    report = tmp_path / "r.json"
    proc = run_smoke(
        tmp_path,
        "--manifest",
        str(manifest),
        "--only",
        "silu,linear",
        "--report",
        str(report),
        sitecustomize=NO_KERNELS,
    )
    assert proc.returncode == 1
    checks = checks_by_name(report)
    assert "torch.ops.imagebuild.silu_and_mul is not registered" in checks["silu"]["reason"]
    assert "manifest includes imagebuild-kernels" in checks["silu"]["reason"]
    assert "torch.ops.imagebuild.skinny_linear is not registered" in checks["linear"]["reason"]


def test_reference_ops_pass_and_are_timed(tmp_path: Path) -> None:
    manifest = write_json(tmp_path / "m.json", cpu_manifest(components=KERNELS_INCLUDED))
    report = tmp_path / "r.json"
    proc = run_smoke(
        tmp_path,
        "--manifest",
        str(manifest),
        "--only",
        "silu,linear",
        "--report",
        str(report),
        sitecustomize=REFERENCE_OPS.format(broken=None),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    checks = checks_by_name(report)
    assert set(checks["silu"]["numbers"]["silu_and_mul"]) == {"float16", "bfloat16", "float32"}
    assert checks["silu"]["throughput"]["silu_and_mul_GBps"] > 0
    assert checks["linear"]["numbers"]["skinny_linear"]["float16"]["ok"] is True
    assert any(k.startswith("skinny_linear_M1_") for k in checks["linear"]["throughput"])


def test_broken_ops_fail(tmp_path: Path) -> None:
    manifest = write_json(tmp_path / "m.json", cpu_manifest(components=KERNELS_INCLUDED))
    for broken, check, needle in [
        ("silu_and_mul_tail", "silu", "silu_and_mul"),
        ("skinny_linear_bias", "linear", "skinny_linear"),
    ]:
        report = tmp_path / f"{broken}.json"
        proc = run_smoke(
            tmp_path,
            "--manifest",
            str(manifest),
            "--only",
            check,
            "--report",
            str(report),
            sitecustomize=REFERENCE_OPS.format(broken=broken),
        )
        assert proc.returncode == 1, proc.stdout
        reason = checks_by_name(report)[check]["reason"]
        assert reason.startswith(needle) and "tolerance" in reason
        assert "F.silu" not in reason and "F.linear" not in reason


def test_kernels_package_of_this_repo_passes_on_cpu(tmp_path: Path) -> None:
    """The real imagebuild_kernels (kernels/, its CPU implementations) through the suite, as in local-cpu."""
    kernels = REPO / "kernels"
    assert (kernels / "imagebuild_kernels" / "__init__.py").exists()
    manifest = write_json(tmp_path / "m.json", cpu_manifest(components=KERNELS_INCLUDED))
    report = tmp_path / "r.json"
    proc = run_smoke(
        tmp_path,
        "--manifest",
        str(manifest),
        "--only",
        "silu,linear",
        "--report",
        str(report),
        extra_paths=(str(kernels),),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    checks = checks_by_name(report)
    assert checks["silu"]["numbers"]["silu_and_mul"]["float16"]["ok"] is True
    assert set(checks["linear"]["numbers"]["skinny_linear"]) == {"float16", "bfloat16"}
