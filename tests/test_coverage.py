"""Arch coverage: the status rules, the judging against the matrix, bare code objects, and the build hook on real
images built here holding our device code compiled for a gfx list (clang-19) and an sm list (nvcc).

The engine-backed tests build small images (local/debian:bookworm + a pip-style RECORD + the compiled libraries +
a manifest) and run the real hook, imagebuild.prove.coverage.add_coverage, the step `imagebuild build` calls after
BuildKit: a deliberate gap (gfx942 promised, not compiled) fails the build with exit 3 naming library and arch;
the CUDA image passes and gets /opt/imagebuild/arch-coverage.json and its label.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from imagebuild.errors import ConfigError
from imagebuild.prove.coverage import judge
from imagecontract import codeobjects as co
from imagecontract.amdgpu_elf import amdgpu_target
from imagecontract.coverage import scan, status, table

REPO = Path(__file__).resolve().parents[1]
TOOL = REPO / "kernels" / "tools" / "compile_device_check.py"
_spec = importlib.util.spec_from_file_location("compile_device_check", TOOL)
assert _spec and _spec.loader
cdc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cdc)
SITE = "/usr/local/lib/python3.11/dist-packages"


@pytest.mark.parametrize(
    ("want", "code", "ptx", "expected"),
    [
        ("gfx90a", ["gfx90a"], [], "present"),
        ("gfx90a", ["gfx90a:xnack-"], [], "partial"),
        ("gfx90a:xnack-", ["gfx90a:xnack-"], [], "present"),
        ("gfx942", ["gfx90a", "gfx908"], [], "absent"),
        ("sm_90", ["sm_90a"], [], "present"),  # a 9.0 GPU runs sm_90a code (cuDNN 9 ships only sm_90a)
        ("sm_86", ["sm_80"], [], "compatible"),
        ("sm_90", ["sm_80"], [], "absent"),  # another major: no SASS compatibility
        ("sm_90", ["sm_80"], ["compute_80"], "ptx"),
        ("sm_89", ["sm_80a"], [], "absent"),
        ("sm_80", ["sm_86"], [], "absent"),  # newer minor never runs on an older GPU
    ],
)
def test_status_rules(want: str, code: list[str], ptx: list[str], expected: str) -> None:
    assert status(want, code, ptx) == expected


def test_bare_code_object_targets_from_e_flags() -> None:
    """e_flags of code object v4 (ELFABIVERSION 2): gfx90a (0x3f) with xnack off (0x200) and sramecc any (0x400)."""
    header = bytearray(64)
    header[:4], header[4], header[5], header[7], header[8] = b"\x7fELF", 2, 1, 64, 2
    header[18:20] = (224).to_bytes(2, "little")
    header[48:52] = (0x3F | 0x200 | 0x400).to_bytes(4, "little")
    assert amdgpu_target(bytes(header)) == "gfx90a:xnack-"
    header[48:52] = (0x4C | 0x300 | 0xC00).to_bytes(4, "little")
    assert amdgpu_target(bytes(header)) == "gfx942:sramecc+:xnack+"
    header[18:20] = (62).to_bytes(2, "little")  # x86-64: not a GPU code object
    assert amdgpu_target(bytes(header)) is None


def test_rocm3_bundle_entry_ids() -> None:
    assert co.hip_target("hip-amdgcn-amd-amdhsa-gfx906") == "gfx906"
    assert co.hip_target("hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-") == "gfx90a:xnack-"
    assert co.hip_target("host-x86_64-unknown-linux--") is None


def raw_doc(libs: list[dict[str, Any]], manifest: dict[str, Any] | None, requested: list[str]) -> dict[str, Any]:
    return {
        "requested": requested,
        "libraries": libs,
        "manifest": manifest,
        "scan": {"files_seen": 1, "files_read": 1, "seconds": 0.0},
    }


def lib(path: str, owner: str, arches: dict[str, str]) -> dict[str, Any]:
    return {
        "path": path,
        "kind": "library",
        "files": 1,
        "owner": owner,
        "code_objects": [],
        "ptx": [],
        "arches": arches,
    }


def rocm_manifest(components: dict[str, Any]) -> dict[str, Any]:
    """A manifest that fits the contract's model (the judge reads it through `Manifest.from_dict`)."""
    return {
        "schema_version": 1,
        "target": "rocm6.1-torch2.3",
        "platform": {"name": "rocm6.1", "kind": "rocm", "version": "6.1", "base_image": "rocm/dev:6.1"},
        "torch": {"version": "2.3.0", "obtained": "wheel"},
        "versions": {"torch": "2.3.0", "rocm": "6.1", "python": "3.10"},
        "gpu_arches": ["gfx90a", "gfx942"],
        "components": components,
    }


def test_judge_per_component() -> None:
    manifest = rocm_manifest(
        {
            "vllm-rocm": {"included": True, "arches": ["gfx90a", "gfx942"]},
            "flash-attention-ck": {"included": True, "arches": ["gfx90a"]},
        }
    )
    dists = {"vllm-rocm": "vllm", "flash-attention-ck": "flash_attn"}
    libs = [
        lib("/sp/vllm/_C.so", "python:vllm", {"gfx90a": "present", "gfx942": "absent"}),
        lib("/sp/flash_attn_2_cuda.so", "python:flash-attn", {"gfx90a": "present", "gfx942": "absent"}),
        lib("/sp/torch/lib/libtorch_hip.so", "python:torch", {"gfx90a": "present", "gfx942": "absent"}),
        lib("/sp/torch/lib/hipblaslt/library", "python:torch", {"gfx90a": "absent", "gfx942": "present"}),
        lib("/opt/rocm/lib/librocsparse.so", "dpkg:rocsparse", {"gfx90a": "absent", "gfx942": "present"}),
    ]
    doc = judge(raw_doc(libs, manifest, ["gfx90a", "gfx942"]), dists, "t")
    verdict = {(g.library, g.arch): (g.allowed, g.component) for g in doc.gaps}
    assert verdict == {
        ("/sp/vllm/_C.so", "gfx942"): (False, "vllm-rocm"),
        ("/sp/flash_attn_2_cuda.so", "gfx942"): (True, "flash-attention-ck"),  # not built for it: recorded choice
        ("/sp/torch/lib/libtorch_hip.so", "gfx942"): (False, "torch"),
        ("/sp/torch/lib/hipblaslt/library", "gfx90a"): (True, None),  # bundled in torch's wheel: reported
        ("/opt/rocm/lib/librocsparse.so", "gfx90a"): (True, None),
    }
    assert not doc.ok
    assert doc.summary() == "gfx90a=3/5 gfx942=2/5 gaps=5 disallowed=2"


def test_judge_matches_arches_by_the_contracts_rule() -> None:
    """A component built for gfx942:xnack- has no code for an xnack+ device: not built for it (allowed), as
    `loads_on` says; the processor alone would call it a gap in what was built."""
    manifest = rocm_manifest({"vllm-rocm": {"included": True, "arches": ["gfx942:xnack-"]}})
    libs = [lib("/sp/vllm/_C.so", "python:vllm", {"gfx942:xnack+": "absent", "gfx942:xnack-": "absent"})]
    doc = judge(raw_doc(libs, manifest, ["gfx942:xnack+", "gfx942:xnack-"]), {"vllm-rocm": "vllm"}, "t")
    assert {g.arch: g.allowed for g in doc.gaps} == {"gfx942:xnack+": True, "gfx942:xnack-": False}


def test_judge_refuses_a_manifest_that_does_not_fit_naming_the_key() -> None:
    manifest = rocm_manifest({"vllm-rocm": {"included": "yes", "arches": ["gfx942"]}})
    with pytest.raises(ConfigError, match=r"components\.vllm-rocm\.included: expected bool") as info:
        judge(raw_doc([], manifest, ["gfx942"]), {}, "t")
    assert "\n" not in str(info.value)


def test_judge_without_a_manifest_governs_nothing() -> None:
    libs = [lib("/sp/vllm/_C.so", "python:vllm", {"gfx942": "absent"})]
    doc = judge(raw_doc(libs, None, ["gfx942"]), {"vllm-rocm": "vllm"})
    assert [(g.allowed, g.component) for g in doc.gaps] == [(True, None)] and doc.target is None


def test_scan_groups_kernel_folders_and_finds_owners(tmp_path: Path) -> None:
    """A RECORD names the owner; a folder of bare code objects (rocBLAS-style, one arch per file) is one row."""
    header = bytearray(64)
    header[:4], header[4], header[5], header[7], header[8] = b"\x7fELF", 2, 1, 64, 2
    header[18:20] = (224).to_bytes(2, "little")
    folder = tmp_path / "site-packages" / "torch" / "lib" / "rocblas" / "library"
    folder.mkdir(parents=True)
    for mach, arch in ((0x3F, "gfx90a"), (0x4C, "gfx942")):
        header[48:52] = (mach | 0x100 | 0x400).to_bytes(4, "little")
        (folder / f"Kernels.so-000-{arch}.hsaco").write_bytes(bytes(header) + b"\0" * 64)
    dist = tmp_path / "site-packages" / "torch-2.3.0.dist-info"
    dist.mkdir()
    (dist / "RECORD").write_text("torch/lib/rocblas/library/Kernels.so-000-gfx90a.hsaco,,\n" + "x" * 64 + ",,\n")
    rows = scan(tmp_path).libraries
    assert [(r.path, r.kind, r.files, r.owner, r.code_objects) for r in rows] == [
        (str(folder), "kernel-files", 2, "python:torch", ["gfx90a", "gfx942"])
    ]
    assert table(rows, ["gfx90a", "gfx1100"])[0]["arches"] == {"gfx90a": "present", "gfx1100": "absent"}


# --- the build hook on real images -------------------------------------------------------------------------

needs_hip = pytest.mark.skipif(cdc.hip_available() is not None, reason=f"HIP toolchain: {cdc.hip_available()}")
needs_nvcc = pytest.mark.skipif(cdc.cuda_available() is not None, reason=f"CUDA toolchain: {cdc.cuda_available()}")
PREFIX = "imagebuild-test/coverage"


@pytest.fixture(scope="module")
def engine() -> Iterator[Any]:
    from imagebuild.engine.docker import find_engine
    from imagebuild.errors import ConfigError

    try:
        found = find_engine()
    except ConfigError as exc:
        if os.environ.get("IMAGEBUILD_REQUIRE_ENGINE") == "1":
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    yield found
    import subprocess

    # By name, never by ID: one of these tags names local/debian:bookworm's own image (test_..._no_python), and
    # `rmi -f ID` removes every tag of an ID, the shared base with it (seen: every later engine test failing).
    names = subprocess.run(
        [found.client, "images", "--format", "{{.Repository}}:{{.Tag}}", "--filter", f"reference={PREFIX}*"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split()
    if names:
        subprocess.run([found.client, "rmi", "-f", *names], capture_output=True, check=False)


PYTHON_BASE = "imagebuild-test/python3:bookworm"  # kept between runs: the layer cache makes it free


def python_base(engine: Any) -> str:
    """local/debian:bookworm with Debian's python3: the scanner runs as the image's own python3."""
    import subprocess

    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "Dockerfile").write_text(
            "FROM local/debian:bookworm\n"
            "RUN apt-get update && apt-get install -y --no-install-recommends python3 && rm -rf /var/lib/apt/lists/*\n"
        )
        subprocess.run(
            [*engine.build_prefix(), "-q", "--network", "host", "-t", PYTHON_BASE, tmp],
            check=True,
            capture_output=True,
            env={**os.environ, **engine.env},
        )
    return PYTHON_BASE


def image_with(engine: Any, tag: str, libs: dict[str, Path], manifest: dict[str, Any]) -> str:
    """python_base + each library at SITE/<relpath> + RECORDs naming their distributions + manifest."""
    import subprocess

    with tempfile.TemporaryDirectory() as tmp:
        ctx = Path(tmp)
        lines = [f"FROM {python_base(engine)}"]
        for i, (rel, src) in enumerate(libs.items()):
            dist = rel.split("/")[0]
            shutil.copy(src, ctx / f"lib{i}.so")
            info = ctx / f"{dist}-1.0.dist-info"
            info.mkdir(exist_ok=True)
            with open(info / "RECORD", "a") as fh:
                fh.write(f"{rel},,\n")
            lines += [f"COPY lib{i}.so {SITE}/{rel}", f"COPY {info.name} {SITE}/{info.name}"]
        (ctx / "manifest.json").write_text(json.dumps(manifest))
        lines.append("COPY manifest.json /opt/imagebuild/manifest.json")
        (ctx / "Dockerfile").write_text("\n".join(lines) + "\n")
        subprocess.run(
            [*engine.build_prefix(), "-q", "--network", "host", "-t", tag, str(ctx)],
            check=True,
            capture_output=True,
            env={**os.environ, **engine.env},
        )
    out = subprocess.run(
        [engine.client, "image", "inspect", "--format", "{{.Id}}", tag],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **engine.env},
    )
    return out.stdout.strip()


def result_for(target: str, image_id: str, tag: str) -> Any:
    from imagebuild.building.buildkit import TargetResult

    return TargetResult(target, True, image_id, [tag], 1.0, 0, 1, None, [], "build.log", "Dockerfile", [])


def component_manifest(kind: str, arches: list[str], components: dict[str, list[str]]) -> dict[str, Any]:
    platform = {"name": kind, "kind": kind, "version": "6.1" if kind == "rocm" else "12.1", "base_image": "local"}
    return rocm_manifest({n: {"included": True, "arches": a} for n, a in components.items()}) | {
        "target": f"coverage-{kind}",
        "platform": platform,
        "gpu_arches": arches,
    }


@pytest.mark.docker
@pytest.mark.toolchain
@needs_hip
def test_a_deliberate_gfx_gap_fails_the_build_with_exit_3(engine: Any, tmp_path: Path) -> None:
    from imagebuild.building.buildkit import raise_on_failure
    from imagebuild.errors import BuildFailed
    from imagebuild.prove.coverage import add_coverage

    so = cdc.compile_hip(["gfx908", "gfx90a"], tmp_path / "hip.so")
    manifest = component_manifest(
        "rocm", ["gfx908", "gfx90a", "gfx942"], {"imagebuild-kernels": ["gfx908", "gfx90a", "gfx942"]}
    )
    tag = f"{PREFIX}:gfx-gap"
    image_id = image_with(engine, tag, {"imagebuild_kernels/_C.so": so}, manifest)
    result = result_for("coverage-rocm", image_id, tag)
    report = tmp_path / "build-report.json"
    add_coverage(engine, [result], REPO / "matrix.yaml", report)
    assert not result.ok and result.image_id == image_id  # no layer added to a failed image
    assert result.failed_step == (
        f"arch coverage: {SITE}/imagebuild_kernels/_C.so has no gfx942 code (imagebuild-kernels was built for it; "
        "it carries gfx908, gfx90a)"
    )
    written = json.loads((tmp_path / "coverage" / "coverage-rocm.json").read_text())
    assert written["libraries"][0]["arches"] == {"gfx908": "present", "gfx90a": "present", "gfx942": "absent"}
    with pytest.raises(BuildFailed) as info:
        raise_on_failure([result], report)
    assert info.value.exit_code == 3 and "gfx942" in str(info.value)


@pytest.mark.docker
@pytest.mark.toolchain
@needs_nvcc
def test_the_sm_image_passes_and_carries_its_table_and_label(engine: Any, tmp_path: Path) -> None:
    import subprocess

    from imagebuild.prove.coverage import LABEL, add_coverage

    ours = cdc.compile_cuda(["sm_80", "sm_90"], tmp_path / "ours.so")
    flash = cdc.compile_cuda(["sm_80"], tmp_path / "flash.so")
    manifest = component_manifest(
        "cuda",
        ["sm_80", "sm_86", "sm_90"],
        {"imagebuild-kernels": ["sm_80", "sm_86", "sm_90"], "flash-attention": ["sm_80", "sm_86"]},
    )
    tag = f"{PREFIX}:sm"
    libs = {"imagebuild_kernels/_C.so": ours, "flash_attn/flash_attn_2_cuda.so": flash}
    image_id = image_with(engine, tag, libs, manifest)
    env = {**os.environ, **engine.env}
    # The same image under a second name, as a later BuildKit build of it names it, taken now: on the containerd
    # store an image whose last name moves (the hook's layer build takes `tag`) is gone, its ID no reference any more
    # (BuildKit's exporter moves the name, no dangling record); the graphdriver store (20.10) keeps it as <none>.
    subprocess.run([engine.client, "tag", tag, f"{PREFIX}:sm-again"], check=True, env=env)
    result = result_for("coverage-cuda", image_id, tag)
    add_coverage(engine, [result], REPO / "matrix.yaml", tmp_path / "build-report.json")
    assert result.ok, result.failed_step
    assert result.image_id != image_id  # the coverage layer
    again = result_for("coverage-cuda", image_id, f"{PREFIX}:sm-again")
    add_coverage(engine, [again], REPO / "matrix.yaml", tmp_path / "build-report.json")
    assert again.ok and again.image_id == result.image_id  # the same image gets the same layer (no scan time inside)
    inside = subprocess.run(  # by the ID the hook recorded: it is a reference this engine runs
        [engine.client, "run", "--rm", "--entrypoint", "cat", result.image_id, "/opt/imagebuild/arch-coverage.json"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    ).stdout
    doc = json.loads(inside)
    rows = {Path(r["path"]).parent.name: (r["component"], r["arches"]) for r in doc["libraries"]}
    assert rows == {
        "flash_attn": ("flash-attention", {"sm_80": "present", "sm_86": "compatible", "sm_90": "absent"}),
        "imagebuild_kernels": ("imagebuild-kernels", {"sm_80": "present", "sm_86": "compatible", "sm_90": "present"}),
    }
    assert [(g["arch"], g["allowed"]) for g in doc["gaps"]] == [("sm_90", True)]  # flash-attention: not built for it
    found, label = (
        subprocess.run(
            [engine.client, "image", "inspect", "--format", f'{{{{.Id}}}} {{{{index .Config.Labels "{LABEL}"}}}}', tag],
            capture_output=True,
            text=True,
            check=True,
            env=env,
        )
        .stdout.strip()
        .split(" ", 1)
    )
    assert found == result.image_id  # the tag names the image the hook recorded
    assert label == "sm_80=2/2 sm_86=2/2 sm_90=1/2 gaps=1 disallowed=0"


@pytest.mark.docker
def test_an_image_without_python3_is_recorded_as_not_scanned_and_builds(engine: Any, tmp_path: Path) -> None:
    """local/debian:bookworm has no python3, hence no torch and no component: the hook records and warns, the
    image stays as BuildKit made it, and no coverage document is written."""
    import subprocess

    from imagebuild.building.buildkit import raise_on_failure
    from imagebuild.prove.coverage import NO_PYTHON, add_coverage

    tag = f"{PREFIX}:no-python"
    env = {**os.environ, **engine.env}
    subprocess.run([engine.client, "tag", "local/debian:bookworm", tag], check=True, env=env)
    image_id = subprocess.run(
        [engine.client, "image", "inspect", "--format", "{{.Id}}", tag],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    ).stdout.strip()
    result = result_for("coverage-none", image_id, tag)
    warnings = add_coverage(engine, [result], REPO / "matrix.yaml", tmp_path / "build-report.json")
    assert result.ok and result.failed_step is None and result.image_id == image_id
    assert result.coverage == NO_PYTHON == "not scanned: no python3 in the image"
    assert warnings == [f"coverage-none: arch coverage {NO_PYTHON}"]
    assert not (tmp_path / "coverage").exists()
    raise_on_failure([result], tmp_path / "build-report.json")  # nothing to raise
