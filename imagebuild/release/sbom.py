"""The SBOM of a built image as a CycloneDX 1.6 JSON document, made with cyclonedx-python-lib.

Three kinds of components: the OS packages (dpkg status read from the image), the Python distributions of the
image's `python3`, and what imagebuild built from source (torch, the kernel components, the serving runtime) with
the pinned commits and patches generic scanners cannot see, as CycloneDX `pedigree`. The document is a function
of the image (serial number from the image ID, timestamp from its `created` label), so an unchanged image gives
a byte-identical SBOM and a cached SBOM layer.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from cyclonedx.model import Property, XsUri
from cyclonedx.model.bom import Bom, BomMetaData
from cyclonedx.model.component import Commit, Component, ComponentType, Diff, Patch, PatchClassification, Pedigree
from cyclonedx.output.json import JsonV1Dot6
from cyclonedx.schema import SchemaVersion
from packageurl import PackageURL

import imagebuild
from imagecontract.models import KernelsReport, Manifest
from imagecontract.models.manifest import Patch as ManifestPatch
from imagecontract.models.manifest import Source

SCHEMA_VERSION = SchemaVersion.V1_6
IMAGE_PATH = "/opt/imagebuild/sbom.json"  # where the SBOM layer puts it in the image
PROP = "imagebuild"  # namespace of our CycloneDX properties (`imagebuild:arches`, ...)


@dataclass
class Inventory:
    """What the in-image collector read (see sbom_image.COLLECTOR), plus the host's matrix pins."""

    image_id: str
    labels: dict[str, str]
    os_release: dict[str, str] = field(default_factory=dict)
    dpkg: list[dict[str, str]] = field(default_factory=list)
    dists: list[dict[str, Any]] = field(default_factory=list)
    manifest: Manifest | None = None  # /opt/imagebuild/manifest.json, the contract's model (None: the image has none)
    kernels: KernelsReport | None = None  # /opt/imagebuild/kernels.json, likewise
    component_sources: dict[str, dict[str, Any]] = field(default_factory=dict)  # matrix `components.<n>.source`


def _props(**values: object) -> list[Property]:
    return [
        Property(name=f"{PROP}:{key.replace('_', '-')}", value=v if isinstance(v, str) else json.dumps(v))
        for key, v in values.items()
        if v not in (None, "", [], {})
    ]


def _deb(pkg: Mapping[str, str], distro: str | None) -> Component:
    qualifiers = {"arch": pkg.get("Architecture", "")} | ({"distro": distro} if distro else {})
    if pkg.get("Source"):
        qualifiers["upstream"] = pkg["Source"].split(" ")[0]
    return Component(
        type=ComponentType.LIBRARY,
        name=pkg["Package"],
        version=pkg.get("Version"),
        bom_ref=f"deb:{pkg['Package']}:{pkg.get('Architecture', '')}",
        purl=PackageURL(
            "deb", "debian", pkg["Package"], pkg.get("Version"), {k: v for k, v in qualifiers.items() if v}
        ),
    )


def _pypi(dist: Mapping[str, Any]) -> Component:
    name = str(dist["name"])
    normalized = re.sub(r"[-_.]+", "-", name).lower()
    return Component(
        type=ComponentType.LIBRARY,
        name=name,
        version=str(dist["version"]),
        bom_ref=f"pypi:{normalized}@{dist['version']}",
        purl=PackageURL("pypi", None, normalized, str(dist["version"])),
        properties=_props(installed_from=dist.get("installed_from"), location=dist.get("location")),
    )


def _source_purl(name: str, source: Source) -> PackageURL | None:
    """pkg:github for GitHub repositories, pkg:generic with the vcs_url otherwise; None for repository paths."""
    git, commit = source.git, source.commit
    if git and commit:
        found = re.fullmatch(r"https://github\.com/([^/]+)/([^/]+?)(?:\.git)?/?", git)
        subpath = source.subdir or None
        if found:
            return PackageURL("github", found.group(1).lower(), found.group(2).lower(), commit, subpath=subpath)
        return PackageURL("generic", None, name, commit, {"vcs_url": f"git+{git}@{commit}"}, subpath)
    if source.url and source.sha256:
        return PackageURL(
            "generic", None, name, None, {"download_url": source.url, "checksum": f"sha256:{source.sha256}"}
        )
    return None


def _pedigree(source: Source, patches: Iterable[ManifestPatch] = ()) -> Pedigree | None:
    commits = []
    if source.commit:
        url = f"{source.git}/commit/{source.commit}" if "github.com" in (source.git or "") else None
        commits.append(Commit(uid=source.commit, url=XsUri(url) if url else None))
    patches = list(patches)
    cdx_patches = [
        Patch(type=PatchClassification.UNOFFICIAL, diff=Diff(url=XsUri(p.url)) if p.url else None) for p in patches
    ]
    notes = "; ".join(f"patch {p.name}: {p.url or p.path} sha256={p.sha256 or 'unpinned'}" for p in patches)
    if not commits and not cdx_patches:
        return None
    return Pedigree(commits=commits, patches=cdx_patches, notes=notes or None)


def _built(
    name: str,
    version: str | None,
    source: Source,
    revision: str | None,
    patches: Iterable[ManifestPatch] = (),
    **props: object,
) -> Component:
    """A component imagebuild compiled: pinned upstream commit, or this repository's path at its revision."""
    where = source.git or (f"this repository: {source.path}" if source.path else source.url)
    return Component(
        type=ComponentType.LIBRARY,
        name=name,
        version=version or source.commit or revision,
        bom_ref=f"built:{name}",
        purl=_source_purl(name, source),
        pedigree=_pedigree(source, patches),
        properties=_props(
            built_from_source=True,
            source=where,
            ref=source.ref,
            subdir=source.subdir,
            revision=revision if source.path else None,
            **props,
        ),
    )


def matrix_source(data: Mapping[str, Any] | None) -> Source:
    """A matrix `components.<n>.source` (as sbom_image.component_sources dumps it) as the contract's Source."""
    return Source.from_dict(dict(data or {}), "source")


def built_components(inv: Inventory) -> list[Component]:
    """torch (from source), the included kernel/extension components and the serving runtime, from the manifest."""
    manifest = inv.manifest
    if manifest is None:
        return []
    revision = inv.labels.get("org.opencontainers.image.revision")
    out: list[Component] = []
    torch = manifest.torch
    if torch.obtained == "source" and torch.source is not None:
        out.append(_built("torch", torch.version, torch.source, revision, patches=torch.patches))
    for name, comp in sorted(manifest.components.items()):
        if comp.included:
            source = matrix_source(inv.component_sources.get(name))
            out.append(_built(name, None, source, revision, arches=comp.arches, fixed_arches=comp.fixed_arches))
    runtime = manifest.runtime
    if runtime is not None and runtime.source is not None:
        out.append(_built(runtime.name, None, runtime.source, revision, runtime_kind=runtime.kind))
    return out


def _timestamp(labels: Mapping[str, str]) -> datetime:
    try:
        return datetime.fromisoformat(labels["org.opencontainers.image.created"]).astimezone(UTC)
    except (KeyError, ValueError):
        return datetime.now(UTC)


def build_bom(inv: Inventory) -> Bom:
    """The CycloneDX model of one image; the image is the metadata component everything else belongs to."""
    labels = inv.labels
    target = labels.get("io.imagebuild.target") or (inv.manifest.target if inv.manifest else None) or "image"
    root = Component(
        type=ComponentType.CONTAINER,
        name=target,
        version=labels.get("org.opencontainers.image.revision") or inv.image_id,
        bom_ref=f"image:{target}",
        properties=_props(
            image_id=inv.image_id,
            platform=labels.get("io.imagebuild.platform"),
            arches=labels.get("io.imagebuild.arches"),
            matrix_sha256=labels.get("io.imagebuild.matrix-sha256"),
            kernels_code_objects=inv.kernels.code_objects if inv.kernels else None,
        ),
    )
    tool = Component(type=ComponentType.APPLICATION, name="imagebuild", version=imagebuild.__version__)
    meta = BomMetaData(component=root, timestamp=_timestamp(labels))
    meta.tools.components.add(tool)
    distro = None
    if inv.os_release.get("ID") and inv.os_release.get("VERSION_ID"):
        distro = f"{inv.os_release['ID']}-{inv.os_release['VERSION_ID']}"
    components = [_deb(p, distro) for p in inv.dpkg if p.get("Status", "").endswith(" installed")]
    seen: set[str] = set()
    for dist in sorted(inv.dists, key=lambda d: (str(d["name"]).lower(), str(d["version"]))):
        comp = _pypi(dist)
        if str(comp.bom_ref) not in seen:  # a distribution seen twice on sys.path is listed once
            seen.add(str(comp.bom_ref))
            components.append(comp)
    components += built_components(inv)
    bom = Bom(components=components, metadata=meta, serial_number=uuid.uuid5(uuid.NAMESPACE_URL, inv.image_id))
    bom.register_dependency(root, components)
    return bom


def render(inv: Inventory) -> str:
    """The SBOM as JSON text, validated against the CycloneDX 1.6 strict schema that the library ships."""
    text = JsonV1Dot6(build_bom(inv)).output_as_string(indent=2) + "\n"
    error = validate(text)
    if error:
        raise ValueError(f"the SBOM does not validate against CycloneDX {SCHEMA_VERSION.to_version()}: {error}")
    return text


def validate(text: str) -> str | None:
    """None when text is valid CycloneDX 1.6 JSON (strict schema), else the first schema error."""
    from cyclonedx.validation.json import JsonStrictValidator  # jsonschema: about 1 s to import

    error = JsonStrictValidator(SCHEMA_VERSION).validate_str(text)
    return None if error is None else str(error.data.message if hasattr(error.data, "message") else error)[:300]
