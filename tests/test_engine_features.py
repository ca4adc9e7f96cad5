"""What an engine can do (issue 22): the image store read from `docker info`, BuildKit's version, the features and
the one error line naming a missing one; the push stream's digest on both image stores. The `docker info` and push
lines below are what Docker 20.10.24 and 26.1.5 printed on this project's build machine."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from imagebuild.engine.cli import built_image_id
from imagebuild.engine.docker import image_store
from imagebuild.engine.features import EngineFacts, vendored_buildkit
from imagebuild.engine.interface import smoke_ids
from imagebuild.engine.sdk import pushed_digest
from imagebuild.errors import ConfigError

DOCKER20_INFO = 'overlay2|[["Backing Filesystem","extfs"],["Supports d_type","true"],["Native Overlay Diff","true"]]'
DOCKER26_INFO = 'overlayfs|[["driver-type","io.containerd.snapshotter.v1"]]'
DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(("info", "store"), [(DOCKER20_INFO, "overlay2"), (DOCKER26_INFO, "containerd")])
def test_image_store_from_docker_info(info: str, store: str) -> None:
    driver, _, status = info.partition("|")
    assert image_store(driver, status) == store


def test_buildkit_version_is_the_one_the_release_vendors() -> None:
    assert vendored_buildkit("20.10.24+dfsg1") == "0.8.4"
    assert vendored_buildkit("26.1.5+dfsg1") == "0.13.2"
    assert vendored_buildkit("26.3.0") == "0.13.2"  # the nearest listed release below
    assert vendored_buildkit("28.5.2+dfsg4") == "0.25.2"  # the default engine (issue 29)
    assert vendored_buildkit("19.03.1") == "unknown"


def test_docker26_with_the_containerd_store_and_buildx_has_every_feature() -> None:
    facts = EngineFacts("26.1.5+dfsg1", "containerd", "0.13.2", buildx=True)
    assert facts.features() == {"multi-platform": True, "oci-media-types": True, "timestamp-rewriting": True}
    facts.require("oci-media-types", "publish --oci")  # no error


def test_docker20_lacks_every_feature_and_says_which_version_has_it() -> None:
    facts = EngineFacts("20.10.24+dfsg1", "overlay2", "0.8.4", buildx=False)
    assert facts.features() == {"multi-platform": False, "oci-media-types": False, "timestamp-rewriting": False}
    with pytest.raises(ConfigError) as caught:
        facts.require("oci-media-types", "publish --oci")
    line = str(caught.value)
    assert "\n" not in line and caught.value.exit_code == 2
    assert "publish --oci needs OCI media types on push" in line and "overlay2 image store" in line
    assert "Docker 26.1 with the containerd image store" in line
    with pytest.raises(ConfigError, match=r"timestamp rewriting.*BuildKit 0\.8\.4.*BuildKit 0\.13"):
        facts.require("timestamp-rewriting", "build")


def test_the_containerd_store_without_buildx_cannot_build_every_platform_at_once() -> None:
    facts = EngineFacts("26.1.5", "containerd", "0.13.2", buildx=False)
    assert facts.missing("multi-platform") == "no buildx"
    with pytest.raises(ValueError, match="unknown engine feature"):
        facts.missing("time-travel")


def test_push_digest_from_either_image_store() -> None:
    # graph-driver store (20.10): an aux PushResult
    assert pushed_digest({"aux": {"Tag": "staging-1", "Digest": DIGEST, "Size": 529}}, "staging-1") == DIGEST
    # containerd image store (26.1): only the final status line
    assert pushed_digest({"status": f"staging-1: digest: {DIGEST} size: 855"}, "staging-1") == DIGEST
    assert pushed_digest({"status": f"other: digest: {DIGEST} size: 855"}, "staging-1") is None  # another tag
    assert pushed_digest({"status": "Pushed", "id": "07588765f059"}, "staging-1") is None
    assert pushed_digest({"status": f"staging-1: digest: {DIGEST} size: 855" + " " * 300}, "staging-1") is None
    assert pushed_digest({"status": f"staging-1: digest: {DIGEST[:-1]} size: 855"}, "staging-1") is None


def test_a_staged_image_is_gated_by_config_or_manifest_digest() -> None:
    assert smoke_ids("sha256:config", "sha256:manifest") == ["sha256:config", "sha256:manifest"]
    assert smoke_ids("sha256:same", "sha256:same") == ["sha256:same"]
    assert smoke_ids("sha256:config", None) == ["sha256:config"]


@pytest.mark.docker
def test_the_built_image_id_is_the_engines_own_on_either_store(tmp_path: Path) -> None:
    """engine/cli.py built_image_id: the ID `docker run` and `docker tag` take. On the containerd store that is the
    manifest digest, not the config digest BuildKit's iidfile holds; on a graph-driver store the two are one."""
    import os
    import subprocess

    from imagebuild.engine.docker import find_engine

    engine = find_engine()
    (tmp_path / "Dockerfile").write_text(f"FROM local/debian:bookworm\nLABEL h1-test={tmp_path.name}\n")
    tag, iid = f"imagebuild-h1-test:{uuid.uuid4().hex[:8]}", tmp_path / "iid"
    flags = ["--provenance=false", "--output", "type=docker,oci-mediatypes=true"] if engine.mode == "buildx" else []
    argv = [*engine.build_prefix(), "-q", "--network", "host", *flags, "--iidfile", str(iid), "-t", tag, str(tmp_path)]
    built = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, **engine.env}, timeout=600)
    if built.returncode != 0:
        pytest.skip(f"no engine or no local base (scripts/setup.sh makes it): {built.stderr[-200:]}")
    try:
        inspect = [engine.client, "image", "inspect", "--format", "{{.Id}}", tag]
        own = subprocess.run(inspect, capture_output=True, text=True, check=True).stdout.strip()
        assert built_image_id(engine, iid, [tag]) == (own, None)
        if engine.store == "containerd" and engine.mode == "buildx":
            assert iid.read_text().strip() != own  # what the engine would answer "No such image" to
    finally:
        subprocess.run([engine.client, "rmi", tag], capture_output=True, check=False)
