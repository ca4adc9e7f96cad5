"""`report --registry`: what a registry's attestations say about each target's public tag, through the same
checks `imagebuild verify` makes (signature over the digest; SBOM, provenance and smoke attestations bound to it)."""

from __future__ import annotations

from imagebuild.engine.cosign import Verifier
from imagebuild.errors import ConfigError
from imagebuild.release.verify import Verification, verify_image
from imagebuild.report.model import Row
from imagecontract.targets import loads_on


def _finding(v: Verification, row: Row, what: str, several: bool) -> str | None:
    """The detail of the finding about `what` for this row's platform ("<os>/<arch> what" in an index)."""
    name = f"{row.oci} {what}" if several else what
    for f in v.findings:
        if f.what == name:
            return f"verified ({f.detail})" if f.ok else f"failed: {f.detail}"
    return None


def _smoke(v: Verification, row: Row, several: bool) -> str:
    prefix = f"{row.oci} smoke " if several else "smoke "
    for f in v.findings:
        if f.what.startswith(prefix):
            arch = f.what[len(prefix) :]
            if arch == row.arch or (row.arch != "cpu" and arch != "cpu" and loads_on(row.arch, arch)):
                return f"verified ({f.detail})" if f.ok else f"failed: {f.detail}"
    return "not attested"


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
        for row in group:
            if v.digest is None:
                row.release.note = f"{ref}: not in the registry"
                continue
            facts = row.release
            facts.published, facts.repository, facts.source = True, registry, f"registry {registry}"
            facts.refs = [ref, *[r for r in facts.refs if r != ref]]
            facts.digest = facts.digest or v.digest
            if several:
                facts.note = f"{ref} is an OCI index ({v.digest[:19]})"
            facts.signature = _finding(v, row, "signature", several) or "not signed"
            facts.sbom = _finding(v, row, "sbom", several) or "not attested"
            facts.provenance = _finding(v, row, "provenance", several) or "not attested"
            facts.smoke_attestation = _smoke(v, row, several)
