"""`imagebuild verify`: is this the image the project published, and did it pass its smoke on every arch?

Resolves IMAGE_REF to the registry's digest, then checks with cosign: a signature over that digest, an SBOM and
a provenance attestation whose subject is that digest, and for every arch the image claims (its
io.imagebuild.arches label) a smoke attestation that passed for this image's config digest. Each check is a
finding; the image verifies only when every finding is ok.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from imagebuild.engine.cosign import CosignError, Verifier, verified_statements, verify_signature
from imagebuild.engine.registry import Registry, RegistryError, RepoRef
from imagebuild.errors import ConfigError
from imagebuild.release import attest, statements
from imagebuild.release.ociindex import IndexMismatch, config_labels, index_children
from imagebuild.release.publish import report_refusal
from imagebuild.release.sbom import validate
from imagebuild.release.statements import Statement
from imagecontract import kinds
from imagecontract.models import ModelError, SmokeReport


@dataclass
class Finding:
    what: str
    ok: bool
    detail: str


@dataclass
class Verification:
    ref: str
    digest: str | None = None
    image_id: str | None = None
    # the engine-local ID the signed provenance says this digest was published from (the containerd store's)
    local_ids: list[str] = field(default_factory=list)
    target: str | None = None
    arches: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    children: dict[str, Verification] = field(default_factory=dict)  # an index's: platform -> its verification

    @property
    def ok(self) -> bool:
        return bool(self.findings) and all(f.ok for f in self.findings)

    def ids(self) -> list[str]:
        """Every ID a smoke report about this image may name: the config digest (a graph-driver engine's image
        ID), the manifest digest (the containerd store's, for a pulled image) and the local ID its signed
        provenance records (the containerd store's for the image as built)."""
        return list(dict.fromkeys(i for i in (self.image_id, self.digest, *self.local_ids) if i))

    def add(self, what: str, ok: bool, detail: str) -> None:
        self.findings.append(Finding(what, ok, detail))

    def to_json(self) -> dict[str, Any]:
        return {**{k: v for k, v in asdict(self).items() if k != "children"}, "verified": self.ok}


def parse_ref(text: str) -> tuple[RepoRef, str]:
    """HOST/REPO[:TAG|@sha256:...] -> (repo, tag or digest); a tag defaults to latest."""
    name, sep, digest = text.partition("@")
    tag = "latest"
    if not sep and ":" in name.rsplit("/", 1)[-1]:
        name, tag = name.rsplit(":", 1)
    try:
        return RepoRef.parse(name), digest if sep else tag
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _statements(v: Verification, ref: str, what: str, ptype: str, verifier: Verifier) -> list[Statement]:
    """Verified statements of ptype whose subject is this digest, each read into the strict Statement model; a
    failed finding when there are none, or when one that cosign verified is not a statement of ptype."""
    try:
        payloads = verified_statements(ref, ptype, verifier)
        found = [statements.statement_bytes(p, f"a verified {ptype} attestation") for p in payloads]
    except CosignError as exc:
        v.add(what, False, f"no verified {ptype} attestation: {exc}")
        return []
    except ValueError as exc:  # signed, but not an in-toto statement: refused, never half read
        v.add(what, False, str(exc))
        return []
    if any(s.predicateType != ptype for s in found):
        v.add(what, False, f"cosign returned an attestation that is not {ptype}")
        return []
    bound = [s for s in found if attest.subject_matches(s.to_dict(), v.digest or "")]
    if not bound:
        v.add(what, False, f"{len(found)} {ptype} attestation(s), none bound to {v.digest}")
    return bound


def _check_sbom(v: Verification, found: list[Statement]) -> None:
    for stmt in found:
        error = validate(json.dumps(stmt.predicate))  # the CycloneDX 1.6 schema: the SBOM's strict model
        if error:
            v.add("sbom", False, f"the SBOM attestation is not valid CycloneDX 1.6: {error}")
            return
        components = stmt.predicate.get("components") or []
        if not isinstance(components, list) or not components:
            v.add("sbom", False, "the SBOM attestation lists no components")
            return
        kinds = [str(c.get("bom-ref", "")).split(":", 1)[0] for c in components if isinstance(c, dict)]
        counts = ", ".join(f"{kinds.count(k)} {k}" for k in ("deb", "pypi", "built"))
        v.add("sbom", True, f"CycloneDX {stmt.predicate.get('specVersion')}, {len(components)} components ({counts})")
        return


def _check_provenance(v: Verification, found: list[Statement], labels: dict[str, str]) -> None:
    for stmt in found:
        try:
            prov = statements.provenance(stmt.predicate)
        except ValueError as exc:  # a signed predicate of another shape: one failing finding, no traceback
            v.add("provenance", False, str(exc))
            return
        params = prov.buildDefinition.externalParameters
        matrix = params.matrix.sha256 if params.matrix else None
        # Nothing equals nothing: a provenance without a target or matrix, or an image without the label, fails
        # by name before any comparison.
        if not params.target:
            v.add("provenance", False, "names no target (buildDefinition.externalParameters.target)")
        elif not labels.get("io.imagebuild.target"):
            v.add("provenance", False, "the image has no io.imagebuild.target label to compare it with")
        elif not matrix:
            v.add("provenance", False, "names no matrix (buildDefinition.externalParameters.matrix.sha256)")
        elif not labels.get("io.imagebuild.matrix-sha256"):
            v.add("provenance", False, "the image has no io.imagebuild.matrix-sha256 label to compare it with")
        elif params.target != labels.get("io.imagebuild.target"):
            v.add("provenance", False, f"names target {params.target[:80]}, the image is {v.target}")
        elif matrix != labels.get("io.imagebuild.matrix-sha256"):
            v.add("provenance", False, "its matrix sha256 differs from the image's io.imagebuild.matrix-sha256")
        else:
            local = prov.buildDefinition.internalParameters.image_id
            if isinstance(local, str) and re.fullmatch(r"sha256:[0-9a-f]{64}", local):
                v.local_ids.append(local)
            builder = prov.runDetails.builder.id
            revision = labels.get("org.opencontainers.image.revision", "?")
            v.add(
                "provenance",
                True,
                f"SLSA v1, target {v.target}, matrix sha256 {matrix[:12]}, "
                f"revision {revision[:12]}, builder {builder[:200]}",
            )
        return


def _refusal(report: dict[str, Any], v: Verification) -> str | None:
    """None for a passing report about this image by any of its IDs (Verification.ids); else why not: that it
    did not pass when it names one of them, else that it was written for another image."""
    ids = v.ids()
    refusals = [report_refusal(report, i) for i in ids] or ["written for another image"]
    if None in refusals:
        return None
    named = report.get("image_id")
    return report_refusal(report, named) if isinstance(named, str) and named in ids else refusals[0]


def _check_smoke(v: Verification, found: list[Statement], accepted: frozenset[str] = frozenset()) -> None:
    """A passing smoke attestation per claimed arch. An arch in `accepted` (the caller's --accept-unsmoked-arch:
    no GPU of it was at hand) may lack one, said so in its finding, and only when some smoke of this very image
    passed (a CPU run, or another arch's): acceptance never stands in for a failed or foreign report."""
    reports = []
    for stmt in found:  # each must be the contract's SmokeReport: a signed predicate of another shape fails
        try:
            SmokeReport.from_dict(stmt.predicate, "predicate")
        except ModelError as exc:
            v.add("smoke", False, f"a smoke attestation that is not a smoke report ({str(exc)[:200]})")
            return
        reports.append(stmt.predicate)
    unsmoked = []
    for arch in v.arches:
        mine = [r for r in reports if attest.arch_base(str(r.get("arch") or kinds.CPU_ARCH)) == attest.arch_base(arch)]
        if not mine:
            if attest.arch_base(arch) in accepted:
                unsmoked.append(arch)
            else:
                v.add(f"smoke {arch}", False, f"no smoke attestation for {arch}")
            continue
        refusals = [_refusal(r, v) for r in mine]
        if None in refusals:
            report = SmokeReport.from_dict(mine[refusals.index(None)])  # it fits: checked above
            passed = sum(1 for c in report.checks if c.status == "passed")
            v.add(f"smoke {arch}", True, f"passed ({passed} checks passed, device {report.device})")
        else:
            v.add(f"smoke {arch}", False, f"smoke report {refusals[0]}")
    if unsmoked:
        passing = [SmokeReport.from_dict(r) for r in reports if _refusal(r, v) is None]
        devices = ", ".join(sorted({f"{r.arch or kinds.CPU_ARCH} ({r.device})" for r in passing}))
        for arch in unsmoked:
            detail = f"NOT smoked on {arch}: accepted by --accept-unsmoked-arch"
            v.add(
                f"smoke {arch}",
                bool(passing),
                f"{detail}; smoke passed on {devices}"
                if passing
                else f"{detail}, but no smoke of this image passed anywhere",
            )


def verify_image(
    text: str, verifier: Verifier, need_smoke: bool = True, accepted: frozenset[str] = frozenset()
) -> Verification:
    """Every finding about IMAGE_REF; registry or usage problems are ConfigError (exit 2). `accepted`: arches
    whose missing smoke attestation the caller accepts (_check_smoke)."""
    repo, reference = parse_ref(text)
    v = Verification(ref=text)
    registry = Registry(repo)
    try:
        v.digest = registry.digest(repo.repo, reference)
        if v.digest is None:
            v.add("image", False, f"{text} does not exist in {repo.host}")
            return v
        try:
            children = index_children(registry, repo, v.digest)
        except IndexMismatch as exc:  # duplicate or platform-less entries: what a pull gets is not decided
            v.add("index", False, str(exc))
            return v
        if children is not None:  # an OCI index: its own signature, then each platform's image in full
            _check_signature(v, f"{repo}@{v.digest}", verifier)
            return _verify_children(v, repo, children, verifier, need_smoke, accepted)
        v.image_id, config = registry.config(repo.repo, v.digest)
    except RegistryError as exc:
        raise ConfigError(f"cannot read {text}: {exc}") from None
    labels = config_labels(config)
    v.target = labels.get("io.imagebuild.target")
    v.arches = attest.claimed_arches(labels)
    ref = f"{repo}@{v.digest}"
    _check_signature(v, ref, verifier)
    _check_sbom(v, _statements(v, ref, "sbom", attest.SBOM_TYPE, verifier))
    _check_provenance(v, _statements(v, ref, "provenance", attest.PROVENANCE_TYPE, verifier), labels)
    if need_smoke:
        _check_smoke(v, _statements(v, ref, "smoke", attest.SMOKE_TYPE, verifier), accepted)
    return v


def _verify_children(
    v: Verification,
    repo: RepoRef,
    children: dict[str, str],
    verifier: Verifier,
    need_smoke: bool,
    accepted: frozenset[str] = frozenset(),
) -> Verification:
    """Every child of an index verified as an image of its own; its findings named by platform."""
    v.add("index", bool(children), ", ".join(f"{p} {d[:19]}" for p, d in children.items()) or "no children")
    for platform, digest in children.items():
        child = verify_image(f"{repo}@{digest}", verifier, need_smoke, accepted)
        v.children[platform] = child
        v.target = v.target or child.target
        v.arches = sorted({*v.arches, *child.arches})
        for finding in child.findings:
            v.add(f"{platform} {finding.what}", finding.ok, finding.detail)
    return v


def _signed_digest(payload: object) -> object:
    """The digest a signature payload (cosign's simple signing: critical.image.docker-manifest-digest) names."""
    critical = payload.get("critical") if isinstance(payload, dict) else None
    image = critical.get("image") if isinstance(critical, dict) else None
    return image.get("docker-manifest-digest") if isinstance(image, dict) else None


def _check_signature(v: Verification, ref: str, verifier: Verifier) -> None:
    """A cosign signature whose payload names exactly this digest."""
    try:
        payloads = verify_signature(ref, verifier)
        signed = [p for p in payloads if _signed_digest(p) == v.digest]
        v.add(
            "signature",
            bool(signed),
            f"{len(signed)} verified ({verifier.describe()})" if signed else "no signature over this digest",
        )
    except CosignError as exc:
        v.add("signature", False, f"none verifies with {verifier.describe()}: {exc}")
