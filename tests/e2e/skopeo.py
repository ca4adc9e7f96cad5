"""An independent reader of what the registry holds: skopeo (Debian's, installed by scripts/setup.sh) (issue 22).

`published_as_read` checks a tag the way a user's client sees it: the raw bytes' digest, the media types of the
index and of each child manifest (each fetched by its own digest), each child's platform from its own config."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from typing import Any

import pytest

from imagebuild.release.ociindex import DOCKER_LIST, DOCKER_MANIFEST, OCI_INDEX, OCI_MANIFEST, is_attestation

MANIFEST_OF = {OCI_INDEX: OCI_MANIFEST, DOCKER_LIST: DOCKER_MANIFEST}


def _skopeo(*args: str) -> bytes:
    if shutil.which("skopeo") is None:
        pytest.fail("skopeo is not installed (scripts/setup.sh installs it)")
    proc = subprocess.run(["skopeo", *args], capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-2000:]
    return proc.stdout


def raw(ref: str) -> bytes:
    """The manifest (or index) bytes at ref, exactly as the registry serves them."""
    return _skopeo("inspect", "--raw", "--tls-verify=false", f"docker://{ref}")


def config(ref: str) -> dict[str, Any]:
    return json.loads(_skopeo("inspect", "--config", "--tls-verify=false", f"docker://{ref}"))


def sha256(body: bytes) -> str:
    return "sha256:" + hashlib.sha256(body).hexdigest()


def published_as_read(repo: str, tag: str, index_type: str) -> dict[str, str]:
    """Assert repo:tag is an index of index_type whose children are manifests of the matching type, each of the
    platform it is listed for and the digest of its bytes; returns platform -> child digest (attestations apart)."""
    body = raw(f"{repo}:{tag}")
    doc = json.loads(body)
    assert doc["mediaType"] == index_type, (doc["mediaType"], index_type)
    children = {}
    for entry in doc["manifests"]:
        if is_attestation(entry):
            continue
        child = raw(f"{repo}@{entry['digest']}")
        assert sha256(child) == entry["digest"] and len(child) == entry["size"], entry
        assert entry["mediaType"] == json.loads(child)["mediaType"] == MANIFEST_OF[index_type], entry
        platform = f"{entry['platform']['os']}/{entry['platform']['architecture']}"
        seen = config(f"{repo}@{entry['digest']}")
        assert f"{seen['os']}/{seen['architecture']}" == platform, (platform, seen["architecture"])
        children[platform] = entry["digest"]
    return children
