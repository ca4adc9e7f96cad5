"""Publish an image: gate on a passing smoke report for its exact ID, push under a staging tag, verify the
registry's digest, then move the public tags onto that complete manifest. Also promotes a staged digest
from one repository to public tags of another without rebuilding.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from tenacity import RetryError, Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from imagebuild.engine.interface import EngineError
from imagebuild.engine.registry import Registry, RegistryError, RepoRef
from imagebuild.envvars import env_int
from imagebuild.errors import ConfigError, PublishFailed
from imagebuild.plan.imageref import LOCAL_REPO, ImageRef
from imagebuild.release.ociindex import OCI_INDEX, OCI_MANIFEST, config_labels, media_types, platform_manifest
from imagecontract.atomic import write_atomic
from imagecontract.models import ModelError, SmokeReport

if TYPE_CHECKING:
    from imagebuild.engine.interface import ContainerEngine, LocalImage

T = TypeVar("T")


def attempts() -> int:
    return env_int("IMAGEBUILD_PUBLISH_ATTEMPTS", 3, minimum=1)


def _transient(exc: BaseException) -> bool:
    from requests import RequestException

    if isinstance(exc, RegistryError | EngineError):  # EngineError: no answer, a 5xx, a push stream's error
        return exc.transient
    return isinstance(exc, RequestException)


def with_retries(what: str, action: Callable[[], T]) -> T:
    """Run action, retrying transient registry failures a bounded number of times."""
    retrying = Retrying(
        stop=stop_after_attempt(attempts()),
        wait=wait_exponential(multiplier=0.5, max=4),
        retry=retry_if_exception(_transient),
        reraise=False,
    )
    try:
        return retrying(action)
    except RetryError as exc:
        last = exc.last_attempt.exception()
        raise PublishFailed(f"{what} failed after {attempts()} attempts: {_one_line(last)}") from last
    except (RegistryError, EngineError) as exc:
        raise PublishFailed(f"{what} failed: {_one_line(exc)}") from exc


def _one_line(exc: BaseException | None) -> str:
    text = str(exc or "unknown error").strip().splitlines()
    return text[-1] if text else type(exc).__name__


@dataclass
class PublishResult:
    """The publish report."""

    image: str
    image_id: str
    repository: str
    ok: bool = False
    digest: str | None = None
    staging_ref: str | None = None
    refs: list[str] = field(default_factory=list)
    digest_ref: str | None = None
    smoke_report: str | None = None
    allow_unsmoked: bool = False
    warning: str | None = None
    error: str | None = None
    created: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    platforms: dict[str, str] = field(default_factory=dict)  # an index: OCI platform -> child digest
    media_type: str | None = None  # of what `digest` names, as the registry serves it (read back after the push)
    platform_media_types: dict[str, str] = field(default_factory=dict)  # an index: OCI platform -> child's type
    attestations: list[str] = field(default_factory=list)  # BuildKit attestation manifests left out of the index
    require_oci: bool = False  # --oci: anything but OCI media types read back stops the publish before any tag moves
    ref: ImageRef | None = None  # the image, as build or the registry recorded it; pushed: repository and digest
    lock: dict[str, Any] | None = None  # the image's lock record (io.imagebuild.lock; imagebuild.lock.stages)

    def write(self, path: Path) -> None:
        data = {k: v for k, v in self.__dict__.items() if k != "ref"}
        ref = self.ref or ImageRef(self.image_id, recorded_by="engine")
        if self.digest:
            ref = ref.pushed(self.repository, self.digest, self.refs)
        data["image"] = ref.as_dict()
        write_atomic(path, json.dumps({"schema_version": 1, **data}, indent=2) + "\n")


def report_refusal(report: Any, image_id: str) -> str | None:
    """Why a smoke report does not let this image be published, or None when it does.

    The document must fit the contract's SmokeReport and be about this image ID; the rule itself (`passed` must
    agree with the checks and the exit code) is `SmokeReport.refusal()`, the one place it lives.
    """
    try:
        smoke = SmokeReport.from_dict(report)
    except ModelError as exc:
        return f"not a smoke report ({str(exc)[:160]})"
    if smoke.image_id != image_id:
        return "written for another image"
    return smoke.refusal()


def find_passing_report(image_id: str, candidates: Iterable[Path]) -> Path | None:
    """The first smoke report that passed for exactly this image ID (see report_refusal)."""
    for path in candidates:
        try:
            report: dict[str, Any] = json.loads(path.read_text())
        except (OSError, ValueError, RecursionError):
            continue
        if report_refusal(report, image_id) is None:
            return path
    return None


def public_tags(ref: ImageRef, given: str) -> list[str]:
    """The image's local imagebuild tags (`<target>`, `<target>-<sha>`), else the tag it was named by."""
    tags = sorted({t.split(":", 1)[1] for t in ref.tags if t.startswith(f"{LOCAL_REPO}:")})
    if tags:
        return tags
    last = given.rsplit("/", 1)[-1]
    return [last.split(":", 1)[1]] if ":" in last and "@" not in given else ["latest"]


def record_media_types(result: PublishResult, registry: Registry, repo: RepoRef, digest: str) -> None:
    """Read digest back and record what the registry serves: its media type, each platform child's, attestations.

    With result.require_oci (publish --oci), anything but OCI media types is PublishFailed (exit 5): staged only,
    no public tag has moved."""
    types = with_retries(f"reading media types back from {repo.host}", lambda: media_types(registry, repo.repo, digest))
    result.media_type, result.platform_media_types, result.attestations = (
        types.media_type,
        types.children,
        types.attestations,
    )
    found = [types.media_type, *types.children.values()]
    if result.require_oci and not all(t in (OCI_INDEX, OCI_MANIFEST) for t in found):
        raise PublishFailed(
            f"{repo}@{digest} reads back as {', '.join(sorted(set(found)))}, not OCI (--oci): no public tag moved",
            hint="build it with buildx on an engine with the containerd image store (imagebuild doctor)",
        )


def publish_image(
    engine: ContainerEngine,
    image: LocalImage,
    given: str,
    repo: RepoRef,
    result: PublishResult,
    tags: list[str],
    log: Callable[[str], None],
    before_tags: Callable[[], None] | None = None,
    platform: str | None = None,
) -> None:
    """Stage, verify, then move the public tags; a failure leaves the public tags untouched.

    An engine with the containerd image store holds a one-platform build as an index (the platform's manifest and
    BuildKit's attestation manifest) and pushes that index; what is signed, tagged and reported is then the
    platform's own manifest (platform, else the index's only platform), as a graph-driver engine pushes it: one
    published digest per platform on every engine, and the one a pull resolves to is the one signed.

    before_tags (signing) runs on the verified staged digest before any public tag moves: when it raises, no
    public tag ever names an unsigned image."""
    registry = Registry(repo)
    staging_tag = f"staging-{image.id.split(':')[-1][:12]}"
    result.staging_ref = f"{repo}:{staging_tag}"
    engine.tag(image.id, str(repo), staging_tag)
    try:
        log(f"push {result.staging_ref}")
        local_digest = with_retries(f"push to {repo}", lambda: engine.push(str(repo), staging_tag))
    finally:
        engine.untag(result.staging_ref)
    remote = with_retries(f"reading the digest back from {repo.host}", lambda: registry.digest(repo.repo, staging_tag))
    if remote != local_digest:
        raise PublishFailed(f"digest mismatch for {result.staging_ref}: local {local_digest}, registry {remote}")
    digest = with_retries(
        f"reading {repo}@{local_digest}", lambda: platform_manifest(registry, repo.repo, local_digest, platform)
    )
    if digest != local_digest:
        log(f"{repo}@{local_digest} is an index; its {platform or 'one platform'}'s manifest is {digest}")
    record_media_types(result, registry, repo, digest)
    result.digest = digest
    result.digest_ref = f"{repo}@{digest}"
    if before_tags is not None:
        from imagebuild.release.sign_journal import undone_unless_complete

        with undone_unless_complete(repo, log):  # interrupted or failed: no `.sig`/`.att` tag left half written
            before_tags()
    for tag in tags:
        log(f"tag {repo}:{tag} -> {digest}")
        moved = with_retries(
            f"tagging {repo}:{tag}", functools.partial(registry.copy, repo.repo, digest, repo.repo, tag)
        )
        check = with_retries(f"verifying {repo}:{tag}", functools.partial(registry.digest, repo.repo, tag))
        if digest not in (moved, check):
            raise PublishFailed(f"{repo}:{tag} points at {check}, not {digest}")
        result.refs.append(f"{repo}:{tag}")


def staged_ref(registry: Registry, repo: RepoRef, reference: str) -> ImageRef:
    """A staged image as the registry holds it: the config digest is the image ID smoke recorded."""
    image_id, config = registry.config(repo.repo, reference)
    target = config_labels(config).get("io.imagebuild.target")
    digest = reference if reference.startswith("sha256:") else registry.digest(repo.repo, reference)
    return ImageRef(image_id, target, (), str(repo), digest, recorded_by="registry")


def promote(
    source: str,
    dest: RepoRef,
    tags: list[str],
    log: Callable[[str], None],
    before_tags: Callable[[str], None] | None = None,
) -> tuple[str, list[str]]:
    """Copy a staged `HOST/REPO@sha256:...` (or :tag) to public tags of dest, same registry host.

    With before_tags (signing), the digest is first copied into dest by digest alone (no tag: an index brings
    its children), before_tags(digest) signs it there, and only then do the public tags move."""
    name, sep, digest = source.partition("@")
    src = RepoRef.parse(name if sep else source.rsplit(":", 1)[0])
    reference = digest if sep else source.rsplit(":", 1)[1]
    if src.host != dest.host:
        raise ConfigError(f"promote copies within one registry; {src.host} is not {dest.host}")
    registry = Registry(dest)
    resolved = with_retries(f"reading {source}", lambda: registry.digest(src.repo, reference))
    if resolved is None:
        raise PublishFailed(f"{source} does not exist in {src.host}")
    if before_tags is not None:
        if src.repo != dest.repo:
            log(f"stage {src}@{resolved} -> {dest}@{resolved}")
            with_retries(f"copying to {dest}", lambda: registry.copy(src.repo, resolved, dest.repo, resolved))
        from imagebuild.release.sign_journal import undone_unless_complete

        with undone_unless_complete(dest, log):  # interrupted or failed: no `.sig`/`.att` tag left half written
            before_tags(resolved)
    refs = []
    for tag in tags:
        log(f"promote {src}@{resolved} -> {dest}:{tag}")
        with_retries(f"promoting to {dest}:{tag}", functools.partial(registry.copy, src.repo, resolved, dest.repo, tag))
        check = with_retries(f"verifying {dest}:{tag}", functools.partial(registry.digest, dest.repo, tag))
        if check != resolved:
            raise PublishFailed(f"{dest}:{tag} points at {check}, not {resolved}")
        refs.append(f"{dest}:{tag}")
    return resolved, refs
