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
    manifest: dict[str, Any] | None = None
    kernels: dict[str, Any] | None = None
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


def _source_purl(name: str, source: Mapping[str, Any]) -> PackageURL | None:
    """pkg:github for GitHub repositories, pkg:generic with the vcs_url otherwise; None for repository paths."""
    git, commit = source.get("git"), source.get("commit")
    if git and commit:
        found = re.fullmatch(r"https://github\.com/([^/]+)/([^/]+?)(?:\.git)?/?", str(git))
        subpath = source.get("subdir") or None
        if found:
            return PackageURL("github", found.group(1).lower(), found.group(2).lower(), str(commit), subpath=subpath)
        return PackageURL("generic", None, name, str(commit), {"vcs_url": f"git+{git}@{commit}"}, subpath)
    if source.get("url") and source.get("sha256"):
        return PackageURL(
            "generic", None, name, None, {"download_url": str(source["url"]), "checksum": f"sha256:{source['sha256']}"}
        )
    return None


def _pedigree(source: Mapping[str, Any], patches: Iterable[Mapping[str, Any]] = ()) -> Pedigree | None:
    commits = []
    if source.get("commit"):
        url = f"{source['git']}/commit/{source['commit']}" if "github.com" in str(source.get("git", "")) else None
        commits.append(Commit(uid=str(source["commit"]), url=XsUri(url) if url else None))
    cdx_patches = [
        Patch(type=PatchClassification.UNOFFICIAL, diff=Diff(url=XsUri(str(p["url"]))) if p.get("url") else None)
        for p in patches
    ]
    notes = "; ".join(
        f"patch {p.get('name')}: {p.get('url') or p.get('path')} sha256={p.get('sha256') or 'unpinned'}"
        for p in patches
    )
    if not commits and not cdx_patches:
        return None
    return Pedigree(commits=commits, patches=cdx_patches, notes=notes or None)


def _built(
    name: str, version: str | None, source: Mapping[str, Any], revision: str | None, **props: object
) -> Component:
    """A component imagebuild compiled: pinned upstream commit, or this repository's path at its revision."""
    patches = list(props.pop("patches", None) or [])  # type: ignore[call-overload]
    where = source.get("git") or (f"this repository: {source['path']}" if source.get("path") else source.get("url"))
    return Component(
        type=ComponentType.LIBRARY,
        name=name,
        version=version or source.get("commit") or revision,
        bom_ref=f"built:{name}",
        purl=_source_purl(name, source),
        pedigree=_pedigree(source, patches),
        properties=_props(
            built_from_source=True,
            source=where,
            ref=source.get("ref"),
            subdir=source.get("subdir"),
            revision=revision if source.get("path") else None,
            **props,
        ),
    )


def built_components(inv: Inventory) -> list[Component]:
    """torch (from source), the included kernel/extension components and the serving runtime, from the manifest."""
    manifest = inv.manifest or {}
    revision = inv.labels.get("org.opencontainers.image.revision")
    out: list[Component] = []
    torch = manifest.get("torch") or {}
    if torch.get("obtained") == "source" and torch.get("source"):
        out.append(_built("torch", torch.get("version"), torch["source"], revision, patches=torch.get("patches")))
    for name, comp in sorted((manifest.get("components") or {}).items()):
        if not comp.get("included"):
            continue
        source = comp.get("source") or inv.component_sources.get(name) or {}
        out.append(
            _built(name, None, source, revision, arches=comp.get("arches"), fixed_arches=comp.get("fixed_arches"))
        )
    runtime = manifest.get("runtime") or {}
    if runtime.get("source"):
        out.append(_built(str(runtime["name"]), None, runtime["source"], revision, runtime_kind=runtime.get("kind")))
    return out


def _timestamp(labels: Mapping[str, str]) -> datetime:
    try:
        return datetime.fromisoformat(labels["org.opencontainers.image.created"]).astimezone(UTC)
    except (KeyError, ValueError):
        return datetime.now(UTC)


def build_bom(inv: Inventory) -> Bom:
    """The CycloneDX model of one image; the image is the metadata component everything else belongs to."""
    labels = inv.labels
    target = labels.get("io.imagebuild.target") or (inv.manifest or {}).get("target") or "image"
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
            kernels_code_objects=(inv.kernels or {}).get("code_objects"),
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
