"""Image inputs: a tag -> its manifest digest and, per platform, the digest of that platform's image.

Read through the registry HTTP API (distribution v2) with the token flow public registries use
(`engine.registry.Registry`: a 401 with `WWW-Authenticate: Bearer realm=...` is answered with a token for
`repository:<name>:pull`, Basic credentials where given). A base image made on this machine (`local/...`, or one
pushed to the loopback registry by scripts/setup.sh) is recorded by its local ID or digest, as local: another
machine makes its own.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from imagebuild.engine.reference import parse_reference
from imagebuild.engine.registry import Registry, RegistryError, RepoRef
from imagebuild.matrix.oci_platform import default_variant

DOCKER_HUB = "registry-1.docker.io"
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
MEDIA_TYPE = re.compile(r"[a-z0-9][a-z0-9.+-]*/[a-z0-9][a-z0-9.+-]*")
INDEX_TYPES = (
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.index.v1+json",
)


def split(ref: str) -> tuple[str, str, str]:
    """(registry host, repository, tag or digest) of an image reference, Docker Hub's defaults filled in."""
    parsed = parse_reference(ref)
    domain = parsed.domain
    path = parsed.name[len(domain) + 1 :] if domain else parsed.name
    if domain and not ("." in domain or ":" in domain or domain == "localhost"):
        domain, path = None, parsed.name  # `nvidia/cuda`: a Docker Hub namespace, not a host (distribution's rule)
    if domain is None or domain in {"docker.io", "index.docker.io"}:
        domain = DOCKER_HUB
        if "/" not in path:
            path = f"library/{path}"
    return domain, path, parsed.digest or parsed.tag or "latest"


def registry_for(host: str, limit: float | None) -> Registry:
    registry = Registry(RepoRef(host, "x"))
    registry.limit = limit
    return registry


def resolve_remote(ref: str, platforms: list[str], limit: float | None = None) -> dict[str, Any]:
    """The lock entry fields of a registry image: digest (of what the tag names), media type, per-platform digests.

    RegistryError when the registry cannot be reached or does not have it.
    """
    host, repo, reference = split(ref)
    registry = registry_for(host, limit)
    body, media_type = registry.manifest(repo, reference)
    digest = "sha256:" + hashlib.sha256(body).hexdigest()
    try:
        manifest = json.loads(body)
    except (ValueError, RecursionError):
        raise RegistryError(f"{host}/{repo}:{reference}: the manifest is not JSON") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("manifests", []), list):
        raise RegistryError(f"{host}/{repo}:{reference}: the manifest is not a JSON object of its kind")
    if not MEDIA_TYPE.fullmatch(media_type or ""):
        raise RegistryError(f"{host}/{repo}:{reference}: the registry says no media type (or a malformed one)")
    per_platform: dict[str, str] = {}
    if media_type in INDEX_TYPES or "manifests" in manifest:
        for child in manifest.get("manifests", []):
            if not isinstance(child, dict) or not isinstance(child.get("platform") or {}, dict):
                continue
            if not DIGEST.fullmatch(str(child.get("digest"))):  # what the lock (and FROM) may hold: sha256 + 64 hex
                raise RegistryError(f"{host}/{repo}:{reference}: an index entry's digest is not sha256:<64 hex>")
            plat = child.get("platform") or {}
            name = f"{plat.get('os')}/{plat.get('architecture')}"
            if plat.get("variant") and plat["variant"] != default_variant(str(plat.get("architecture"))):
                name += f"/{plat['variant']}"
            if name in platforms and name not in per_platform:
                per_platform[name] = str(child.get("digest"))
    else:
        _, config = registry.config(repo, digest)
        name = f"{config.get('os')}/{config.get('architecture')}"
        if name in platforms:
            per_platform[name] = digest
    missing = [p for p in platforms if p not in per_platform]
    entry: dict[str, Any] = {
        "registry": host,
        "repository": repo,
        "digest": digest,
        "media_type": media_type,
        "platforms": per_platform,
    }
    if missing:
        entry["missing_platforms"] = missing
    return entry


def resolve_local(ref: str) -> dict[str, Any]:
    """A base image made on this machine: its ID in the engine (`local/...`) or its digest in the loopback registry."""
    if ref.startswith("local/"):
        from imagebuild.engine.interface import ImageNotFound
        from imagebuild.engine.sdk import docker_engine

        try:
            image = docker_engine().image(ref)
        except ImageNotFound:
            return {"why": f"{ref} is not in the engine (scripts/setup.sh makes it)"}
        return {"image_id": image.id, "made_by": "scripts/make-base-image.sh (debootstrap + docker import)"}
    try:
        entry = resolve_remote(ref, [], limit=30)
    except RegistryError as exc:
        return {"why": f"{ref}: {exc}"}
    entry.pop("platforms", None)
    return {**entry, "made_by": "scripts/setup.sh (make-base-image.sh, pushed to the loopback registry)"}
