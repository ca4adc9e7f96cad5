"""Issue 21, class 2 (the checks themselves): a provenance that names no target or matrix, an image without
the labels to compare with, and an SBOM of no components are each a failure naming what is missing; "nothing
equals nothing" used to verify. The statements are built as cosign hands them over (its verified payloads)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from imagebuild.release import attest, statements
from imagebuild.release import verify as vf

SHA = "a" * 64
LABELS = {"io.imagebuild.target": "local-cpu", "io.imagebuild.matrix-sha256": SHA}


def _statement(predicate_type: str, predicate: Any) -> Any:
    """A statement as verify gets it: cosign's payload read into the strict Statement model."""
    return statements.statement(
        {
            "_type": statements.STATEMENT_V01,
            "subject": [{"name": "r", "digest": {"sha256": SHA}}],
            "predicateType": predicate_type,
            "predicate": predicate,
        },
        "test",
    )


def provenance(target: object = "local-cpu", matrix: object = None) -> Any:
    params: dict[str, Any] = {}
    if target is not None:
        params["target"] = target
    if matrix is not None:
        params["matrix"] = matrix
    build = {"buildType": attest.BUILD_TYPE, "externalParameters": params}
    return _statement(attest.PROVENANCE_TYPE, {"buildDefinition": build, "runDetails": {"builder": {"id": "b"}}})


@pytest.mark.parametrize(
    ("statement", "labels", "words"),
    [
        (provenance(None, {"sha256": SHA}), LABELS, "names no target"),
        (provenance("local-cpu", None), LABELS, "names no matrix"),
        (provenance("local-cpu", {"sha256": ""}), LABELS, "names no matrix"),
        (provenance("local-cpu", "not-a-mapping"), LABELS, "matrix: expected an object"),
        (provenance("local-cpu", {"sha256": SHA}), {"io.imagebuild.target": "local-cpu"}, "no io.imagebuild.matrix"),
        (provenance(None, None), {}, "names no target"),  # nothing equals nothing: a failure, not a pass
        (provenance("local-cpu", {}), {"io.imagebuild.target": "local-cpu"}, "names no matrix"),
        (provenance("local-cpu", {"sha256": SHA}), {"io.imagebuild.matrix-sha256": SHA}, "no io.imagebuild.target"),
        (provenance("local-cpu", {"sha256": "b" * 64}), LABELS, "differs"),
    ],
)
def test_provenance_that_does_not_name_what_it_binds_fails(
    statement: dict[str, Any], labels: dict[str, str], words: str
) -> None:
    v = vf.Verification(ref="r", digest="sha256:" + SHA, target=labels.get("io.imagebuild.target"))
    vf._check_provenance(v, [statement], labels)
    assert [(f.what, f.ok) for f in v.findings] == [("provenance", False)] and words in v.findings[0].detail


def test_matching_provenance_passes() -> None:
    v = vf.Verification(ref="r", digest="sha256:" + SHA, target="local-cpu")
    vf._check_provenance(v, [provenance("local-cpu", {"sha256": SHA})], LABELS)
    assert [(f.what, f.ok) for f in v.findings] == [("provenance", True)]


def _bom(components: list[dict[str, Any]]) -> Any:
    return _statement(
        attest.SBOM_TYPE,
        {
            "bomFormat": "CycloneDX",
            "specVersion": "1.6",
            "version": 1,
            "serialNumber": "urn:uuid:3e671687-395b-41f5-a30f-a58921a69b79",
            "components": components,
        },
    )


def test_an_sbom_of_no_components_fails() -> None:
    v = vf.Verification(ref="r")
    vf._check_sbom(v, [_bom([])])
    assert [(f.what, f.ok) for f in v.findings] == [("sbom", False)]
    assert "no components" in v.findings[0].detail
    v = vf.Verification(ref="r")
    vf._check_sbom(v, [_bom([{"type": "library", "name": "x", "bom-ref": "pypi:x@1", "version": "1"}])])
    assert [(f.what, f.ok) for f in v.findings] == [("sbom", True)], v.findings


# Issue 34: a signed payload of another shape is one failing finding (its key path named), never a traceback.

HOSTILE_PROVENANCE = {
    "build-definition-a-string": ({"buildDefinition": "x", "runDetails": {"builder": {"id": "b"}}}, "buildDefinition"),
    "external-parameters-a-list": (
        {"buildDefinition": {"buildType": attest.BUILD_TYPE, "externalParameters": []}, "runDetails": {}},
        "externalParameters: expected an object",
    ),
    "target-a-number": (
        {"buildDefinition": {"buildType": attest.BUILD_TYPE, "externalParameters": {"target": 7}}, "runDetails": {}},
        "target: expected str",
    ),
    "image-id-an-object": (
        {
            "buildDefinition": {
                "buildType": attest.BUILD_TYPE,
                "externalParameters": {"target": "local-cpu", "matrix": {"sha256": SHA}},
                "internalParameters": {"image_id": {"sha256": SHA}},
            },
            "runDetails": {"builder": {"id": "b"}},
        },
        "image_id: expected str",
    ),
    "builder-a-string": (
        {"buildDefinition": {"buildType": attest.BUILD_TYPE, "externalParameters": {}}, "runDetails": {"builder": "b"}},
        "builder: expected an object",
    ),
    "another-build-type": (
        {"buildDefinition": {"buildType": "https://example/other", "externalParameters": {}}, "runDetails": {}},
        "buildType: expected one of",
    ),
    "an-unknown-key": (
        {"buildDefinition": {"buildType": attest.BUILD_TYPE, "externalParameters": {"targets": ["a"]}}},
        "unknown key 'targets'",
    ),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_PROVENANCE))
def test_a_provenance_of_another_shape_is_one_failing_finding(case: str) -> None:
    predicate, words = HOSTILE_PROVENANCE[case]
    v = vf.Verification(ref="r", digest="sha256:" + SHA, target="local-cpu")
    vf._check_provenance(v, [_statement(attest.PROVENANCE_TYPE, predicate)], LABELS)
    assert [(f.what, f.ok) for f in v.findings] == [("provenance", False)], v.findings
    assert "not SLSA v1 provenance" in v.findings[0].detail and words in v.findings[0].detail, v.findings[0].detail


def _payload(**fields: object) -> bytes:
    base = {"_type": statements.STATEMENT_V1, "subject": [], "predicateType": "t", "predicate": {}}
    return json.dumps({**base, **fields}).encode()


@pytest.mark.parametrize(
    ("payload", "words"),
    [
        (b"not json", "not JSON"),
        (b"[1, 2]", "expected an object"),
        (_payload(_type="https://in-toto.io/Statement/v2"), "_type"),
        (_payload(subject="s"), "subject"),
        (_payload(predicate="x"), "predicate"),
        (_payload(subject=[{"digest": "x"}]), "digest"),
        (_payload(extra=1), "unknown key 'extra'"),
    ],
)
def test_a_signed_payload_that_is_no_statement_is_refused_by_name(payload: bytes, words: str) -> None:
    with pytest.raises(ValueError, match="a verified .*: ") as caught:
        statements.statement_bytes(payload, "a verified provenance attestation")
    assert words in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize(
    "predicate",
    [{"arch": 5}, {"schema_version": 1, "passed": True, "checks": "all"}, {"schema_version": 1, "passed": "yes"}],
)
def test_a_smoke_attestation_that_is_no_smoke_report_is_one_failing_finding(predicate: dict[str, Any]) -> None:
    v = vf.Verification(ref="r", digest="sha256:" + SHA, arches=["cpu"])
    vf._check_smoke(v, [_statement(attest.SMOKE_TYPE, predicate)])
    assert [(f.what, f.ok) for f in v.findings] == [("smoke", False)], v.findings
    assert "not a smoke report" in v.findings[0].detail
