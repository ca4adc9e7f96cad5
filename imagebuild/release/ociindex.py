"""One tag, several OCI platforms: the image index built from per-platform digests, and its check on read-back.

Each platform's image is pushed and verified by digest first (publish.publish_image); `assemble` then writes one
index whose children are exactly those digests, each with the platform its own config says, and `verify_index`
reads the tag back: an index (never one platform's image), the platforms asked for, the child digests pushed.

BuildKit's attestation manifests (buildx's default provenance: an index entry with platform unknown/unknown and
annotation vnd.docker.reference.type=attestation-manifest) are not platforms: the read-back lists them apart and
never counts them as children, so an index with or without them reads and verifies the same. The indexes this tool
writes leave them out (docs/reference.md: "Engines: the details"): their provenance records build times (the
index digest would change with every build) and each child is already signed and attested with cosign.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from imagebuild.engine.registry import CONFIG_LIMIT, MANIFEST_LIMIT, Registry, RegistryError, RepoRef
from imagebuild.matrix.oci_platform import default_variant

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


ATTESTATION = "attestation-manifest"
REFERENCE_DIGEST = "vnd.docker.reference.digest"  # the sibling an attestation manifest is about
IN_TOTO = "application/vnd.in-toto+json"  # the only layer type of BuildKit's attestation manifests
SINGLE_TYPES = (OCI_MANIFEST, DOCKER_MANIFEST)
UNKNOWN = ("unknown", "unknown", "")
# Entries an index may hold: one per platform and one attestation manifest each; real ones hold a handful (the
# matrix's targets have 1 or 2 platforms). Each entry costs two registry reads, so the count is bounded first.
MAX_ENTRIES = 64
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


def is_attestation(entry: Mapping[str, object]) -> bool:
    """An entry that CLAIMS to be an attestation manifest rather than a platform's image: annotated as one, or
    listed for platform unknown/unknown. A claim only: `checked_index` holds it to what the manifest really is,
    and refuses the index when it is not (an annotation alone once hid an unsigned linux/amd64 image, issue 34)."""
    annotations = entry.get("annotations")
    annotations = annotations if isinstance(annotations, dict) else {}
    plat = entry.get("platform")
    unknown = isinstance(plat, dict) and (plat.get("os"), plat.get("architecture")) == ("unknown", "unknown")
    return unknown or annotations.get(REFERENCE_TYPE) == ATTESTATION or REFERENCE_DIGEST in annotations


@dataclass(frozen=True)
class CheckedIndex:
    """An index whose every entry was held to its child: media type, size, platform (from the child's config),
    and attestations that are attestations of a sibling."""

    media_type: str
    children: dict[str, str]  # platform key (read_index's) -> the child manifest's digest
    child_types: dict[str, str]  # platform key -> the child manifest's media type, as the registry serves it
    attestations: list[str]  # digests of the attestation manifests (each about one of children)


def _field(entry: Mapping[str, object], key: str, kind: type, where: str) -> object:
    value = entry.get(key)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise IndexMismatch(f"{where}: '{key}' is not a {kind.__name__}")
    return value


def _parse_index(body: bytes, media_type: str, where: str) -> list[dict[str, object]]:
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):
        raise IndexMismatch(f"{where}: the index is not JSON") from None
    entries = doc.get("manifests") if isinstance(doc, dict) else None
    if not isinstance(entries, list):
        raise IndexMismatch(f"{where} is a single image ({media_type}), not an index of platforms")
    if doc.get("mediaType", media_type) != media_type:
        raise IndexMismatch(f"{where}: served as {media_type}, its body says {str(doc.get('mediaType'))[:80]}")
    if len(entries) > MAX_ENTRIES:
        raise IndexMismatch(f"{where}: {len(entries)} index entries, over the {MAX_ENTRIES} read here")
    if not entries:
        raise IndexMismatch(f"{where}: an index without entries")
    for n, entry in enumerate(entries):
        at = f"{where} entry {n}"
        if not isinstance(entry, dict):
            raise IndexMismatch(f"{at} is not an object")
        digest = _field(entry, "digest", str, at)
        if not _DIGEST.fullmatch(str(digest)):
            raise IndexMismatch(f"{at}: an index entry without a sha256 digest")
        if _field(entry, "mediaType", str, at) not in SINGLE_TYPES:
            raise IndexMismatch(f"{at}: media type {str(entry['mediaType'])[:80]} is not one image's manifest")
        if not 0 < int(_field(entry, "size", int, at)) <= MANIFEST_LIMIT:  # type: ignore[call-overload]
            raise IndexMismatch(f"{at}: size {entry['size']} is not that of a manifest")
        for key in ("platform", "annotations"):
            if key in entry and not isinstance(entry[key], dict):
                raise IndexMismatch(f"{at}: '{key}' is not an object")
    return entries


def _child(
    registry: Registry, repo: str, entry: Mapping[str, object], at: str
) -> tuple[dict[str, object], dict[str, object] | None]:
    """The child manifest an entry names, held to the entry's media type and size; its config too unless the
    entry claims to be an attestation (whose config says unknown/unknown, and is no platform's)."""
    digest = str(entry["digest"])
    body, served = registry.manifest(repo, digest)  # bounded, and checked against the digest
    if len(body) != entry["size"]:
        raise IndexMismatch(f"{at}: the entry says {entry['size']} bytes, {digest[:19]} is {len(body)}")
    try:
        manifest = json.loads(body)
    except (ValueError, RecursionError):
        raise IndexMismatch(f"{at}: {digest[:19]} is not JSON") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("config"), dict):
        raise IndexMismatch(f"{at}: {digest[:19]} is not one image's manifest (no config)")
    claimed = entry["mediaType"]
    if served != claimed or manifest.get("mediaType", claimed) != claimed:
        raise IndexMismatch(
            f"{at}: the entry says {claimed}, {digest[:19]} is served as {served[:80]} "
            f"and says {str(manifest.get('mediaType'))[:80]}"
        )
    if is_attestation(entry):
        return manifest, None
    try:
        config = json.loads(registry.blob(repo, manifest["config"], CONFIG_LIMIT))
    except (ValueError, RecursionError):
        raise IndexMismatch(f"{at}: the config of {digest[:19]} is not JSON") from None
    return manifest, config if isinstance(config, dict) else {}


def _attestation_refusal(entry: Mapping[str, object], manifest: Mapping[str, object], images: set[str]) -> str | None:
    """None when the entry is an attestation manifest about one of images (the index's platform children): BuildKit's
    annotation, platform unknown/unknown, a sibling referenced, in-toto layers only; else what it lacks."""
    annotations: Mapping[str, object] = entry.get("annotations") or {}  # type: ignore[assignment]
    plat: Mapping[str, object] = entry.get("platform") or {}  # type: ignore[assignment]
    layers = manifest.get("layers")
    if annotations.get(REFERENCE_TYPE) != ATTESTATION:
        return f"not annotated {REFERENCE_TYPE}={ATTESTATION}"
    try:
        listed = platform_key(plat)
    except IndexMismatch:
        return "listed for no platform, not unknown/unknown"
    if listed != UNKNOWN:
        return f"listed for {'/'.join(p for p in listed if p)}, not unknown/unknown"
    about = annotations.get(REFERENCE_DIGEST)
    if not isinstance(about, str) or about not in images:
        return f"its {REFERENCE_DIGEST} names no platform image of this index"
    if (
        not isinstance(layers, list)
        or not layers
        or any(not isinstance(layer, dict) or layer.get("mediaType") != IN_TOTO for layer in layers)
    ):
        return f"its layers are not all {IN_TOTO}"
    return None


def checked_index(registry: Registry, repo: str, reference: str) -> CheckedIndex | None:
    """The index at reference, every entry checked against the child it names; None when reference is one image.

    Each entry's child manifest is fetched (bounded, by digest): its size must be the entry's, its media type (as
    served and as it says) the entry's. An attestation is only an entry annotated as BuildKit's, listed for
    unknown/unknown, whose manifest has in-toto layers only and whose vnd.docker.reference.digest names a platform
    image of this same index. Every other entry is a platform's image: its platform must be its own config's
    os/architecture/variant, and no two may be for one os/architecture (a pull takes the first; every check must
    see what a pull gets). Anything else is IndexMismatch: the index is refused, never partly believed."""
    body, media_type = registry.manifest(repo, reference)
    where = f"{repo}:{reference}" if not reference.startswith("sha256:") else f"{repo}@{reference}"
    if media_type not in INDEX_TYPES:
        return None
    entries = _parse_index(body, media_type, where)
    children: dict[str, str] = {}
    child_types: dict[str, str] = {}
    seen: dict[str, str] = {}
    claims: list[tuple[int, Mapping[str, object], Mapping[str, object]]] = []
    for n, entry in enumerate(entries):
        at = f"{where} entry {n} ({str(entry['digest'])[:19]})"
        manifest, config = _child(registry, repo, entry, at)
        if config is None:
            claims.append((n, entry, manifest))
            continue
        plat = entry.get("platform")
        os_name, arch, variant = platform_key(plat if isinstance(plat, dict) else {})
        own = _config_platform(config)
        if (os_name, arch, variant) != own:
            listed = "/".join(p for p in (os_name, arch, variant) if p)
            raise IndexMismatch(f"{at}: listed for {listed}, its config says {'/'.join(p for p in own if p)}")
        short = f"{os_name}/{arch}"
        key = f"{short}/{variant}" if variant else short
        if short in seen:
            raise IndexMismatch(
                f"{where}: two entries for {short} ({seen[short]} and {key}): which one a pull gets "
                "is not what every check sees"
            )
        seen[short] = key
        children[key] = str(entry["digest"])
        child_types[key] = str(entry["mediaType"])
    images = set(children.values())
    for n, claim, claim_manifest in claims:
        refusal = _attestation_refusal(claim, claim_manifest, images)
        if refusal is not None:
            raise IndexMismatch(
                f"{where} entry {n} ({str(claim['digest'])[:19]}) is not an attestation manifest: {refusal}"
            )
    if not children:
        raise IndexMismatch(f"{where}: an index without a platform's image")
    return CheckedIndex(media_type, children, child_types, [str(e["digest"]) for _, e, _ in claims])


def config_labels(config: object) -> dict[str, str]:
    """The string labels of an image config read from a registry ({} for a config of another shape)."""
    inner = config.get("config") if isinstance(config, dict) else None
    labels = inner.get("Labels") if isinstance(inner, dict) else None
    return {k: v for k, v in labels.items() if isinstance(v, str)} if isinstance(labels, dict) else {}


def _config_platform(config: Mapping[str, object]) -> tuple[str, str, str]:
    """(os, architecture, variant) an image config says it is for, normalised as platform_key does."""
    try:
        return platform_key({k: config.get(k) for k in ("os", "architecture", "variant")})
    except IndexMismatch:
        return ("?", "?", "")


# containerd's platforms.Normalize: the variant a client assumes when an entry names none, so `linux/arm64/v8`
# and `linux/arm64` are the same platform to a pull (containerd/platforms@v0.2.1:platforms.go, Normalize); the
# value per architecture is the OciPlatform type's (matrix/oci_platform.py default_variant).


def platform_key(plat: Mapping[str, object]) -> tuple[str, str, str]:
    """(os, architecture, variant) of an index entry's platform, the variant normalised as a pull does."""
    os_name, arch, variant = (plat.get(k) for k in ("os", "architecture", "variant"))
    if not isinstance(os_name, str) or not isinstance(arch, str) or not os_name or not arch:
        raise IndexMismatch(f"an index entry without os and architecture ({str(dict(plat))[:200]})")
    variant = variant if isinstance(variant, str) else ""
    return os_name, arch, "" if variant == default_variant(arch) else variant


def read_index(registry: Registry, repo: str, reference: str) -> dict[str, str]:
    """platform -> child digest of the index at reference (checked_index: every entry held to its child;
    attestation manifests left out); an error when it is one platform's image. Keys are `os/architecture`, with
    `/variant` for a variant other than the architecture's default."""
    index = checked_index(registry, repo, reference)
    if index is None:
        raise IndexMismatch(f"{repo}:{reference} is a single image, not an index of platforms")
    return index.children


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
    index = checked_index(registry, repo, digest)
    if index is None:
        return MediaTypes(registry.manifest(repo, digest)[1], {}, [])
    return MediaTypes(index.media_type, index.child_types, index.attestations)


def platform_manifest(registry: Registry, repo: str, digest: str, platform: str | None) -> str:
    """digest itself when it is one image, else its child for platform (an engine that stores an image as an
    index, BuildKit's attestations beside it, pushes the index): the manifest an index of ours may list.

    Without a platform: the only platform child of an index that holds one (what a pull of it resolves to on
    every client), else digest itself (an image of several platforms stays the index it is)."""
    index = checked_index(registry, repo, digest)
    if index is None:
        return digest
    children = index.children
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


def index_children(registry: Registry, repo: RepoRef, reference: str) -> dict[str, str] | None:
    """platform -> child digest when reference is an index (every entry checked against its child:
    checked_index), None when it is one image."""
    index = checked_index(registry, repo.repo, reference)
    return None if index is None else index.children
