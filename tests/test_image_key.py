"""ImageKey: the one place names, tags, folders and record paths are made (issue 20)."""

from __future__ import annotations

from pathlib import Path

from imagebuild.building.specs import PlanOptions, plan
from imagebuild.matrix import load_matrix
from imagebuild.plan.image_key import ImageKey, arch_variant
from imagebuild.plan.target_plan import plan_for

REPO = Path(__file__).resolve().parents[1]


def test_first_platform_keeps_the_plain_name_others_get_their_suffix() -> None:
    key = ImageKey("local-cpu", "linux/amd64", ("linux/amd64", "linux/arm64"))
    arm = key.on("linux/arm64")
    assert (key.name, key.folder, key.records) == ("local-cpu", "local-cpu", "local-cpu")
    assert arm.name == "local-cpu-linux-arm64"
    assert (arm.folder, arm.records) == ("local-cpu", "local-cpu/linux-arm64")  # one Dockerfile for both (issue 22)
    assert (key.manifest_name, arm.manifest_name) == ("manifest.json", "manifest.linux-arm64.json")
    assert arm.smoke_dir(Path("/r")) == Path("/r/build/smoke/local-cpu/linux-arm64")
    assert arm.publish_dir(Path("/r")) == Path("/r/build/publish/local-cpu/linux-arm64")
    assert arm.tags("abc", ["{target}-rc1"]) == [
        "imagebuild:local-cpu-linux-arm64",
        "imagebuild:local-cpu-linux-arm64-abc",
        "imagebuild:local-cpu-rc1-linux-arm64",
    ]
    assert [k.oci for k in arm.every_platform()] == ["linux/amd64", "linux/arm64"]


def test_a_non_default_resolution_gets_names_of_its_own() -> None:
    matrix = load_matrix(REPO / "matrix.yaml")
    (spec,) = plan(matrix, ["rocm6.1-torch2.3"], PlanOptions(arch="gfx942"), env={})
    assert spec.plan is not None
    key = spec.plan.image
    assert (key.variant, key.arches, key.default_arches) == ("gfx942", ("gfx942",), ("gfx90a", "gfx942"))
    assert spec.target == key.name == "rocm6.1-torch2.3-gfx942"
    assert spec.tags[0] == "imagebuild:rocm6.1-torch2.3-gfx942"
    assert key.records == "rocm6.1-torch2.3-gfx942" and key.folder == "rocm6.1-torch2.3"  # files: build/render/
    assert spec.log_path.name == "rocm6.1-torch2.3-gfx942.log"
    (default,) = plan(matrix, ["rocm6.1-torch2.3"], PlanOptions(arch="gfx90a;gfx942"), env={})
    assert default.plan is not None and default.plan.image.variant == "" and default.target == "rocm6.1-torch2.3"
    assert ImageKey.from_labels(spec.labels) == key  # the build label carries it to publish and promote


def test_what_a_tag_promises() -> None:
    key = ImageKey("t", "linux/amd64", ("linux/amd64", "linux/arm64"), "gfx942", ("gfx942",), ("gfx90a", "gfx942"))
    assert key.promise("t").arches == ("gfx90a", "gfx942")  # the plain name: the matrix default
    assert key.promise("t-gfx942-abc").arches == ("gfx942",)
    assert key.promise("t").platforms == ("linux/amd64",)
    assert key.promise("t", index=True).platforms == ("linux/amd64", "linux/arm64")
    assert key.promise("t-linux-arm64").platforms == ("linux/arm64",)


def test_arch_variant_is_a_tag_and_bounded() -> None:
    assert arch_variant(["gfx942:xnack-", "sm_90+PTX"]) == "gfx942_xnack--sm_90pPTX"
    long = arch_variant([f"gfx{n}" for n in range(900, 960)])
    assert long.startswith("arches-") and len(long) <= 40


def test_labels_that_do_not_fit_are_no_key() -> None:
    assert ImageKey.from_labels({ImageKey.LABEL: "{"}) is None
    assert ImageKey.from_labels({ImageKey.LABEL: '{"target": 1}'}) is None
    assert ImageKey.from_labels({ImageKey.LABEL: "x" * 20000}) is None
    assert ImageKey.from_labels(None) is None
    matrix = load_matrix(REPO / "matrix.yaml")
    key = plan_for(matrix, matrix.target("local-cpu")).image
    assert ImageKey.from_labels({ImageKey.LABEL: key.label()}) == key


def test_a_name_given_to_smoke_or_publish_means_the_plan_s_keys() -> None:
    import pytest

    from imagebuild.errors import ConfigError
    from imagebuild.plan.keys import named

    found = named(REPO / "matrix.yaml", "local-cpu")
    assert [k.name for k in found.keys] == ["local-cpu", "local-cpu-linux-arm64"]
    assert found.listed == ("linux/amd64", "linux/arm64") and "rocm6.1-torch2.3" in found.targets
    assert [k.name for k in named(REPO / "matrix.yaml", "local-cpu", ["linux/arm64"]).keys] == ["local-cpu-linux-arm64"]
    assert named(REPO / "matrix.yaml", "rocm6.1-torch2.3-gfx942").keys == ()  # an image name: the engine resolves it
    with pytest.raises(ConfigError, match="is not built for linux/s390x"):
        named(REPO / "matrix.yaml", "local-cpu", ["linux/s390x"])
    with pytest.raises(ConfigError, match="--platform needs a TARGET"):
        named(REPO / "matrix.yaml", "busybox:1", ["linux/amd64"])
