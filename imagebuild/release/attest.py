"""The in-toto predicates imagebuild attaches to a published digest: SBOM, SLSA provenance, smoke reports.

Predicate types (what `cosign attest --type` and `imagebuild verify` use):
- SBOM: `https://cyclonedx.org/bom` (the CycloneDX document that is also /opt/imagebuild/sbom.json),
- provenance: `https://slsa.dev/provenance/v1` (matrix file and hash, the resolved target manifest, source pins,
  builder, git revision),
- smoke: `urn:imagebuild:smoke-report:v1`, one attestation per GPU arch, the predicate being that arch's smoke
  report (whose `image_id` is the image config digest: bound twice, by subject digest and by image ID).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from typing import Any

import imagebuild
from imagecontract import kinds
from imagecontract.models import Manifest
from imagecontract.models.manifest import Source

SBOM_TYPE = "https://cyclonedx.org/bom"
PROVENANCE_TYPE = "https://slsa.dev/provenance/v1"
SMOKE_TYPE = "urn:imagebuild:smoke-report:v1"
BUILD_TYPE = "urn:imagebuild:build:v1"


def subject_matches(stmt: Mapping[str, Any], digest: str) -> bool:
    """Whether the statement names this digest (`sha256:<hex>`) among its subjects."""
    algo, _, hexdigest = digest.partition(":")
    subjects = stmt.get("subject")
    return isinstance(subjects, list) and any(
        isinstance(s, dict) and isinstance(s.get("digest"), dict) and s["digest"].get(algo) == hexdigest
        for s in subjects
    )


def _git_dependency(name: str, source: Source | None) -> dict[str, Any] | None:
    if source is None:
        return None
    if source.git and source.commit:
        dep: dict[str, Any] = {"name": name, "uri": f"git+{source.git}@{source.commit}"}
        dep["digest"] = {"gitCommit": source.commit}
        if source.subdir:
            dep["annotations"] = {"subdir": source.subdir}
        return dep
    if source.url:
        return {"name": name, "uri": source.url, "digest": {"sha256": source.sha256 or ""}}
    return None


def _builder() -> tuple[str, str | None]:
    """The builder ID and the invocation: the GitHub workflow run in CI, this machine's imagebuild otherwise."""
    env = os.environ
    if env.get("GITHUB_ACTIONS") == "true" and env.get("GITHUB_REPOSITORY"):
        server = env.get("GITHUB_SERVER_URL", "https://github.com")
        workflow = env.get("GITHUB_WORKFLOW_REF") or f"{env['GITHUB_REPOSITORY']}/.github/workflows/images.yml"
        run = f"{server}/{env['GITHUB_REPOSITORY']}/actions/runs/{env.get('GITHUB_RUN_ID', '')}"
        return f"{server}/{workflow}", f"{run}/attempts/{env.get('GITHUB_RUN_ATTEMPT', '1')}"
    return f"urn:imagebuild:builder:local:{imagebuild.__version__}", None


def provenance(
    labels: Mapping[str, str],
    manifest: Manifest | None,
    matrix_path: str,
    component_sources: Mapping[str, Mapping[str, Any]],
    engine: str | None = None,
    built_on: str | None = None,
    image_id: str | None = None,
) -> dict[str, Any]:
    """The SLSA v1 provenance predicate of one image, from its labels and manifest and the matrix pins.

    image_id: the engine's own ID of the image published as this digest, the one its smoke report names. A
    graph-driver engine's ID is the config digest, which the registry serves too; the containerd store's is the
    digest of the local index (the platform's manifest and BuildKit's attestation) that no published digest
    equals. Signed here, bound to the digest, it is what ties that smoke report to this image (release/verify.py)."""
    revision = labels.get("org.opencontainers.image.revision", "")
    commit = revision.removesuffix("-dirty")
    deps: list[dict[str, Any]] = []
    if re.fullmatch(r"[0-9a-f]{40}", commit):
        deps.append({"name": "imagebuild checkout", "digest": {"gitCommit": commit}})
    deps.append({"name": "matrix", "uri": matrix_path, "digest": {"sha256": labels.get("io.imagebuild.matrix-sha256")}})
    deps += _manifest_dependencies(manifest, component_sources) if manifest else []
    for sub in _base_substitution(labels).get("base_substitution", []):  # what the build really started FROM
        digest = str(sub.get("used_digest") or "")
        deps.append(
            {
                "name": f"base image used ({sub.get('platform')}), in place of {sub.get('public')}",
                "uri": f"docker-image:{sub.get('used')}",
                "digest": {"sha256": digest.removeprefix("sha256:")} if digest.startswith("sha256:") else {},
            }
        )
    builder_id, invocation = _builder()
    metadata = {k: v for k, v in {"invocationId": invocation, "finishedOn": built_on}.items() if v}
    return {
        "buildDefinition": {
            "buildType": BUILD_TYPE,
            "externalParameters": {
                "target": labels.get("io.imagebuild.target"),
                "matrix": {"path": matrix_path, "sha256": labels.get("io.imagebuild.matrix-sha256")},
                "arches": labels.get("io.imagebuild.arches"),
                "lock": _lock_record(labels),
                **_base_substitution(labels),
            },
            "internalParameters": {
                "manifest": manifest.to_dict() if manifest else {},
                "labels": dict(labels),
                "engine": engine,
                **({"image_id": image_id} if image_id else {}),
            },
            "resolvedDependencies": deps,
        },
        "runDetails": {
            "builder": {"id": builder_id, "version": {"imagebuild": imagebuild.__version__}},
            "metadata": metadata,
        },
    }


def _manifest_dependencies(
    manifest: Manifest, component_sources: Mapping[str, Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """The base image, torch's source and patches, each included component's and the runtime's source."""
    from imagebuild.release.sbom import matrix_source

    deps: list[dict[str, Any]] = []
    platform = manifest.platform
    if platform.base_image:
        base: dict[str, Any] = {"name": "base image", "uri": f"docker-image:{platform.base_image}"}
        if platform.base_digest:
            base["digest"] = {"sha256": platform.base_digest.removeprefix("sha256:")}
        deps.append(base)
    torch, runtime = manifest.torch, manifest.runtime
    for dep in [
        _git_dependency("torch", torch.source) if torch.obtained == "source" else None,
        *[_git_dependency(f"patch:{p.name}", p) for p in torch.patches],
        *[
            _git_dependency(name, matrix_source(component_sources.get(name)))
            for name, comp in sorted(manifest.components.items())
            if comp.included
        ],
        _git_dependency(f"runtime:{runtime.name if runtime else None}", runtime.source if runtime else None),
    ]:
        if dep:
            deps.append(dep)
    return deps


def _base_substitution(labels: Mapping[str, str]) -> dict[str, Any]:
    """The base the image was built FROM in place of the public one (`--base-substitute`): both names and the
    digest used, from its label; nothing when it was built FROM its own base."""
    from imagebuild.building.base_substitute import from_labels

    records = from_labels(dict(labels))
    return {} if records is None else {"base_substitution": records}


def _lock_record(labels: Mapping[str, str]) -> dict[str, Any]:
    """The lock the image was built from (matrix.lock.json's sha256, the inputs it left unpinned), as publish saw it."""
    from imagebuild.lock.stages import publish_gate

    record, refusal = publish_gate(dict(labels))
    return {**record, "refused_because": refusal} if refusal else record


def smoke_predicate(report: Mapping[str, Any]) -> dict[str, Any]:
    """One arch's smoke report as the predicate (the whole report: checks, numbers, versions, image_id)."""
    return dict(report)


def arch_base(arch: str) -> str:
    """`gfx942:sramecc+:xnack-` -> `gfx942`: reports name the device's full target ID, labels may not."""
    return arch.split(":", 1)[0]


def claimed_arches(labels: Mapping[str, str]) -> list[str]:
    """The arches an image claims (its io.imagebuild.arches label); `cpu` for an image built for none."""
    value = labels.get("io.imagebuild.arches", "")
    arches = [a for a in re.split(r"[;,\s]+", value) if a and a != "none"]
    return arches or [kinds.CPU_ARCH]


def dump(data: Mapping[str, Any]) -> str:
    return json.dumps(data, indent=2, sort_keys=True) + "\n"
