"""The image reference travels by record, not by tag: smoke and publish of a TARGET take the image ID its build
recorded, even after the tag moved; a report carries the reference on (engine-backed: real images)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from imagebuild.building.buildkit import TargetResult, image_ref
from imagebuild.engine import docker as engine_mod
from imagebuild.engine.sdk import DockerEngine
from imagebuild.plan import imageref
from imagebuild.plan.imageref import ImageRef, from_report, read_record, write_record
from imagebuild.release.publish import PublishResult


def _image(client, label: str):  # noqa: ANN001, ANN202 - docker SDK objects
    dockerfile = f"FROM local/debian:bookworm\nLABEL io.imagebuild.test-ref={label}\n".encode()
    image, _ = client.images.build(fileobj=io.BytesIO(dockerfile), rm=True, network_mode="host")
    return image


@pytest.fixture
def two_images(engine: str):  # noqa: ANN201
    client = engine_mod.docker_client()
    first, second = _image(client, "first"), _image(client, "second")
    assert first.id != second.id
    yield client, first, second
    for tag in ("imagebuild-reftest:t",):
        try:
            client.images.remove(tag, noprune=True)
        except Exception:  # noqa: BLE001 - cleanup only
            pass


def test_a_target_means_the_recorded_image_not_where_its_tag_points_now(
    two_images, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    client, first, second = two_images
    monkeypatch.setattr(imageref, "LOCAL_REPO", "imagebuild-reftest")
    second.tag("imagebuild-reftest", "t")  # the tag moved to another image after the build
    write_record(tmp_path, ImageRef(first.id, "t", ("imagebuild-reftest:t",)))
    name, found, ref = engine_mod.resolve_image(DockerEngine(client), "t", ["t"], tmp_path)
    assert (name, found.id, ref.image_id, ref.recorded_by) == ("t", first.id, first.id, "build")
    # Without a record, the tag decides, and the reference says so.
    imageref.record_path(tmp_path, "t").unlink()
    _, found, ref = engine_mod.resolve_image(DockerEngine(client), "t", ["t"], tmp_path)
    assert (found.id, ref.recorded_by) == (second.id, "engine")


def test_the_reference_is_written_by_build_and_read_back_from_each_report(tmp_path: Path) -> None:
    result = TargetResult("t", True, "sha256:" + "1" * 64, ["imagebuild:t"], 1.0, 0, 1, None, [], "log", "Df", [])
    ref = image_ref(result)
    assert ref is not None and write_record(tmp_path, ref) == imageref.record_path(tmp_path, "t")
    assert read_record(tmp_path, "t") == ref
    published = PublishResult(image="t", image_id=ref.image_id, repository="127.0.0.1:5000/x", ref=ref)
    published.digest, published.refs = "sha256:" + "2" * 64, ["127.0.0.1:5000/x:t"]
    published.write(tmp_path / "publish.json")
    back = from_report(json.loads((tmp_path / "publish.json").read_text()))
    assert back is not None and back.image_id == ref.image_id and back.target == "t"
    assert back.digest_ref == "127.0.0.1:5000/x@sha256:" + "2" * 64 and back.refs == ("127.0.0.1:5000/x:t",)
    assert from_report({"image_id": ref.image_id}) == ImageRef(ref.image_id, recorded_by="report")
    assert image_ref(TargetResult("t", False, None, [], 1.0, 0, 1, "x", [], "log", "Df", [])) is None
