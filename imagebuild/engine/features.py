"""What a container engine can do for imagebuild (issue 22), and the one error line when a command needs more.

Three features, each decided from facts the engine reports (its version, its image store) and the client:

- multi-platform in one build: one BuildKit build exports every OCI platform as one local image index. Needs the
  containerd image store (the graph-driver store holds one platform per name) and buildx (a classic `docker build`
  sends one platform).
- OCI media types on push: what the engine pushes is what it stores; with the containerd store and BuildKit's
  `oci-mediatypes=true` that is an OCI index of OCI manifests. A graph-driver engine (Docker 20.10) stores and pushes
  Docker schema 2 (moby/moby@411e817ddf71 (v26.1.5):distribution/push_v2.go:256 is that path's push).
- timestamp rewriting: BuildKit's `rewrite-timestamp=true` exporter option (BuildKit >= 0.13), which needs buildx
  to be passed. Docker's own image exporter forces `unpack=true` (moby/moby@411e817ddf71:
  builder/builder-next/exporter/overrides/wrapper.go:31), which BuildKit refuses with rewrite-timestamp
  (moby/moby@411e817ddf71:vendor/github.com/moby/buildkit/exporter/containerimage/export.go:290), so the rewrite
  works through an exporter that does not unpack (`type=oci`, then `docker load`; or `type=registry`).

BuildKit's version is the one vendored by the engine release (a table, cited below), unless buildx reports one:
Debian's build reports `v0.0.0+unknown`.
"""

from __future__ import annotations

from dataclasses import dataclass

from imagebuild.errors import ConfigError

CONTAINERD_STORE = "containerd"
REWRITE_WHERE = "BuildKit 0.13 with buildx (Docker 26.1)"
WHERE = "Docker 26.1 with the containerd image store and buildx (scripts/setup.sh starts it)"

# moby release (major.minor) -> the BuildKit it vendors: moby/moby@5d6db842238e (v20.10.24):vendor.conf:37,
# @411e817ddf71 (v26.1.5):vendor.mod:64, @ff1e2c0de72a (v27.0.1):vendor.mod, @af898abe4466 (v28.0.0):vendor.mod,
# @3ef3c07c883b (v28.5.2, the build Debian forky's docker.io 28.5.2+dfsg4 names):vendor.mod:65.
VENDORED_BUILDKIT = {
    (20, 10): "0.8.4",
    (26, 1): "0.13.2",
    (27, 0): "0.14.1",
    (27, 3): "0.16.0",
    (28, 0): "0.20.0",
    (28, 5): "0.25.2",
}


@dataclass(frozen=True)
class Feature:
    name: str  # the key: multi-platform, oci-media-types, timestamp-rewriting
    title: str
    has_it: str  # where it exists, for the error line


FEATURES = {
    "multi-platform": Feature("multi-platform", "multi-platform in one build", WHERE),
    "oci-media-types": Feature("oci-media-types", "OCI media types on push", WHERE),
    "timestamp-rewriting": Feature("timestamp-rewriting", "timestamp rewriting", REWRITE_WHERE),
}


def _version_tuple(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.lstrip("v").split("+")[0].split("-")[0].split("."):
        if not piece.isdigit():
            break
        parts.append(int(piece))
    return tuple(parts)


def vendored_buildkit(server_version: str) -> str:
    """The BuildKit a moby release vendors; the nearest listed release at or below it; 'unknown' below all."""
    version = _version_tuple(server_version)[:2]
    known = [release for release in sorted(VENDORED_BUILDKIT) if release <= version]
    return VENDORED_BUILDKIT[known[-1]] if known else "unknown"


@dataclass(frozen=True)
class EngineFacts:
    """The engine as imagebuild sees it: versions, image store, whether buildx drives builds."""

    server_version: str
    store: str  # "containerd", or the graph driver's name (overlay2)
    buildkit: str  # "0.13.2", or "unknown"
    buildx: bool

    def missing(self, feature: str) -> str | None:
        """Why this engine lacks feature, or None when it has it."""
        containerd = self.store == CONTAINERD_STORE
        if feature in ("multi-platform", "oci-media-types"):
            if not containerd:
                return f"the {self.store or 'unknown'} image store"
            return None if self.buildx else "no buildx"
        if feature == "timestamp-rewriting":
            if _version_tuple(self.buildkit) < (0, 13):
                return f"BuildKit {self.buildkit}"
            return None if self.buildx else "no buildx"
        raise ValueError(f"unknown engine feature {feature!r}")

    def features(self) -> dict[str, bool]:
        return {name: self.missing(name) is None for name in FEATURES}

    def describe(self) -> str:
        return f"Docker {self.server_version}, {self.store or 'unknown'} image store, BuildKit {self.buildkit}"

    def require(self, feature: str, needed_by: str) -> None:
        """ConfigError (exit 2, one line) naming the feature, why this engine lacks it and where it exists."""
        why = self.missing(feature)
        if why is None:
            return
        wanted = FEATURES[feature]
        raise ConfigError(
            f"{needed_by} needs {wanted.title}, which this engine lacks ({self.describe()}: {why}); "
            f"{wanted.has_it} has it"
        )


def engine_facts(builds_with: str, facts: EngineFacts) -> dict[str, object]:
    """What `imagebuild doctor` reports about the engine (as JSON; prove.doctor.engine_lines prints it)."""
    return {
        "version": facts.server_version,
        "store": facts.store or "unknown",
        "buildkit": facts.buildkit,
        "builds_with": builds_with,
        "features": [
            {
                "name": f.name,
                "title": f.title,
                "available": facts.missing(f.name) is None,
                "missing": facts.missing(f.name),
                "has_it": f.has_it,
            }
            for f in FEATURES.values()
        ],
    }
