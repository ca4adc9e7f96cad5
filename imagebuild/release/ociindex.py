"""One tag, several OCI platforms: the image index built from per-platform digests, and its check on read-back.

Each platform's image is pushed and verified by digest first (publish.publish_image); `assemble` then writes one
index whose children are exactly those digests, each with the platform its own config says, and `verify_index`
reads the tag back: an index (never one platform's image), the platforms asked for, the child digests pushed.

BuildKit's attestation manifests (buildx's default provenance: an index entry with platform unknown/unknown and
annotation vnd.docker.reference.type=attestation-manifest) are not platforms: the read-back lists them apart and
never counts them as children, so an index with or without them reads and verifies the same. The indexes this tool
writes leave them out (docs: README "What each engine produces"): their provenance records build times (the
index digest would change with every build) and each child is already signed and attested with cosign.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass

from imagebuild.engine.registry import Registry, RegistryError

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
INDEX_TYPES = (OCI_INDEX, DOCKER_LIST)
REFERENCE_TYPE = "vnd.docker.reference.type"  # BuildKit's annotation on an attestation manifest's index entry


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


def is_attestation(entry: Mapping[str, object]) -> bool:
    """An index entry that is BuildKit's attestation manifest for a sibling, not a platform's image."""
    annotations = entry.get("annotations")
    return isinstance(annotations, dict) and annotations.get(REFERENCE_TYPE) == "attestation-manifest"


def _entries(registry: Registry, repo: str, reference: str) -> tuple[str, list[dict[str, object]]]:
    """The index's media type and entries; an error when reference is one platform's image."""
    body, media_type = registry.manifest(repo, reference)
    doc = json.loads(body)
    entries = doc.get("manifests") if isinstance(doc, dict) else None
    if media_type not in INDEX_TYPES or not isinstance(entries, list):
        raise IndexMismatch(f"{repo}:{reference} is a single image ({media_type}), not an index of platforms")
    if not all(isinstance(e, dict) and isinstance(e.get("digest"), str) for e in entries):
        raise IndexMismatch(f"{repo}:{reference}: an index entry without a digest")
    return media_type, entries


# containerd's platforms.Normalize: the variant a client assumes when an entry names none, so `linux/arm64/v8`
# and `linux/arm64` are the same platform to a pull (containerd/platforms@v0.2.1:platforms.go, Normalize).
_DEFAULT_VARIANT = {"arm64": "v8", "amd64": "v1"}


def platform_key(plat: Mapping[str, object]) -> tuple[str, str, str]:
    """(os, architecture, variant) of an index entry's platform, the variant normalised as a pull does."""
    os_name, arch, variant = (plat.get(k) for k in ("os", "architecture", "variant"))
    if not isinstance(os_name, str) or not isinstance(arch, str) or not os_name or not arch:
        raise IndexMismatch(f"an index entry without os and architecture ({dict(plat)})")
    variant = variant if isinstance(variant, str) else ""
    return os_name, arch, "" if variant == _DEFAULT_VARIANT.get(arch) else variant


def read_index(registry: Registry, repo: str, reference: str) -> dict[str, str]:
    """platform -> child digest of the index at reference (attestation manifests left out); an error when it is
    one platform's image, when an entry names no platform, or when two entries are for one (os, architecture,
    variant) or one os/architecture: a pull takes the first such entry, so a second one (unsigned, say) would be
    what verification sees, or the other way round. Keys are `os/architecture`, with `/variant` for a variant
    other than the architecture's default."""
    _, entries = _entries(registry, repo, reference)
    children: dict[str, str] = {}
    seen: dict[str, str] = {}
    for entry in entries:
        if is_attestation(entry):
            continue
        plat = entry.get("platform")
        os_name, arch, variant = platform_key(plat if isinstance(plat, dict) else {})
        short = f"{os_name}/{arch}"
        key = f"{short}/{variant}" if variant else short
        if short in seen:
            raise IndexMismatch(
                f"{repo}:{reference}: two entries for {short} ({seen[short]} and {key}): which one a pull gets "
                "is not what every check sees"
            )
        seen[short] = key
        children[key] = str(entry["digest"])
    return children


@dataclass(frozen=True)
class MediaTypes:
    """What the registry serves for a digest: its media type and, for an index, each platform child's."""

    media_type: str
    children: dict[str, str]  # platform -> the child manifest's media type, as the registry serves it
    attestations: list[str]  # digests of BuildKit attestation manifests in the index

    def as_dict(self) -> dict[str, object]:
        return {"media_type": self.media_type, "children": self.children, "attestations": self.attestations}


def media_types(registry: Registry, repo: str, digest: str) -> MediaTypes:
    """Read digest back: its media type, and each child's (its own manifest fetched, not the entry's claim)."""
    _, media_type = registry.manifest(repo, digest)
    if media_type not in INDEX_TYPES:
        return MediaTypes(media_type, {}, [])
    _, entries = _entries(registry, repo, digest)
    attestations = [str(e["digest"]) for e in entries if is_attestation(e)]
    children = {}
    for platform, child in read_index(registry, repo, digest).items():
        children[platform] = registry.manifest(repo, child)[1]
    return MediaTypes(media_type, children, attestations)


def platform_manifest(registry: Registry, repo: str, digest: str, platform: str | None) -> str:
    """digest itself when it is one image, else its child for platform (an engine that stores an image as an
    index, BuildKit's attestations beside it, pushes the index): the manifest an index of ours may list.

    Without a platform: the only platform child of an index that holds one (what a pull of it resolves to on
    every client), else digest itself (an image of several platforms stays the index it is)."""
    _, media_type = registry.manifest(repo, digest)
    if media_type not in INDEX_TYPES:
        return digest
    children = read_index(registry, repo, digest)
    if platform is None:
        return next(iter(children.values())) if len(children) == 1 else digest
    if platform not in children:
        raise IndexMismatch(f"{repo}@{digest} is an index without {platform} (it holds {sorted(children)})")
    return children[platform]


def verify_index(registry: Registry, repo: str, tag: str, index_digest: str, children: list[Child]) -> None:
    """The tag names the index index_digest, whose children are exactly these platforms and digests."""
    now = registry.digest(repo, tag)
    if now != index_digest:
        raise IndexMismatch(f"{repo}:{tag} points at {now}, not the index {index_digest}")
    found = read_index(registry, repo, tag)
    wanted = {c.platform: c.digest for c in children}
    if found != wanted:
        raise IndexMismatch(f"{repo}:{tag} holds {found}, expected {wanted}")
