"""Publish a multi-platform target as one OCI index per tag (issue 15).

Every platform's image must have its own passing smoke report (found by its image ID, as for one image); a
platform without one blocks the index before anything is pushed. Each platform's image is then pushed under a
staging tag and verified by digest (publish.publish_image, no public tag), and each public tag becomes an index
whose children are exactly those digests, read back and checked (ociindex.verify_index).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from imagebuild.engine.registry import Registry, RepoRef
from imagebuild.errors import PublishFailed
from imagebuild.matrix.oci import slug
from imagebuild.release.ociindex import Child, assemble, platform_manifest, read_index, verify_index
from imagebuild.release.publish import (
    PublishResult,
    find_passing_report,
    publish_image,
    record_media_types,
    with_retries,
)

if TYPE_CHECKING:
    import docker
    from docker.models.images import Image

    from imagebuild.plan.imageref import ImageRef


@dataclass
class PlatformImage:
    """One platform's local image of the target and the smoke report that lets it be published."""

    platform: str  # linux/arm64
    name: str  # its local name: the target for the first platform, <target>-<os>-<arch> for the others
    image: Image
    ref: ImageRef
    report: Path | None = None


def local_name(target: str, platform: str, first: str) -> str:
    """The name build records and tags a platform's image by (plan.TargetPlan.suffix)."""
    return target if platform == first else f"{target}-{slug(platform)}"


def smoke_dir(root: Path, target: str, platform: str, first: str) -> Path:
    """build/smoke/<target>/ for the first platform (where tools read it), build/smoke/<target>/<os>-<arch>/ else."""
    base = root / "build" / "smoke" / target
    return base if platform == first else base / slug(platform)


def gate(images: list[PlatformImage], reports: list[Path], allow_unsmoked: bool, warn: Callable[[str], None]) -> None:
    """Each platform needs a passing smoke report for its own image ID; the first one without blocks the index."""
    for item in images:
        item.report = find_passing_report(item.ref.image_id, reports)
        if item.report is not None:
            continue
        message = f"{item.platform} ({item.ref.image_id[:19]}) has no passing smoke report"
        if not allow_unsmoked:
            raise PublishFailed(
                f"refusing to publish the {images[0].name} index: {message} ({len(reports)} report(s) looked at)",
                hint=f"imagebuild smoke {images[0].name} --platform {item.platform}, or pass --allow-unsmoked",
            )
        warn(f"{message}: published anyway (--allow-unsmoked)")


def push_children(
    client: docker.DockerClient,
    images: list[PlatformImage],
    dest: RepoRef,
    results: dict[str, PublishResult],
    log: Callable[[str], None],
) -> list[Child]:
    """Push each platform's image under its staging tag and verify its digest; no public tag moves yet.

    An engine with the containerd image store may hold a platform's image as an index (one build of every
    platform, or BuildKit's attestations beside one platform): then its push is that index, and the child for this
    platform is the manifest the index lists for it."""
    registry = Registry(dest)
    children = []
    for item in images:
        result = results[item.platform]
        publish_image(client, item.image, item.name, dest, result, [], log)
        assert result.digest is not None  # publish_image sets it or raises
        staged = result.digest
        digest = with_retries(
            f"reading {dest}@{staged}", lambda s=staged, p=item.platform: platform_manifest(registry, dest.repo, s, p)
        )
        if digest != staged:
            log(f"{item.platform}: {dest}@{staged} is an index; its {item.platform} manifest is {digest}")
            result.digest, result.digest_ref = digest, f"{dest}@{digest}"
            record_media_types(result, registry, dest, digest)
        children.append(Child(item.platform, digest))
    return children


def write_indexes(
    dest: RepoRef,
    tags: list[str],
    children: list[Child],
    result: PublishResult,
    log: Callable[[str], None],
    before_tags: Callable[[], None] | None = None,
) -> None:
    """One index per tag whose children are exactly these digests; each read back and verified.

    before_tags (signing the index digest) runs on the staged index before any public tag moves."""
    registry = Registry(dest)
    staging = f"staging-index-{children[0].digest.split(':')[-1][:12]}"
    digest = with_retries(f"writing the index to {dest}", lambda: assemble(registry, dest.repo, staging, children))
    result.digest, result.digest_ref, result.staging_ref = digest, f"{dest}@{digest}", f"{dest}:{staging}"
    record_media_types(result, registry, dest, digest)
    if before_tags is not None:
        before_tags()
    for tag in tags:
        log(f"index {dest}:{tag} -> {digest} ({', '.join(c.platform for c in children)})")
        with_retries(f"tagging {dest}:{tag}", lambda tag=tag: registry.copy(dest.repo, digest, dest.repo, tag))
        with_retries(
            f"verifying {dest}:{tag}", lambda tag=tag: verify_index(registry, dest.repo, tag, digest, children)
        )
        result.refs.append(f"{dest}:{tag}")


def index_children(registry: Registry, repo: RepoRef, reference: str) -> dict[str, str] | None:
    """platform -> child digest when reference is an index, None when it is one image."""
    body, _ = registry.manifest(repo.repo, reference)
    return read_index(registry, repo.repo, reference) if "manifests" in json.loads(body) else None
