"""`report --registry`: what a registry's attestations say about each target's public tag, through the same
checks `imagebuild verify` makes (signature over the digest; SBOM, provenance and smoke attestations bound to it)."""

from __future__ import annotations

from imagebuild.engine.cosign import Verifier
from imagebuild.engine.registry import Registry, RegistryError
from imagebuild.errors import ConfigError
from imagebuild.release.verify import Verification, parse_ref, verify_image
from imagebuild.report.model import Row
from imagecontract.targets import loads_on


def _said(ok: bool, detail: str) -> str:
    """A finding in a table cell: `verified (CycloneDX 1.6, 169 components)`; a failure keeps its whole reason."""
    if not ok:
        return f"failed: {detail}"
    short = ", ".join(detail.split(" (")[0].split(", ")[:2])
    return f"verified ({short})" if short else "verified"


def _finding(v: Verification, row: Row, what: str, several: bool) -> str | None:
    """The finding about `what` for this row's platform ("<os>/<arch> what" in an index)."""
    name = f"{row.oci} {what}" if several else what
    for f in v.findings:
        if f.what == name:
            return _said(f.ok, f.detail)
    return None


def _smoke(v: Verification, row: Row, several: bool) -> str:
    prefix = f"{row.oci} smoke " if several else "smoke "
    for f in v.findings:
        if f.what.startswith(prefix):
            arch = f.what[len(prefix) :]
            if arch == row.arch or (row.arch != "cpu" and arch != "cpu" and loads_on(row.arch, arch)):
                return _said(f.ok, f.detail)
    return "not attested"


def _platform(ref: str, digest: str, warnings: list[str]) -> str | None:
    """The OCI platform (os/architecture of its config) of the single image at ref."""
    repo, _ = parse_ref(ref)
    try:
        _, config = Registry(repo).config(repo.repo, digest)
    except RegistryError as exc:
        warnings.append(f"{ref}: cannot read its config: {exc}")
        return None
    return f"{config.get('os')}/{config.get('architecture')}"


def apply(rows: list[Row], registry: str, verifier: Verifier, warnings: list[str]) -> None:
    """Each target's `<registry>:<target>` verified once; its findings set the rows' release facts."""
    by_target: dict[str, list[Row]] = {}
    for row in rows:
        by_target.setdefault(row.target, []).append(row)
    for target, group in by_target.items():
        ref = f"{registry}:{target}"
        try:
            v = verify_image(ref, verifier)
        except ConfigError as exc:
            warnings.append(f"{ref}: {exc}")
            continue
        several = any(f.what == "index" for f in v.findings)
        platform = None if several or v.digest is None else _platform(ref, v.digest, warnings)
        for row in group:
            if v.digest is None:
                row.release.note = f"{ref}: not in the registry"
                continue
            if platform is not None and platform != row.oci:  # one image, of another OCI platform
                row.release.note = f"{ref} is the {platform} image only"
                continue
            facts = row.release
            facts.published, facts.repository, facts.source = True, registry, f"registry {registry}"
            facts.refs = [ref, *[r for r in facts.refs if r != ref]]
            facts.digest = facts.digest or v.digest
            if several:
                facts.note = f"{ref} is an OCI index ({v.digest[:19]})"
            signature = _finding(v, row, "signature", several)
            if signature and signature.startswith("verified"):
                signature = f"verified ({verifier.describe()})"
            facts.signature = signature or "not signed"
            facts.sbom = _finding(v, row, "sbom", several) or "not attested"
            facts.provenance = _finding(v, row, "provenance", several) or "not attested"
            facts.smoke_attestation = _smoke(v, row, several)
