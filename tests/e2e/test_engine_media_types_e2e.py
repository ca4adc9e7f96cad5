"""What each engine pushes, read by an independent client (skopeo, from Debian) (issue 22).

On the current engine (Docker 26.1, containerd image store): one buildx build of linux/amd64 and linux/arm64 is one
local image; one push (publish's own push, which reads the digest from the engine's stream) puts an OCI image
index of OCI manifests in the registry, each child the platform it claims, its digest the sha256 of its bytes.
BuildKit's attestation manifests in an index are listed apart and never taken for a platform.
On Docker 20.10 (IMAGEBUILD_ENGINE=docker20): the push of a one-platform image is a Docker schema-2 manifest.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import requests
import skopeo
from e2e_helpers import imagebuild, unique

from imagebuild.engine.docker import Engine, find_engine
from imagebuild.engine.registry import Registry, RepoRef
from imagebuild.engine.sdk import docker_engine
from imagebuild.errors import ConfigError
from imagebuild.plan.imageref import ImageRef
from imagebuild.release.index import PlatformImage, push_children, write_indexes
from imagebuild.release.ociindex import DOCKER_MANIFEST, OCI_INDEX, OCI_MANIFEST, media_types, read_index, verify_index
from imagebuild.release.publish import PublishResult

pytestmark = [pytest.mark.docker, pytest.mark.registry]

ARM64_BASE = "127.0.0.1:5000/imagebuild-base/debian:bookworm-arm64"
DOCKERFILE = f"""FROM local/debian:bookworm AS base-amd64
FROM {ARM64_BASE} AS base-arm64
FROM base-${{TARGETARCH}}
RUN uname -m > /machine
"""
MACHINES = {"linux/amd64": "x86_64", "linux/arm64": "aarch64"}


def _build(engine: Engine, ctx: Path, name: str, *flags: str) -> None:
    ctx.mkdir(parents=True, exist_ok=True)
    (ctx / "Dockerfile").write_text(DOCKERFILE)
    argv = [*engine.build_prefix(), "--network", "host", "--platform", ",".join(MACHINES), *flags]
    argv += ["--output", f"type=image,name={name},oci-mediatypes=true", str(ctx)]
    proc = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, **engine.env}, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]


def _current_engine() -> Engine:
    engine = find_engine()
    if os.environ.get("IMAGEBUILD_ENGINE") == "docker20":
        pytest.skip("Docker 20.10 has no multi-platform build: test_docker20_pushes_docker_schema2 covers it")
    try:  # the default engine must be the current one: a 20.10 default is a setup error, not a skip
        engine.require("multi-platform", "the current-engine media type test")
    except ConfigError as exc:
        pytest.fail(f"{exc} (run scripts/setup.sh: it makes Docker 28.5 the default engine)")
    return engine


def test_one_build_one_push_is_an_oci_index_of_oci_manifests(engine: str, registry: str, tmp_path: Path) -> None:
    current = _current_engine()
    repo = RepoRef.parse(f"{registry}/{unique('e2e-oci')}")
    _build(current, tmp_path / "ctx", f"{repo}:one", "--provenance=false")
    digest = docker_engine().push(str(repo), "one")  # the engine's stream: a status line, no aux (containerd store)

    raw = skopeo.raw(f"{repo}:one")
    assert skopeo.sha256(raw) == digest
    index = json.loads(raw)
    assert index["mediaType"] == OCI_INDEX
    platforms = {f"{m['platform']['os']}/{m['platform']['architecture']}": m for m in index["manifests"]}
    assert set(platforms) == set(MACHINES) and len(index["manifests"]) == 2  # no attestation: --provenance=false
    for platform, entry in platforms.items():
        assert entry["mediaType"] == OCI_MANIFEST
        child = skopeo.raw(f"{repo}@{entry['digest']}")
        assert skopeo.sha256(child) == entry["digest"] and len(child) == entry["size"]
        assert json.loads(child)["mediaType"] == OCI_MANIFEST
        config = skopeo.config(f"{repo}@{entry['digest']}")
        assert f"{config['os']}/{config['architecture']}" == platform
    # publish's read-back agrees with skopeo
    types = media_types(Registry(repo), repo.repo, digest)
    assert types.media_type == OCI_INDEX and types.children == dict.fromkeys(MACHINES, OCI_MANIFEST)
    assert types.attestations == []


def test_buildkit_attestations_are_not_platforms(engine: str, registry: str, tmp_path: Path) -> None:
    """buildx's default provenance adds an attestation manifest (unknown/unknown) per platform: the read-back lists
    them apart; publish's index path takes each platform's manifest out of the pushed index and writes an index of
    those alone (OCI, no attestations), which verifies."""
    current = _current_engine()
    repo = RepoRef.parse(f"{registry}/{unique('e2e-attest')}")
    local = f"{repo}:with-attestations"
    _build(current, tmp_path / "ctx", local, "--provenance=mode=min")
    client = docker_engine()
    image = client.image(local)  # one local image (an index) for both platforms
    images = [PlatformImage(p, local, image, ImageRef(str(image.id), "e2e")) for p in MACHINES]
    results = {p: PublishResult(image=local, image_id=str(image.id), repository=str(repo)) for p in MACHINES}
    children = push_children(client, images, repo, results, lambda _: None)

    staged = json.loads(skopeo.raw(f"{repo}@{image.id}"))  # what the engine pushed: the index, attestations too
    kinds = [m.get("annotations", {}).get("vnd.docker.reference.type") for m in staged["manifests"]]
    assert kinds.count("attestation-manifest") == 2 and len(kinds) == 4, staged
    reg = Registry(repo)
    assert read_index(reg, repo.repo, str(image.id)) == {c.platform: c.digest for c in children}
    types = media_types(reg, repo.repo, str(image.id))
    assert len(types.attestations) == 2 and types.children == dict.fromkeys(MACHINES, OCI_MANIFEST)
    for child in children:  # each child result: the platform's manifest, its type read back
        assert results[child.platform].digest == child.digest
        assert results[child.platform].media_type == OCI_MANIFEST

    index = PublishResult(image="e2e", image_id=str(image.id), repository=str(repo))
    write_indexes(repo, ["v1"], children, index, lambda _: None)
    written = skopeo.raw(f"{repo}:v1")
    assert skopeo.sha256(written) == index.digest and index.media_type == OCI_INDEX and index.attestations == []
    doc = json.loads(written)
    assert doc["mediaType"] == OCI_INDEX and len(doc["manifests"]) == 2
    assert {f"{m['platform']['os']}/{m['platform']['architecture']}": m["digest"] for m in doc["manifests"]} == {
        c.platform: c.digest for c in children
    }
    assert index.platform_media_types == dict.fromkeys(MACHINES, OCI_MANIFEST)
    verify_index(reg, repo.repo, "v1", str(index.digest), children)


def test_docker20_pushes_docker_schema2(engine: str, registry: str, tmp_path: Path) -> None:
    """The compatibility engine's push of one platform's image: a Docker schema-2 manifest, digest read back."""
    found = find_engine()
    if found.store == "containerd":
        pytest.skip("the current engine: covered by the OCI tests above (IMAGEBUILD_ENGINE=docker20 runs this)")
    repo = RepoRef.parse(f"{registry}/{unique('e2e-docker20')}")
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "Dockerfile").write_text("FROM local/debian:bookworm\nRUN uname -m > /machine\n")
    argv = [*found.build_prefix(), "-q", "--network", "host", "-t", f"{repo}:one", str(ctx)]
    proc = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, **found.env}, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    digest = docker_engine().push(str(repo), "one")
    raw = skopeo.raw(f"{repo}:one")
    assert skopeo.sha256(raw) == digest and json.loads(raw)["mediaType"] == DOCKER_MANIFEST
    assert media_types(Registry(repo), repo.repo, digest).media_type == DOCKER_MANIFEST


def test_doctor_reports_the_engine_and_refuses_a_missing_feature(engine: str) -> None:
    found = find_engine()
    run = imagebuild("doctor", "--json")
    assert run.returncode in (0, 1), run.output[-2000:]  # 1: this host's GPU facts, not the engine's
    reported = json.loads(run.stdout)["engine"]
    assert reported["version"] == found.server_version and reported["store"] == found.store
    assert reported["buildkit"] == found.buildkit != "unknown"
    features = {f["name"]: f["available"] for f in reported["features"]}
    assert features == found.facts.features()
    assert features["multi-platform"] == (found.store == "containerd")
    refused = imagebuild("doctor", "--require", "multi-platform")
    if found.has("multi-platform"):
        assert refused.returncode != 2, refused.output[-2000:]
        return
    errors = [line for line in refused.stderr.splitlines() if line.startswith("error:")]
    assert refused.returncode == 2 and len(errors) == 1, refused.output[-2000:]
    assert "multi-platform in one build" in errors[0] and "Docker 26.1" in errors[0], errors


def test_publish_oci_on_an_engine_without_it_pushes_nothing(local_cpu: Any, registry: str) -> None:
    """publish --oci on Docker 20.10: one error line naming the feature and the engine that has it, exit 2, and
    the repository never exists (nothing pushed, not even a staging tag)."""
    found = find_engine()
    if found.has("oci-media-types"):
        pytest.skip("the current engine has OCI media types (IMAGEBUILD_ENGINE=docker20 runs this)")
    repo = unique("e2e-oci-refused")
    run = imagebuild("publish", "local-cpu", "--platform", "linux/amd64", "--oci", "--registry", f"{registry}/{repo}")
    errors = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert run.returncode == 2 and len(errors) == 1, run.output[-2000:]
    assert "OCI media types on push" in errors[0] and "Docker 26.1 with the containerd image store" in errors[0]
    tags = requests.get(f"http://{registry}/v2/{repo}/tags/list", timeout=10)
    assert tags.status_code == 404, tags.text  # NAME_UNKNOWN: no push reached the registry
