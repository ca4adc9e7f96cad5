"""What `imagebuild publish` does, as one call per case: one image, a target's images as one OCI index per tag
(issue 15), the promotion of a staged image or index, and CI's staging index of per-platform digests.

Each takes a `Job` (the options, the smoke reports read once, the signing value, how to record and log) and the
images the plan's keys name (plan/keys.py): no name, folder or platform list is worked out here. Every gate runs
before anything is pushed: smoke (the passing reports are kept and signed), the lock, what each tag promises.

Reports: the index's in build/publish/<target>/publish-report.json (`digest` is the index, `platforms` its
children), each platform's image in ImageKey.publish_dir with its signing.json and attestations/ (signature,
SBOM, provenance and that platform's smoke report, bound to the child digest).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from imagebuild.engine.interface import smoke_ids
from imagebuild.engine.registry import Registry, RegistryError, RepoRef
from imagebuild.errors import ConfigError, PublishFailed
from imagebuild.matrix.oci import slug
from imagebuild.release import signing_options as signing
from imagebuild.release.gate import Passed, SmokeReports
from imagebuild.release.index import PlatformImage, push_children, write_indexes
from imagebuild.release.ociindex import index_children
from imagebuild.release.promise import check_promises
from imagebuild.release.publish import (
    PublishResult,
    promote,
    public_tags,
    publish_image,
    staged_ref,
    with_retries,
)

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from imagebuild.engine.interface import ContainerEngine
    from imagebuild.plan.image_key import ImageKey
    from imagebuild.plan.keys import Named

Log = Callable[[str], None]
Recorder = Callable[[PublishResult, Path], "AbstractContextManager[None]"]


@dataclass
class Job:
    """One publish: where to, what gates it, how it signs, records and speaks."""

    dest: RepoRef
    root: Path
    matrix_path: Path
    reports: SmokeReports
    signing: signing.Signing
    recorded: Recorder
    log: Log
    warn: Log
    tags: list[str] = field(default_factory=list)
    out_path: Path | None = None
    allow_unsmoked: bool = False
    allow_unlocked: bool = False
    require_oci: bool = False

    def out(self, folder: Path) -> Path:
        return self.out_path or folder / "publish-report.json"

    def result(self, image: str, image_id: str, **more: Any) -> PublishResult:
        return PublishResult(
            image=image, image_id=image_id, repository=str(self.dest), require_oci=self.require_oci, **more
        )


def gate(job: Job, result: PublishResult, *image_ids: str) -> list[Passed]:
    """Exit 5 unless smoke passed for this exact image; --allow-unsmoked overrides, loudly, on the record.

    Reports given with --report (one per GPU kind in CI) must all pass for this image; otherwise one passing
    report among those under build/smoke suffices. Returns the passing reports (what signing attests)."""
    passing = job.reports.lets_publish(*image_ids)
    if passing:
        result.smoke_report = ", ".join(str(p.path) for p in passing)
        return passing
    if not job.allow_unsmoked:
        paths = job.reports.paths
        where = ", ".join(map(str, paths)) if 0 < len(paths) <= 3 else f"{len(paths)} report(s) under build/smoke"
        raise PublishFailed(
            f"refusing to publish {image_ids[0][:19]}: no passing smoke report for this image ID "
            f"(looked in: {where or 'none'})",
            hint="run `imagebuild smoke` first, or pass --allow-unsmoked",
        )
    result.allow_unsmoked = True
    result.warning = f"published without a passing smoke report for {image_ids[0]}"
    job.warn(f"{result.warning} (--allow-unsmoked)")
    return []


def lock_gate(job: Job, images: list[tuple[str, Any]]) -> dict[str, dict[str, Any]]:
    """Exit 5 when an image was built from unlocked inputs (its io.imagebuild.lock label, imagebuild.lock.stages);
    --allow-unlocked overrides, loudly, on the record. Returns what each image's lock record says."""
    from imagebuild.lock.stages import publish_gate

    records = {}
    for name, found in images:
        record, refusal = publish_gate(dict(found.labels or {}))
        records[name] = record
        if refusal is None:
            continue
        if not job.allow_unlocked:
            raise PublishFailed(
                f"refusing to publish {name}: {refusal}",
                hint="run `imagebuild lock`, rebuild, or pass --allow-unlocked",
            )
        record["allowed_by"] = "--allow-unlocked"
        job.warn(f"publishing {name} although {refusal} (--allow-unlocked)")
    return records


def publish_one(engine: ContainerEngine, job: Job, named: Named) -> None:
    """One image (a target's one chosen platform, or an image reference): gates, push, verify, sign, tags."""
    from imagebuild.engine.docker import resolve_image

    key = named.keys[0] if named.keys else None
    image = key.name if key else named.given
    name, found, ref = resolve_image(engine, image, list(named.targets), job.root)
    result = job.result(image, ref.image_id, ref=ref)
    out = job.out(key.publish_dir(job.root) if key else job.root / "build" / "publish" / name)
    tags = job.tags or public_tags(ref, image)
    with job.recorded(result, out):
        passed = gate(job, result, ref.image_id)
        result.lock = lock_gate(job, [(image, found)])[image]
        check_promises([dict(found.labels or {})], tags, index=False)
        sign = (
            (lambda: signing.sign_publish(job.signing, engine, result, passed, out, job.matrix_path, job.log))
            if job.signing.wanted
            else None
        )
        publish_image(engine, found, image, job.dest, result, tags, job.log, sign)


def _platform_images(engine: ContainerEngine, job: Job, keys: Sequence[ImageKey]) -> list[PlatformImage]:
    """Each chosen platform's local image (its build record, else its local tag); a missing one says how to build it."""
    from imagebuild.engine.docker import resolve_image

    images = []
    for key in keys:
        try:
            _, found, ref = resolve_image(engine, key.name, [key.name], job.root)
        except ConfigError:
            raise ConfigError(
                f"target {key.target} has no {key.oci} image (no build recorded for {key.name}, no local tag)",
                hint=f"imagebuild build {key.target} --platform {key.oci}",
            ) from None
        images.append(PlatformImage(key.oci, key.name, found, ref))
    return images


def _gate_platforms(
    job: Job, images: list[PlatformImage], ids: dict[str, list[str]], what: str
) -> dict[str, Passed | None]:
    """Each platform needs a passing smoke report for its own image; the first one without blocks the index."""
    passing: dict[str, Passed | None] = {}
    for item in images:
        passing[item.platform] = job.reports.first(*ids[item.platform])
        if passing[item.platform] is not None:
            continue
        message = f"{item.platform} ({ids[item.platform][0][:19]}) has no passing smoke report"
        if not job.allow_unsmoked:
            raise PublishFailed(
                f"refusing to publish the {what} index: {message} ({len(job.reports.paths)} report(s) looked at)",
                hint=f"imagebuild smoke {what} --platform {item.platform}, or pass --allow-unsmoked",
            )
        job.warn(f"{message}: published anyway (--allow-unsmoked)")
    return passing


def publish_index(engine: ContainerEngine, job: Job, keys: Sequence[ImageKey]) -> None:
    """Gate every platform on its own smoke, push and verify each, then one verified index per tag (signed)."""
    images = _platform_images(engine, job, keys)
    lock_gate(job, [(i.name, i.image) for i in images])
    first = images[0]
    target = keys[0].target
    result = job.result(target, first.ref.image_id, ref=first.ref)
    out = job.out(keys[0].publish_dir(job.root))
    tags = job.tags or public_tags(first.ref, target)
    with job.recorded(result, out):
        passing = _gate_platforms(job, images, {i.platform: [i.ref.image_id] for i in images}, first.name)
        result.smoke_report = ", ".join(str(p.path) for p in passing.values() if p)
        check_promises([dict(i.image.labels or {}) for i in images], tags, index=True)
        children_results = {i.platform: job.result(i.name, i.ref.image_id, ref=i.ref) for i in images}
        children = push_children(engine, images, job.dest, children_results, job.log)
        from imagebuild.release.sign_journal import undone_unless_complete

        with undone_unless_complete(job.dest, job.log):  # interrupted: no child's `.sig`/`.att` half written
            for key, item in zip(keys, images, strict=True):  # each child signed, then the index, then tags move
                child, passed = children_results[item.platform], passing[item.platform]
                child_out = out.parent / slug(key.oci) / out.name  # beside the index's report, a folder a platform
                signing.sign_publish(
                    job.signing, engine, child, [passed] if passed else [], child_out, job.matrix_path, job.log
                )
                child.smoke_report, child.ok = str(passed.path) if passed else None, True
                child.write(child_out)
        result.platforms = {c.platform: c.digest for c in children}
        sign = (lambda: signing.sign_index_digest(job.signing, result, out, job.log)) if job.signing.wanted else None
        write_indexes(job.dest, tags, children, result, job.log, sign)


def promote_one(job: Job, source: str) -> None:
    """Gate on the staged image's config digest (its image ID), sign it in dest, then copy it to dest's public tags."""
    name, sep, reference = source.partition("@")
    if not sep:
        raise ConfigError(f"--promote takes HOST/REPO@sha256:..., not '{source}'")
    src = _repo(name)
    registry = Registry(src)
    ref = with_retries(f"reading {source}", lambda: staged_ref(registry, src, reference))
    _, config = with_retries(f"reading {source}", lambda: registry.config(src.repo, reference))
    wanted = job.tags or ([ref.target] if ref.target else [])
    if not wanted:
        raise ConfigError(f"{source} has no io.imagebuild.target label", hint="pass --tag")
    # the ID smoke recorded: the config digest (graph-driver engine) or the manifest digest (containerd store)
    ids = smoke_ids(ref.image_id, ref.digest)
    smoked = next((i for i in ids if job.reports.passing(i)), None)
    if smoked is None and ref.digest and (as_index := _smoked_as_index(job, registry, src, ref.digest)) is not None:
        smoked = as_index.report.image_id  # the containerd store's local ID: the one-platform index staged beside
    smoked = smoked or ref.image_id
    result = PublishResult(image=source, image_id=smoked, repository=str(job.dest), ref=ref)
    out = job.out(job.root / "build" / "publish" / wanted[0])
    passed: list[Passed] = []

    def sign(digest: str) -> None:  # the digest copied into dest, before any public tag there moves
        result.digest, result.digest_ref, result.staging_ref = digest, f"{job.dest}@{digest}", source
        signing.sign_promote(job.signing, source, result, passed, out, job.log, job.matrix_path)

    with job.recorded(result, out):
        signing.before_promote(job.signing, source)
        passed = gate(job, result, smoked)
        result.lock = lock_gate(job, [(source, _Labelled(_labels(config)))])[source]
        check_promises([_labels(config)], wanted, index=False)
        result.digest, result.refs = promote(source, job.dest, wanted, job.log, sign if job.signing.wanted else None)
        result.staging_ref = source
        result.digest_ref = f"{job.dest}@{result.digest}"


def _smoked_as_index(job: Job, registry: Registry, src: RepoRef, child: str) -> Passed | None:
    """A passing report whose image ID is a one-platform index in src listing exactly this child: the containerd
    image store keeps a platform's image as such an index when BuildKit attached attestations, smoke records that
    index's digest, and publish stages the index and publishes its platform's manifest (issue 22)."""
    for path, report in job.reports.documents:
        if report is None or report.refusal() is not None:
            continue
        image_id = report.image_id
        if image_id is None or not image_id.startswith("sha256:"):
            continue
        try:
            listed = index_children(registry, src, image_id)
        except (RegistryError, ValueError):  # not in src, or not a manifest: not this image
            continue
        if listed is not None and list(listed.values()) == [child]:
            return Passed(path, report)
    return None


def promote_index(job: Job, source: str, staged_here: bool = False) -> bool:
    """Promote HOST/REPO@sha256:... when it is an index (False when it is one image): children gated, copied."""
    name, _, reference = source.partition("@")
    src = RepoRef.parse(name)
    registry = Registry(src)
    found = with_retries(f"reading {source}", lambda: index_children(registry, src, reference))
    if found is None:
        return False
    configs = {
        p: with_retries(f"reading {src}@{d}", functools.partial(registry.config, src.repo, d)) for p, d in found.items()
    }
    ids = {p: image_id for p, (image_id, _) in configs.items()}
    labels = _labels(next(iter(configs.values()))[1])
    tags = job.tags or ([str(labels["io.imagebuild.target"])] if "io.imagebuild.target" in labels else [])
    if not tags:
        raise ConfigError(f"{source} has no io.imagebuild.target label", hint="pass --tag")
    result = PublishResult(image=source, image_id=next(iter(ids.values())), repository=str(job.dest), platforms=found)
    out = job.out(job.root / "build" / "publish" / tags[0])
    passing: dict[str, Passed | None] = {}

    def sign(digest: str) -> None:  # the index copied into dest by digest: each child, then the index, then tags
        result.digest, result.staging_ref, result.digest_ref = digest, source, f"{job.dest}@{digest}"
        for platform, child_digest in found.items():
            child = PublishResult(image=f"{src}@{child_digest}", image_id=ids[platform], repository=str(job.dest))
            child.digest, child.digest_ref = child_digest, f"{job.dest}@{child_digest}"
            passed = passing[platform]
            child_out = out.parent / slug(platform) / out.name
            smoked = [passed] if passed else []
            ref = f"{src}@{child_digest}"
            signing.sign_promote(job.signing, ref, child, smoked, child_out, job.log, job.matrix_path)
        signing.sign_index_digest(job.signing, result, out, job.log)

    with job.recorded(result, out):
        # --require-signed: an index staged by this command (--index-of) is signed in dest before its tags move;
        # its children now
        for ref in [f"{src}@{d}" for d in found.values()] if staged_here else [source]:
            signing.before_promote(job.signing, ref)
        # by config digest (graph-driver engine) or manifest digest (containerd image store); an index of one
        # platform is that platform's image as the containerd store keeps it with BuildKit's attestations beside
        # it, and smoke recorded the index's own digest (issue 22)
        sole = (reference,) if len(found) == 1 else ()
        passing.update({p: job.reports.first(i, found[p], *sole) for p, i in ids.items()})
        if sole and (passed := next(iter(passing.values()))) is not None and passed.report.image_id is not None:
            result.image_id = passed.report.image_id
        for platform in [p for p, passed in passing.items() if passed is None]:
            passing[platform] = _smoked_as_index(job, registry, src, found[platform])
        for platform, report in passing.items():
            if report is None and not job.allow_unsmoked:
                raise PublishFailed(
                    f"refusing to promote the index {source}: {platform} ({ids[platform][:19]}) "
                    f"has no passing smoke report ({len(job.reports.paths)} report(s) looked at)",
                    hint="pass its --report, or --allow-unsmoked",
                )
            if report is None:  # the publish report says which leg went unsmoked (--allow-unsmoked)
                result.allow_unsmoked = True
                result.warning = f"{platform} ({ids[platform][:19]}) promoted without a passing smoke report"
        result.smoke_report = ", ".join(str(r.path) for r in passing.values() if r)
        lock_gate(job, [(f"{src}@{found[p]}", _Labelled(_labels(config))) for p, (_, config) in configs.items()])
        check_promises([_labels(config) for _, config in configs.values()], tags, index=True)
        result.digest, result.refs = promote(source, job.dest, tags, job.log, sign if job.signing.wanted else None)
        result.staging_ref, result.digest_ref = source, f"{job.dest}@{result.digest}"
    return True


def stage_index(refs: Sequence[str], log: Log) -> str:
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
        # a one-platform index (the containerd store's image with BuildKit attestations): its platform's manifest
        listed = with_retries(f"reading {ref}", functools.partial(index_children, registry, src, digest))
        if listed is not None:
            if len(listed) != 1:
                raise ConfigError(f"--index-of {ref} is an index of {len(listed)} platforms, not one platform's image")
            children.append(Child(*next(iter(listed.items()))))
            continue
        _, config = with_retries(f"reading {ref}", functools.partial(registry.config, src.repo, digest))
        children.append(Child(f"{config.get('os')}/{config.get('architecture')}", digest))
    tag = f"staging-index-{children[0].digest.split(':')[-1][:12]}"
    digest = with_retries(f"writing the index to {src}", lambda: assemble(registry, src.repo, tag, children))
    log(f"staged index {src}@{digest} ({', '.join(c.platform for c in children)})")
    return f"{src}@{digest}"


class _Labelled:
    """A staged image's labels where lock_gate expects an engine image (its `.labels`)."""

    def __init__(self, labels: dict[str, object]) -> None:
        self.labels = {str(k): str(v) for k, v in labels.items()}


def _labels(config: object) -> dict[str, object]:
    """The labels of an image config read from a registry ({} when it has none)."""
    inner = config.get("config") if isinstance(config, dict) else None
    labels = inner.get("Labels") if isinstance(inner, dict) else None
    return labels if isinstance(labels, dict) else {}


def _repo(text: str) -> RepoRef:
    try:
        return RepoRef.parse(text)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
