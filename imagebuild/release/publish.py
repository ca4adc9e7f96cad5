"""Publish an image: gate on a passing smoke report for its exact ID, push under a staging tag, verify the
registry's digest, then move the public tags onto that complete manifest. Also promotes a staged digest
from one repository to public tags of another without rebuilding.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from tenacity import RetryError, Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from imagebuild.engine.registry import Registry, RegistryError, RepoRef
from imagebuild.envvars import env_int
from imagebuild.errors import ConfigError, PublishFailed
from imagebuild.plan.imageref import LOCAL_REPO, ImageRef
from imagecontract.atomic import write_atomic
from imagecontract.models import ModelError, SmokeReport

if TYPE_CHECKING:
    import docker
    from docker.models.images import Image

T = TypeVar("T")


def attempts() -> int:
    return env_int("IMAGEBUILD_PUBLISH_ATTEMPTS", 3, minimum=1)


def _transient(exc: BaseException) -> bool:
    from docker.errors import APIError
    from requests import RequestException

    if isinstance(exc, RegistryError):
        return exc.transient
    if isinstance(exc, APIError):
        return exc.status_code is None or exc.status_code >= 500
    return isinstance(exc, RequestException | PushError)


class PushError(Exception):
    """The engine reported an error in the push stream (connection refused, blob upload failed, ...)."""


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
    except (RegistryError, PushError) as exc:
        raise PublishFailed(f"{what} failed: {_one_line(exc)}") from exc
    except Exception as exc:
        from docker.errors import DockerException

        if isinstance(exc, DockerException):
            raise PublishFailed(f"{what} failed: {_one_line(exc)}") from exc
        raise


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
    ref: ImageRef | None = None  # the image, as build or the registry recorded it; pushed: repository and digest

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


def push(client: docker.DockerClient, repo: RepoRef, tag: str) -> str:
    """Push repo:tag through the engine; returns the digest the engine computed (the local one)."""
    digest = ""
    for item in client.images.push(str(repo), tag=tag, stream=True, decode=True):
        if "error" in item:
            raise PushError(item.get("errorDetail", {}).get("message") or item["error"])
        aux = item.get("aux") or {}
        if aux.get("Tag") == tag and aux.get("Digest"):
            digest = aux["Digest"]
    if not digest:
        raise PushError(f"the engine reported no digest for {repo}:{tag}")
    return digest


def publish_image(
    client: docker.DockerClient,
    image: Image,
    given: str,
    repo: RepoRef,
    result: PublishResult,
    tags: list[str],
    log: Callable[[str], None],
    before_tags: Callable[[], None] | None = None,
) -> None:
    """Stage, verify, then move the public tags; a failure leaves the public tags untouched.

    before_tags (signing) runs on the verified staged digest before any public tag moves: when it raises, no
    public tag ever names an unsigned image."""
    registry = Registry(repo)
    staging_tag = f"staging-{image.id.split(':')[-1][:12]}"
    result.staging_ref = f"{repo}:{staging_tag}"
    image.tag(str(repo), tag=staging_tag)
    try:
        log(f"push {result.staging_ref}")
        local_digest = with_retries(f"push to {repo}", lambda: push(client, repo, staging_tag))
    finally:
        client.images.remove(result.staging_ref, noprune=True)
    remote = with_retries(f"reading the digest back from {repo.host}", lambda: registry.digest(repo.repo, staging_tag))
    if remote != local_digest:
        raise PublishFailed(f"digest mismatch for {result.staging_ref}: local {local_digest}, registry {remote}")
    result.digest = local_digest
    result.digest_ref = f"{repo}@{local_digest}"
    if before_tags is not None:
        before_tags()
    for tag in tags:
        log(f"tag {repo}:{tag} -> {local_digest}")
        moved = with_retries(
            f"tagging {repo}:{tag}", lambda tag=tag: registry.copy(repo.repo, local_digest, repo.repo, tag)
        )
        check = with_retries(f"verifying {repo}:{tag}", lambda tag=tag: registry.digest(repo.repo, tag))
        if local_digest not in (moved, check):
            raise PublishFailed(f"{repo}:{tag} points at {check}, not {local_digest}")
        result.refs.append(f"{repo}:{tag}")


def staged_ref(registry: Registry, repo: RepoRef, reference: str) -> ImageRef:
    """A staged image as the registry holds it: the config digest is the image ID smoke recorded."""
    image_id, config = registry.config(repo.repo, reference)
    labels = (config.get("config") or {}).get("Labels") or {}  # type: ignore[union-attr]
    target = labels.get("io.imagebuild.target") if isinstance(labels, dict) else None
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
        before_tags(resolved)
    refs = []
    for tag in tags:
        log(f"promote {src}@{resolved} -> {dest}:{tag}")
        with_retries(f"promoting to {dest}:{tag}", lambda tag=tag: registry.copy(src.repo, resolved, dest.repo, tag))
        check = with_retries(f"verifying {dest}:{tag}", lambda tag=tag: registry.digest(dest.repo, tag))
        if check != resolved:
            raise PublishFailed(f"{dest}:{tag} points at {check}, not {resolved}")
        refs.append(f"{dest}:{tag}")
    return resolved, refs
