"""Publish a multi-platform target as one OCI index per tag (issue 15).

Every platform's image must have its own passing smoke report (found by its image ID, as for one image); a
platform without one blocks the index before anything is pushed. Each platform's image is then pushed under a
staging tag and verified by digest (publish.publish_image, no public tag), and each public tag becomes an index
whose children are exactly those digests, read back and checked (ociindex.verify_index).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from imagebuild.engine.registry import Registry, RepoRef
from imagebuild.plan.image_key import ImageKey
from imagebuild.release.ociindex import Child, assemble, verify_index
from imagebuild.release.publish import (
    PublishResult,
    publish_image,
    record_media_types,
    with_retries,
)

if TYPE_CHECKING:
    from imagebuild.engine.interface import ContainerEngine, LocalImage
    from imagebuild.plan.imageref import ImageRef


@dataclass
class PlatformImage:
    """One platform's local image of the target (its passing smoke report: release/flows.py)."""

    platform: str  # linux/arm64
    name: str  # its local name: the target for the first platform, <target>-<os>-<arch> for the others
    image: LocalImage
    ref: ImageRef


def local_name(target: str, platform: str, first: str) -> str:
    """The name build records and tags a platform's image by (ImageKey.name of the matrix default)."""
    platforms = (first,) if platform == first else (first, platform)
    return ImageKey(target, platform, platforms).name


def push_children(
    engine: ContainerEngine,
    images: list[PlatformImage],
    dest: RepoRef,
    results: dict[str, PublishResult],
    log: Callable[[str], None],
) -> list[Child]:
    """Push each platform's image under its staging tag and verify its digest; no public tag moves yet.

    An engine with the containerd image store may hold a platform's image as an index (one build of every
    platform, or BuildKit's attestations beside one platform): then its push is that index, and the child for this
    platform is the manifest the index lists for it."""
    children = []
    for item in images:
        result = results[item.platform]
        publish_image(engine, item.image, item.name, dest, result, [], log, platform=item.platform)
        assert result.digest is not None  # publish_image sets it (the platform's manifest) or raises
        children.append(Child(item.platform, result.digest))
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
        from imagebuild.release.sign_journal import undone_unless_complete

        with undone_unless_complete(dest, log):  # interrupted or failed: no `.sig`/`.att` tag left half written
            before_tags()
    for tag in tags:
        log(f"index {dest}:{tag} -> {digest} ({', '.join(c.platform for c in children)})")
        with_retries(f"tagging {dest}:{tag}", functools.partial(registry.copy, dest.repo, digest, dest.repo, tag))
        with_retries(
            f"verifying {dest}:{tag}", functools.partial(verify_index, registry, dest.repo, tag, digest, children)
        )
        result.refs.append(f"{dest}:{tag}")
