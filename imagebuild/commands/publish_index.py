"""`imagebuild publish TARGET` for a target of several OCI platforms, and `--promote` of an index (issue 15).

Reports: the index's in build/publish/<target>/publish-report.json (`digest` is the index, `platforms` its
children), each platform's image in build/publish/<target>/<os>-<arch>/publish-report.json with its signing.json
and attestations/ (signature, SBOM, provenance and that platform's smoke report, bound to the child digest).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from imagebuild.commands.common import warn
from imagebuild.engine.registry import Registry, RepoRef
from imagebuild.errors import ConfigError, PublishFailed
from imagebuild.matrix.oci import slug
from imagebuild.release import signing_options as signing
from imagebuild.release.index import (
    PlatformImage,
    gate,
    index_children,
    local_name,
    push_children,
    write_indexes,
)
from imagebuild.release.publish import PublishResult, find_passing_report, promote, public_tags, with_retries

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    import docker

Recorder = Callable[[PublishResult, Path], "AbstractContextManager[None]"]


def target_platforms(matrix_path: Path, name: str) -> tuple[str, ...]:
    """The OCI platforms target `name` lists; () when name is no target of a loadable matrix."""
    from imagebuild.matrix import load_matrix

    try:
        targets = {t.name: t for t in load_matrix(matrix_path).targets}
    except ConfigError:
        return ()
    return tuple(targets[name].oci_platforms) if name in targets else ()


def chosen_platforms(matrix_path: Path, name: str, wanted: tuple[str, ...]) -> tuple[str, ...]:
    """The platforms to publish: those --platform names (each one the target lists), else all it lists."""
    listed = target_platforms(matrix_path, name)
    if wanted and not listed:
        raise ConfigError(f"--platform needs a TARGET, not the image '{name}'")
    unknown = [p for p in wanted if p not in listed]
    if unknown:
        raise ConfigError(f"target {name} is not built for {', '.join(unknown)}", hint=f"it lists {', '.join(listed)}")
    return tuple(p for p in listed if not wanted or p in wanted)


def publish_target_index(
    client: docker.DockerClient,
    target: str,
    platforms: tuple[str, ...],
    dest: RepoRef,
    root: Path,
    reports: list[Path],
    allow_unsmoked: bool,
    tags: list[str],
    out_path: Path | None,
    recorded: Recorder,
    log: Callable[[str], None],
    require_oci: bool = False,
) -> None:
    """Gate every platform on its own smoke, push and verify each, then one verified index per tag (signed)."""
    from imagebuild.engine.docker import resolve_image

    images = []
    for platform in platforms:
        name = local_name(target, platform, platforms[0])
        try:
            _, found, ref = resolve_image(client, name, [name], root)
        except ConfigError:
            raise ConfigError(
                f"target {target} has no {platform} image (no build recorded for {name}, no local tag)",
                hint=f"imagebuild build {target} --platform {platform}",
            ) from None
        images.append(PlatformImage(platform, name, found, ref))
    first = images[0]
    result = PublishResult(image=target, image_id=first.ref.image_id, repository=str(dest), ref=first.ref)
    result.require_oci = require_oci
    out = out_path or root / "build" / "publish" / target / "publish-report.json"
    with recorded(result, out):
        gate(images, reports, allow_unsmoked, warn)
        result.smoke_report = ", ".join(str(i.report) for i in images if i.report)
        children_results = {
            i.platform: PublishResult(
                image=i.name, image_id=i.ref.image_id, repository=str(dest), ref=i.ref, require_oci=result.require_oci
            )
            for i in images
        }
        children = push_children(client, images, dest, children_results, log)
        for item in images:  # each child signed (no public tag names it), then the index, then the tags move
            child = children_results[item.platform]
            child_out = out.parent / slug(item.platform) / out.name
            signing.sign_publish(client, child, [item.report] if item.report else [], child_out)
            child.smoke_report, child.ok = str(item.report) if item.report else None, True
            child.write(child_out)
        result.platforms = {c.platform: c.digest for c in children}
        sign = (lambda: signing.sign_index_digest(result, out)) if signing.wanted() else None
        write_indexes(dest, tags or public_tags(first.ref, target), children, result, log, sign)


def promote_index(
    source: str,
    dest: RepoRef,
    tags: list[str],
    reports: list[Path],
    allow_unsmoked: bool,
    out_path: Path | None,
    root: Path,
    recorded: Recorder,
    log: Callable[[str], None],
    staged_here: bool = False,
) -> bool:
    """Promote HOST/REPO@sha256:... when it is an index (False when it is one image): children gated, copied."""
    name, _, reference = source.partition("@")
    src = RepoRef.parse(name)
    registry = Registry(src)
    found = with_retries(f"reading {source}", lambda: index_children(registry, src, reference))
    if found is None:
        return False
    configs = {
        p: with_retries(f"reading {src}@{d}", lambda d=d: registry.config(src.repo, d)) for p, d in found.items()
    }
    ids = {p: image_id for p, (image_id, _) in configs.items()}
    labels = (next(iter(configs.values()))[1].get("config") or {}).get("Labels") or {}  # type: ignore[union-attr]
    tags = tags or ([str(labels["io.imagebuild.target"])] if "io.imagebuild.target" in labels else [])
    if not tags:
        raise ConfigError(f"{source} has no io.imagebuild.target label", hint="pass --tag")
    result = PublishResult(image=source, image_id=next(iter(ids.values())), repository=str(dest), platforms=found)
    out = out_path or root / "build" / "publish" / tags[0] / "publish-report.json"

    def sign(digest: str) -> None:  # the index copied into dest by digest: each child, then the index, then tags
        result.digest, result.staging_ref, result.digest_ref = digest, source, f"{dest}@{digest}"
        for platform, child_digest in found.items():
            child = PublishResult(image=f"{src}@{child_digest}", image_id=ids[platform], repository=str(dest))
            child.digest, child.digest_ref = child_digest, f"{dest}@{child_digest}"
            report = passing[platform]
            child_out = out.parent / slug(platform) / out.name
            signing.sign_promote(f"{src}@{child_digest}", child, [report] if report else [], child_out)
        signing.sign_index_digest(result, out)

    with recorded(result, out):
        # --require-signed: an index staged by this command (--index-of) is signed in dest before its tags move;
        # its children now
        for ref in [f"{src}@{d}" for d in found.values()] if staged_here else [source]:
            signing.before_promote(ref)
        passing = {  # by config digest (graph-driver engine) or manifest digest (containerd image store)
            p: find_passing_report(i, reports) or find_passing_report(found[p], reports) for p, i in ids.items()
        }
        for platform, report in passing.items():
            if report is None and not allow_unsmoked:
                raise PublishFailed(
                    f"refusing to promote the index {source}: {platform} ({ids[platform][:19]}) "
                    f"has no passing smoke report ({len(reports)} report(s) looked at)",
                    hint="pass its --report, or --allow-unsmoked",
                )
        result.smoke_report = ", ".join(str(r) for r in passing.values() if r)
        result.digest, result.refs = promote(source, dest, tags, log, sign if signing.wanted() else None)
        result.staging_ref, result.digest_ref = source, f"{dest}@{result.digest}"
    return True


def stage_index(refs: tuple[str, ...], log: Callable[[str], None]) -> str:
    """CI: the staged per-platform digests (HOST/REPO@sha256:..., one repository) as one staging index; its ref."""
    from imagebuild.release.ociindex import Child, assemble

    repos = {r.partition("@")[0] for r in refs}
    if len(repos) != 1 or not all("@sha256:" in r for r in refs):
        raise ConfigError("--index-of takes HOST/REPO@sha256:... references of one repository")
    src = RepoRef.parse(repos.pop())
    registry = Registry(src)
    children = []
    for ref in refs:
        digest = ref.partition("@")[2]
        _, config = with_retries(f"reading {ref}", lambda digest=digest: registry.config(src.repo, digest))
        children.append(Child(f"{config.get('os')}/{config.get('architecture')}", digest))
    tag = f"staging-index-{children[0].digest.split(':')[-1][:12]}"
    digest = with_retries(f"writing the index to {src}", lambda: assemble(registry, src.repo, tag, children))
    log(f"staged index {src}@{digest} ({', '.join(c.platform for c in children)})")
    return f"{src}@{digest}"
