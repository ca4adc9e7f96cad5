"""OCI (CPU) platforms in the matrix: availability per platform, refused with the reason, or left out and recorded."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagebuild.errors import ConfigError
from imagebuild.matrix import load_matrix, load_text
from imagebuild.matrix.oci import for_oci
from imagebuild.plan.target_plan import plan_for

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def matrix():  # type: ignore[no-untyped-def]
    return load_matrix(ROOT / "matrix.yaml")


def test_local_cpu_lists_two_platforms_and_arm64_records_its_torch(matrix) -> None:  # type: ignore[no-untyped-def]
    target = matrix.target("local-cpu")
    assert target.oci_platforms == ("linux/amd64", "linux/arm64")
    amd, arm = (plan_for(matrix, target, oci=oci) for oci in target.oci_platforms)
    assert (amd.out_dir, arm.out_dir) == ("dockerfiles/local-cpu", "dockerfiles/local-cpu")  # one Dockerfile (issue 22)
    assert arm.manifest_path == "dockerfiles/local-cpu/manifest.linux-arm64.json"
    assert amd.manifest["platform"]["oci"] == "linux/amd64" and amd.manifest["platform"]["oci_notes"] == []
    assert arm.manifest["platform"]["oci"] == "linux/arm64"
    assert arm.manifest["torch"]["version"] == "2.10.0" != amd.manifest["torch"]["version"]
    assert any("torch 2.10.0 (not 2.13.0)" in note for note in arm.manifest["platform"]["oci_notes"])
    assert arm.labels["io.imagebuild.oci-platform"] == "linux/arm64"
    assert arm.manifest["runtime"] is not None  # the runtime's arm64 pins exist
    assert "requirements.linux-arm64.txt" in arm.target.runtime.requirements  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("target", "reason"),
    [
        ("rocm6.1-torch2.3", "platform rocm6.1 has no linux/arm64 build: ROCm publishes no arm64"),
        ("cuda12.1-torch2.3", "torch 2.3.0 (cuda) has no linux/arm64 build: the cu121 index"),
    ],
)
def test_a_platform_without_the_pieces_is_refused_with_the_reason(matrix, target: str, reason: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError, match=reason.replace("(", r"\(").replace(")", r"\)")):
        plan_for(matrix, matrix.target(target), oci="linux/arm64")


def test_a_platform_the_target_does_not_list_is_refused(matrix) -> None:  # type: ignore[no-untyped-def]
    text = (
        (ROOT / "matrix.yaml")
        .read_text()
        .replace("    oci_platforms: [linux/amd64, linux/arm64]", "    oci_platforms: [linux/amd64]")
    )
    target = load_text(text, ROOT / "matrix.yaml").target("local-cpu")
    with pytest.raises(ConfigError, match="target local-cpu is not built for linux/arm64"):
        plan_for(matrix, target, oci="linux/arm64")


def _with_component_rule(optional: bool) -> str:
    text = (ROOT / "matrix.yaml").read_text()
    runtimes = "    runtimes:\n      transformers-serve:\n"
    text = text.replace(
        runtimes,
        "    components:\n      imagebuild-kernels: {unavailable: no aarch64 build of these ops here}\n" + runtimes,
    )
    if optional:
        text = text.replace(
            "    experimental: []\n    optional: false\n  vllm-rocm:",
            "    experimental: []\n    optional: true\n  vllm-rocm:",
        )
    return text


def test_a_required_component_absent_on_the_platform_refuses() -> None:
    matrix = load_text(_with_component_rule(optional=False), ROOT / "matrix.yaml")
    with pytest.raises(ConfigError, match="component imagebuild-kernels has no linux/arm64 build: no aarch64 build"):
        for_oci(matrix.target("local-cpu"), matrix.model.oci_platforms, "linux/arm64")


def test_an_optional_component_absent_on_the_platform_is_left_out_and_recorded() -> None:
    matrix = load_text(_with_component_rule(optional=True), ROOT / "matrix.yaml")
    plan = plan_for(matrix, matrix.target("local-cpu"), oci="linux/arm64")
    entry = plan.manifest["components"]["imagebuild-kernels"]
    assert entry["included"] is False and "no linux/arm64 build: no aarch64 build" in entry["reason"]
    assert not any(s.name == "component-imagebuild-kernels" for s in plan.stages)
    assert any("leaves out imagebuild-kernels" in line for line in plan.describe())
    amd = plan_for(matrix, matrix.target("local-cpu"), oci="linux/amd64")
    assert amd.manifest["components"]["imagebuild-kernels"]["included"] is True


def test_arm64_gpu_arches_are_those_of_arm64_hosts(matrix) -> None:  # type: ignore[no-untyped-def]
    rules = matrix.model.oci_platforms["linux/arm64"]
    assert rules.platforms["cuda12.1"].arches == ["sm_90"]  # GH200
    assert rules.platforms["rocm6.1"].unavailable


REQS = "\n        requirements: runtimes/transformers-serve/requirements.linux-arm64"


@pytest.mark.parametrize(
    ("old", "new", "error"),
    [
        ("      cuda12.1:\n        base_image: nvidia", "      cuda12.9:\n        base_image: nvidia",
         "unknown platforms entry 'cuda12.9'; did you mean 'cuda12.1'?"),
        ('      "2.3":\n        cuda:', '      "2.9":\n        cuda:', "unknown torch entry '2.9'"),
        ('      "2.3":\n        cuda:', '      "2.3":\n        cpu:', "torch 2.3 has no cpu build"),
        ("      transformers-serve:" + REQS, "      transformers-srv:" + REQS,
         "unknown runtimes entry 'transformers-srv'"),
        ("oci_platforms:\n  linux/arm64:", "oci_platforms:\n  linux/amd64:",
         "linux/arm64 has no section under oci_platforms"),
    ],
)  # fmt: skip
def test_names_under_oci_platforms_must_exist(old: str, new: str, error: str) -> None:
    """A typo under oci_platforms would silently drop a refusal: one located line instead."""
    text = (ROOT / "matrix.yaml").read_text()
    assert old in text
    with pytest.raises(ConfigError) as exc:
        load_text(text.replace(old, new, 1), ROOT / "matrix.yaml")
    message = str(exc.value)
    assert message.startswith(str(ROOT / "matrix.yaml") + ":") and "\n" not in message
    assert error in message


def test_one_dockerfile_serves_every_platform_and_a_per_platform_copy_is_stale(matrix, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """issue 22: local-cpu's platforms share dockerfiles/local-cpu/Dockerfile; a leftover <os>-<arch>/ copy is drift."""
    from imagebuild.render import dockerfile as render

    target = matrix.target("local-cpu")
    amd, arm = (render.render_plan(plan_for(matrix, target, oci=oci), matrix) for oci in target.oci_platforms)
    assert amd.files["Dockerfile"] == arm.files["Dockerfile"]
    assert "manifest.json" in amd.files and "manifest.linux-arm64.json" in arm.files
    text = amd.files["Dockerfile"]
    assert "FROM os-${TARGETARCH} AS base" in text and "FROM os-${BUILDARCH} AS build-base" in text
    assert "FROM --platform=linux/arm64 " in text and "FROM --platform=linux/amd64 " in text
    (tmp_path / "local-cpu" / "linux-arm64").mkdir(parents=True)
    (tmp_path / "local-cpu" / "linux-arm64" / "Dockerfile").write_text("FROM scratch\n")
    assert any("per-platform copy" in line for line in render.stale(matrix, tmp_path))


def test_wheel_tags_cover_every_manylinux_level_of_the_glibc() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("cross", ROOT / "image" / "cross" / "cross.py")
    assert spec is not None and spec.loader is not None
    cross = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cross)
    tags = cross.platforms("aarch64")
    assert tags[-2:] == ["manylinux2014_aarch64", "linux_aarch64"] and "manylinux_2_17_aarch64" in tags
    assert "manylinux_2_28_aarch64" in tags and not any("x86_64" in t for t in tags)
    assert "manylinux1_x86_64" in cross.platforms("x86_64")


def test_the_cross_dockerfile_spells_each_platform_as_the_oci_platform_type_does(matrix) -> None:  # type: ignore[no-untyped-def]
    """issue 30: the stage suffix (${TARGETARCH}), apt's architecture and the wheel machine of each platform come from
    matrix/oci_platform.py, the one table of platform names."""
    from imagebuild.matrix.oci_platform import platform
    from imagebuild.render import dockerfile as render

    target = matrix.target("local-cpu")
    text = render.render_plan(plan_for(matrix, target, oci=target.oci_platforms[0]), matrix).files["Dockerfile"]
    for oci in target.oci_platforms:
        names = platform(oci)
        assert f"FROM --platform={names.oci} " in text and f" AS os-{names.architecture}\n" in text
        assert f"-o APT::Architecture={names.debian} " in text
        assert f"/opt/imagebuild-cross/cross.py platforms {names.machine})" in text
