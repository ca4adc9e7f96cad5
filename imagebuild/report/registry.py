"""`report --registry`: what a registry's attestations say about each target's public tag, through the same
checks `imagebuild verify` makes (signature over the digest; SBOM, provenance and smoke attestations bound to it)."""

from __future__ import annotations

from imagebuild.engine.cosign import CosignError, Verifier, verified_statements
from imagebuild.engine.registry import Registry, RegistryError, RepoRef
from imagebuild.errors import ConfigError
from imagebuild.release import attest
from imagebuild.release.ociindex import index_children
from imagebuild.release.statements import statement_bytes
from imagebuild.release.verify import Verification, parse_ref, verify_image
from imagebuild.report.model import NOT_RUN, Row
from imagebuild.report.rows import smoke_facts, smoke_is_for
from imagecontract import kinds
from imagecontract.models import SmokeReport
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
            if arch == row.arch or (row.arch != kinds.CPU_ARCH and arch != kinds.CPU_ARCH and loads_on(row.arch, arch)):
                return _said(f.ok, f.detail)
    return "not attested"


def _children(ref: str, digest: str, warnings: list[str]) -> dict[str, tuple[str, str | None]]:
    """OCI platform -> (image digest, config digest) of the tag: its index's children, or the one image."""
    repo, _ = parse_ref(ref)
    registry = Registry(repo)
    try:
        children = index_children(registry, repo, digest) or {"": digest}
        out: dict[str, tuple[str, str | None]] = {}
        for platform, child in children.items():
            image_id, config = registry.config(repo.repo, child)
            out[platform or f"{config.get('os')}/{config.get('architecture')}"] = (child, image_id)
        return out
    except RegistryError as exc:
        warnings.append(f"{ref}: cannot read its images: {exc}")
        return {}


def _attested_smoke(row: Row, repo: RepoRef, digest: str, ids: list[str], verifier: Verifier) -> None:
    """A row without a local smoke report takes the smoke report attested on its digest (signature verified,
    subject this digest, image ID one of this image's, Verification.ids), when one ran on a device its code
    loads on."""
    try:
        payloads = verified_statements(f"{repo}@{digest}", attest.SMOKE_TYPE, verifier)
    except CosignError:
        return
    for payload in payloads:
        try:  # signed payloads read into the strict models (release/statements.py); another shape is skipped
            statement = statement_bytes(payload, "a smoke attestation")
            if not attest.subject_matches(statement.to_dict(), digest):
                continue
            report = SmokeReport.from_dict(statement.predicate)
        except ValueError:  # ModelError is one
            continue
        if report.image_id in ids and smoke_is_for(row, report):
            row.smoke = smoke_facts(report, None)
            row.smoke.report = f"the smoke attestation of {repo}@{digest[:19]}"
            row.image_id = row.image_id or report.image_id
            return


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
        children = _children(ref, v.digest, warnings) if v.digest else {}
        for row in group:
            if v.digest is None:
                row.release.note = f"{ref}: not in the registry"
                continue
            if row.oci not in children:  # one image (or an index) without this OCI platform
                row.release.note = f"{ref} holds {', '.join(children) or 'no readable image'} only"
                continue
            child, image_id = children[row.oci]
            mine = v.children.get(row.oci) if several else v
            ids = mine.ids() if mine else [i for i in (image_id,) if i]
            if row.image_id and row.image_id not in ids:
                row.release.note = f"{ref} holds another {row.oci} image ({str(image_id)[:19]}) than this build"
                continue
            if row.smoke.status == NOT_RUN and ids:
                _attested_smoke(row, parse_ref(ref)[0], child, ids, verifier)
            facts = row.release
            facts.published, facts.repository, facts.source = True, registry, f"registry {registry}"
            facts.refs = [ref, *[r for r in facts.refs if r != ref]]
            facts.digest = child
            if several:
                facts.note = f"{ref} is an OCI index ({v.digest[:19]})"
            signature = _finding(v, row, "signature", several)
            if signature and signature.startswith("verified"):
                signature = f"verified ({verifier.describe()})"
            facts.signature = signature or "not signed"
            facts.sbom = _finding(v, row, "sbom", several) or "not attested"
            facts.provenance = _finding(v, row, "provenance", several) or "not attested"
            facts.smoke_attestation = _smoke(v, row, several)
