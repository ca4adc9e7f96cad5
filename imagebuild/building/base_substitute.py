"""Base substitution (issue 31): build FROM a local base or a mirror in place of the public base a target names.

A target's base, for a user, is a public image pinned by digest (`debian:bookworm-slim@sha256:...`); a machine
without Docker Hub (this one, an air-gapped site) builds from its own copy made the same way. `imagebuild build
--base-substitute PUBLIC=LOCAL[,platform=OCI]` names it: every `FROM` of the Dockerfile that names PUBLIC (with or
without its digest) for that OCI platform (every one when none is given; a platform's own entry wins) starts FROM
LOCAL instead. The committed Dockerfile is never changed: the substituted one is written under build/render/ and
built from there, like a non-default arch list.

What was substituted is recorded, both names and the digest actually used (the engine's image ID of a local image,
the registry's digest of a mirror's), in the build report (`base_substitution`), in the image's label
`io.imagebuild.base-substitution` and from there in the provenance publish signs
(`externalParameters.base_substitution`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from pydantic import TypeAdapter, ValidationError

from imagebuild.errors import ConfigError
from imagebuild.matrix.fields import Digest, ImageName, excerpt
from imagebuild.matrix.oci_platform import KNOWN, for_host

LABEL = "io.imagebuild.base-substitution"
OPTION = "--base-substitute"
# `FROM [--platform=P] IMAGE [AS NAME]`, as the templates write it (one space between words)
_FROM = re.compile(r"^FROM (?:--platform=(?P<platform>\S+) )?(?P<image>\S+)(?P<rest>(?: AS \S+)?)$")
_NAME = TypeAdapter(ImageName)
_DIGEST = TypeAdapter(Digest)


@dataclass(frozen=True)
class Substitute:
    """One `--base-substitute`: the public base, what stands in for it, on which OCI platform (None: every one)."""

    public: str
    local: str
    platform: str | None = None

    def __str__(self) -> str:
        return f"{self.public}={self.local}" + (f",platform={self.platform}" if self.platform else "")


def _image(value: str, what: str, text: str) -> str:
    name, _, digest = value.partition("@")
    try:
        _NAME.validate_python(name)
        if digest:
            _DIGEST.validate_python(digest)
    except ValidationError:
        raise ConfigError(
            f"{OPTION} {excerpt(text)}: {what} {excerpt(value)} is not an image reference "
            "([registry/]path[:tag][@sha256:<64 hex>])"
        ) from None
    return value


def parse(text: str) -> Substitute:
    """`PUBLIC=LOCAL[,platform=OCI]`; a ConfigError (exit 2) naming what is wrong."""
    head, _, option = text.partition(",")
    public, eq, local = head.partition("=")
    if not eq or not public or not local:
        raise ConfigError(
            f"{OPTION} {excerpt(text)}: expected PUBLIC=LOCAL[,platform=OCI]",
            hint=f"e.g. {OPTION} debian:bookworm-slim=local/debian:bookworm",
        )
    platform = None
    if option:
        key, eq, platform = option.partition("=")
        known = [p.oci for p in KNOWN]
        if key != "platform" or not eq or platform not in known:
            raise ConfigError(f"{OPTION} {excerpt(text)}: after ',' expected platform=<{' or '.join(known)}>")
    if "@" in public:
        raise ConfigError(f"{OPTION} {excerpt(text)}: name the public base without its digest (it matches both)")
    return Substitute(_image(public, "the public base", text), _image(local, "the substitute", text), platform)


def parse_all(texts: tuple[str, ...] | list[str]) -> list[Substitute]:
    subs = [parse(text) for text in texts]
    seen: set[tuple[str, str | None]] = set()
    for sub in subs:
        if (sub.public, sub.platform) in seen:
            raise ConfigError(f"{OPTION}: {sub.public} is substituted twice for {sub.platform or 'every platform'}")
        seen.add((sub.public, sub.platform))
    return subs


def _choose(subs: list[Substitute], public: str, platform: str) -> Substitute | None:
    own = [s for s in subs if s.public == public and s.platform == platform]
    return next(iter(own or [s for s in subs if s.public == public and s.platform is None]), None)


def build_platform() -> str | None:
    """The OCI platform this machine builds on ($BUILDPLATFORM of a local BuildKit)."""
    import platform as host

    found = for_host(host.machine())
    return found.oci if found else None


def apply(
    dockerfile: str, subs: list[Substitute], platform: str, builder: str | None = None
) -> tuple[str, list[dict[str, Any]]]:
    """(the Dockerfile with every FROM of a substituted public base replaced, one record per replaced line that
    the build reads: the stages of the OCI platform being built and of the build platform).

    platform: the OCI platform being built, for a `FROM` without `--platform=`; builder: the build platform."""
    out: list[str] = []
    records: list[dict[str, Any]] = []
    for line in dockerfile.split("\n"):
        found = _FROM.match(line)
        if found is None:
            out.append(line)
            continue
        image = found.group("image")
        public, _, digest = image.partition("@")
        on = found.group("platform") or platform
        sub = _choose(subs, public, on)
        if sub is None:
            out.append(line)
            continue
        flag = f"--platform={found.group('platform')} " if found.group("platform") else ""
        out.append(f"FROM {flag}{sub.local}{found.group('rest')}")
        if on in (platform, builder):  # another platform's stage is in the file but not read by this build
            records.append({"platform": on, "public": public, "public_digest": digest or None, "used": sub.local})
    return "\n".join(out), records


def unused(subs: list[Substitute], applied: list[list[dict[str, Any]]]) -> list[Substitute]:
    """The substitutions no FROM of any planned build named."""
    hit = {(r["public"], r["platform"]) for records in applied for r in records}
    return [s for s in subs if not any(p == s.public and (s.platform in (None, on)) for p, on in hit)]


def resolve_used(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each record with the digest actually used: a local image's ID in the engine, a loopback registry's or a
    mirror's digest for that platform; `used_digest: null` and `why` when it cannot be read."""
    from imagebuild.engine.registry import RegistryError
    from imagebuild.lock import images
    from imagebuild.lock.inputs import is_local_image

    done = []
    for record in records:
        used = record["used"]
        found: dict[str, Any]
        if "@" in used:
            found = {"digest": used.partition("@")[2]}
        elif is_local_image(used):
            found = images.resolve_local(used)
        else:
            try:
                found = images.resolve_remote(used, [record["platform"]], limit=30)
            except RegistryError as exc:
                found = {"why": str(exc)}
        digest = found.get("image_id") or (found.get("platforms") or {}).get(record["platform"]) or found.get("digest")
        entry = {**record, "used_digest": digest if isinstance(digest, str) else None}
        if entry["used_digest"] is None:
            entry["why"] = str(found.get("why") or "no digest found")[:300]
        done.append(entry)
    return done


def label(records: list[dict[str, Any]]) -> dict[str, str]:
    """The image label recording the substitution (none without one)."""
    if not records:
        return {}
    return {LABEL: json.dumps(records, separators=(",", ":"), sort_keys=True)}


def from_labels(labels: dict[str, str] | None) -> list[dict[str, Any]] | None:
    """The substitution an image's label records (None: built FROM its own base; [] for an unreadable label is
    never returned: an unreadable one is one record saying so)."""
    text = (labels or {}).get(LABEL)
    if text is None:
        return None
    try:
        data = json.loads(text)
        if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
            raise ValueError
    except (ValueError, RecursionError):
        return [{"unreadable": f"its {LABEL} label is not the record imagebuild writes"}]
    keys = ("platform", "public", "public_digest", "used", "used_digest", "why")
    return [{k: str(r[k])[:300] if r.get(k) is not None else None for k in keys if k in r} for r in data[:16]]
