"""Files of a pushed image read from its layers (release/image_files.py), against the loopback registry: the top
layer that holds a file wins, a layer over the bound is never fetched, a blob is bounded before and after its
download."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
import uuid

import pytest
import requests

from imagebuild.engine.registry import Registry, RegistryError, RepoRef
from imagebuild.release import image_files

REGISTRY = "127.0.0.1:5000"
pytestmark = pytest.mark.registry


def _layer(files: dict[str, bytes]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for name, body in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    return gzip.compress(raw.getvalue(), mtime=0)


def _put_blob(repo: str, body: bytes) -> dict[str, object]:
    digest = "sha256:" + hashlib.sha256(body).hexdigest()
    start = requests.post(f"http://{REGISTRY}/v2/{repo}/blobs/uploads/", timeout=10)
    start.raise_for_status()
    location = start.headers["Location"]
    url = location if location.startswith("http") else f"http://{REGISTRY}{location}"
    sep = "&" if "?" in url else "?"
    requests.put(f"{url}{sep}digest={digest}", data=body, timeout=30).raise_for_status()
    return {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": digest, "size": len(body)}


@pytest.fixture
def pushed() -> tuple[str, str]:
    try:
        requests.get(f"http://{REGISTRY}/v2/", timeout=5).raise_for_status()
    except requests.RequestException as exc:
        pytest.skip(f"no registry on {REGISTRY} (scripts/setup.sh starts one): {exc}")
    repo = f"imagebuild-test/image-files-{uuid.uuid4().hex[:8]}"
    layers = [
        _put_blob(repo, _layer({"opt/imagebuild/manifest.json": b'{"old": true}', "etc/x": b"x"})),
        _put_blob(repo, _layer({"./opt/imagebuild/manifest.json": b'{"new": true}'})),
        _put_blob(repo, _layer({"opt/imagebuild/sbom.json": b'{"bomFormat": "CycloneDX"}'})),
    ]
    config = json.dumps({"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers"}}).encode()
    cfg = {**_put_blob(repo, config), "mediaType": "application/vnd.oci.image.config.v1+json"}
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json", "config": cfg}
    body = json.dumps({**manifest, "layers": layers}).encode()
    answer = requests.put(
        f"http://{REGISTRY}/v2/{repo}/manifests/v1",
        data=body,
        headers={"Content-Type": "application/vnd.oci.image.manifest.v1+json"},
        timeout=10,
    )
    answer.raise_for_status()
    return repo, answer.headers["Docker-Content-Digest"]


def test_the_topmost_layer_holding_each_file_wins(pushed: tuple[str, str]) -> None:
    repo, digest = pushed
    registry = Registry(RepoRef.parse(f"{REGISTRY}/{repo}"))
    found = image_files.read_files(
        registry, repo, digest, ["/opt/imagebuild/sbom.json", "/opt/imagebuild/manifest.json"]
    )
    assert found == {
        "/opt/imagebuild/sbom.json": b'{"bomFormat": "CycloneDX"}',
        "/opt/imagebuild/manifest.json": b'{"new": true}',  # the upper layer's, not the first one's
    }
    assert image_files.read_files(registry, repo, digest, ["/opt/imagebuild/none.json"]) == {}


def test_a_layer_over_the_bound_is_not_fetched(pushed: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    repo, digest = pushed
    registry = Registry(RepoRef.parse(f"{REGISTRY}/{repo}"))
    monkeypatch.setattr(image_files, "LAYER_LIMIT", 8)  # every layer is larger
    fetched: list[object] = []
    monkeypatch.setattr(registry, "blob", lambda *a: fetched.append(a) or b"")
    assert image_files.read_files(registry, repo, digest, ["/opt/imagebuild/sbom.json"]) == {} and fetched == []


def test_a_blob_is_bounded_by_its_descriptor_and_by_its_bytes(pushed: tuple[str, str]) -> None:
    repo, digest = pushed
    registry = Registry(RepoRef.parse(f"{REGISTRY}/{repo}"))
    real = json.loads(registry.manifest(repo, digest)[0])["layers"][0]
    assert registry.blob(repo, real, 1 << 20)[:2] == b"\x1f\x8b"  # gzip, as pushed
    with pytest.raises(RegistryError, match="over the"):  # refused before the download
        registry.blob(repo, real, 4)
    with pytest.raises(RegistryError, match="not that blob"):  # a descriptor that understates its size
        registry.blob(repo, {**real, "size": 4}, 16)
