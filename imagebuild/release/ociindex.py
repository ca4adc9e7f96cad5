"""One tag, several OCI platforms: the image index built from per-platform digests, and its check on read-back.

Each platform's image is pushed and verified by digest first (publish.publish_image); `assemble` then writes one
index whose children are exactly those digests, each with the platform its own config says, and `verify_index`
reads the tag back: an index (never one platform's image), the platforms asked for, the child digests pushed.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass

from imagebuild.engine.registry import Registry, RegistryError

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
INDEX_TYPES = (OCI_INDEX, DOCKER_LIST)


class IndexMismatch(RegistryError):
    """The index could not be assembled, or what the registry holds is not the index asked for."""


@dataclass(frozen=True)
class Child:
    """One platform's image in the index: its OCI platform and manifest digest."""

    platform: str  # linux/arm64
    digest: str


def _platform_of(config: Mapping[str, object]) -> str:
    return f"{config.get('os')}/{config.get('architecture')}"


def index_body(registry: Registry, repo: str, children: list[Child]) -> tuple[bytes, str]:
    """The index document for children (each checked: its config's os/architecture is the platform it stands for)."""
    if len({c.platform for c in children}) != len(children):
        raise IndexMismatch(f"{repo}: two images for one platform in {[c.platform for c in children]}")
    entries = []
    types = set()
    for child in children:
        body, media_type = registry.manifest(repo, child.digest)
        if "sha256:" + hashlib.sha256(body).hexdigest() != child.digest:
            raise IndexMismatch(f"{repo}@{child.digest}: the registry returned other bytes")
        _, config = registry.config(repo, child.digest)
        if _platform_of(config) != child.platform:
            raise IndexMismatch(f"{repo}@{child.digest} is a {_platform_of(config)} image, not {child.platform}")
        os_name, arch = child.platform.split("/", 1)
        platform: dict[str, str] = {"architecture": arch, "os": os_name}
        if isinstance(config.get("variant"), str):
            platform["variant"] = str(config["variant"])
        entries.append({"mediaType": media_type, "digest": child.digest, "size": len(body), "platform": platform})
        types.add(media_type)
    media_type = DOCKER_LIST if types == {DOCKER_MANIFEST} else OCI_INDEX
    doc = {"schemaVersion": 2, "mediaType": media_type, "manifests": entries}
    return json.dumps(doc, indent=2).encode(), media_type


def assemble(registry: Registry, repo: str, tag: str, children: list[Child]) -> str:
    """Write the index of children at repo:tag; returns its digest (checked against the bytes sent)."""
    body, media_type = index_body(registry, repo, children)
    digest = "sha256:" + hashlib.sha256(body).hexdigest()
    written = registry.put_manifest(repo, tag, body, media_type)
    if written and written != digest:
        raise IndexMismatch(f"{repo}:{tag}: the registry computed {written} for the index, not {digest}")
    return digest


def read_index(registry: Registry, repo: str, reference: str) -> dict[str, str]:
    """platform -> child digest of the index at reference; an error when it is one platform's image."""
    body, media_type = registry.manifest(repo, reference)
    doc = json.loads(body)
    if media_type not in INDEX_TYPES or "manifests" not in doc:
        raise IndexMismatch(f"{repo}:{reference} is a single image ({media_type}), not an index of platforms")
    children: dict[str, str] = {}
    for entry in doc["manifests"]:
        plat = entry.get("platform") or {}
        children[f"{plat.get('os')}/{plat.get('architecture')}"] = entry["digest"]
    return children


def verify_index(registry: Registry, repo: str, tag: str, index_digest: str, children: list[Child]) -> None:
    """The tag names the index index_digest, whose children are exactly these platforms and digests."""
    now = registry.digest(repo, tag)
    if now != index_digest:
        raise IndexMismatch(f"{repo}:{tag} points at {now}, not the index {index_digest}")
    found = read_index(registry, repo, tag)
    wanted = {c.platform: c.digest for c in children}
    if found != wanted:
        raise IndexMismatch(f"{repo}:{tag} holds {found}, expected {wanted}")
