"""The attestation payloads `imagebuild verify` (and publish's read-back) accept, as strict models (issue 34).

A statement cosign verified is signed, not trusted to be well formed: a provenance whose `buildDefinition` was a
string crashed verify. Each payload is read into a model that refuses an unknown key or a wrong type with the
path of the first one (imagecontract.models), so verify reports one failing finding, never a traceback:

- the in-toto Statement around every predicate: `_type` v0.1 (what cosign 2.x's `attest --predicate` writes:
  sigstore/cosign@5134e09b (v2.5.0) pkg/cosign/attestation/attestation.go, generateCustomStatement, Type
  in_toto.StatementInTotoV01) or v1, subjects with their digests, the predicate an object;
- the SLSA v1 provenance as release/attest.py writes it (https://slsa.dev/spec/v1.0/provenance): its buildType
  ours, the fields verify compares typed;
- smoke reports are the contract's SmokeReport; the SBOM is checked against the CycloneDX 1.6 schema (sbom.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from imagebuild.release.attest import BUILD_TYPE
from imagecontract.models import Model, ModelError

STATEMENT_V01 = "https://in-toto.io/Statement/v0.1"
STATEMENT_V1 = "https://in-toto.io/Statement/v1"


@dataclass
class Subject(Model):
    """One artifact a statement is about."""

    digest: dict[str, str]
    name: str | None = None


@dataclass
class Statement(Model):
    """An in-toto Statement (v0.1 or v1: the same four fields)."""

    _type: Literal["https://in-toto.io/Statement/v0.1", "https://in-toto.io/Statement/v1"]
    subject: list[Subject]
    predicateType: str  # noqa: N815 (the document's key)
    predicate: dict[str, Any]


@dataclass
class MatrixParameter(Model):
    """The matrix file the image was built from, and its sha256."""

    path: str | None = None
    sha256: str | None = None


@dataclass
class ExternalParameters(Model):
    """What the build was asked for: the target, the matrix, the arches, the lock record, the base substitution."""

    target: str | None = None
    matrix: MatrixParameter | None = None
    arches: str | None = None
    lock: dict[str, Any] = field(default_factory=dict)
    # build/base_substitute.py: per FROM the build read, the public base and the one used, with its digest
    base_substitution: list[dict[str, Any]] | None = None


@dataclass
class InternalParameters(Model):
    """The image's manifest and labels, the engine, the engine's own ID of the image."""

    manifest: dict[str, Any] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    engine: str | None = None
    image_id: str | None = None


@dataclass
class Dependency(Model):
    """A SLSA ResourceDescriptor: the checkout, the matrix, the base image, sources."""

    name: str | None = None
    uri: str | None = None
    digest: dict[str, str | None] = field(default_factory=dict)
    annotations: dict[str, Any] = field(default_factory=dict)


@dataclass
class BuildDefinition(Model):
    """SLSA v1 buildDefinition, its buildType imagebuild's."""

    buildType: Literal["urn:imagebuild:build:v1"]  # noqa: N815
    externalParameters: ExternalParameters  # noqa: N815
    internalParameters: InternalParameters = field(default_factory=InternalParameters)  # noqa: N815
    resolvedDependencies: list[Dependency] = field(default_factory=list)  # noqa: N815


@dataclass
class Builder(Model):
    """Who built it: the workflow, or this machine's imagebuild."""

    id: str
    version: dict[str, str] = field(default_factory=dict)
    builderDependencies: list[Dependency] = field(default_factory=list)  # noqa: N815


@dataclass
class RunDetails(Model):
    """SLSA v1 runDetails."""

    builder: Builder
    metadata: dict[str, str] = field(default_factory=dict)
    byproducts: list[Dependency] = field(default_factory=list)


@dataclass
class Provenance(Model):
    """The SLSA v1 provenance predicate imagebuild attaches (release/attest.py provenance())."""

    buildDefinition: BuildDefinition  # noqa: N815
    runDetails: RunDetails  # noqa: N815


assert BUILD_TYPE == "urn:imagebuild:build:v1"  # the Literal above spells it (a Literal takes no name)


def statement(data: object, what: str) -> Statement:
    """A statement (decoded JSON) as the model; ValueError naming what and the first bad key otherwise."""
    try:
        return Statement.from_dict(data, "statement")
    except ModelError as exc:
        raise ValueError(f"{what}: not an in-toto statement ({_short(exc)})") from None


def statement_bytes(payload: bytes, what: str) -> Statement:
    """A statement from a DSSE payload's bytes (JSON); ValueError as statement() otherwise."""
    try:
        data = json.loads(payload)
    except (ValueError, RecursionError):
        raise ValueError(f"{what}: the signed payload is not JSON") from None
    return statement(data, what)


def provenance(predicate: dict[str, Any]) -> Provenance:
    """The provenance predicate as the model; ValueError naming the first bad key otherwise."""
    try:
        return Provenance.from_dict(predicate, "predicate")
    except ModelError as exc:
        raise ValueError(f"not SLSA v1 provenance as imagebuild writes it ({_short(exc)})") from None


def _short(exc: Exception) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= 200 else text[:197] + "..."
