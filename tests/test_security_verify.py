"""Issue 21, class 2 (the checks themselves): a provenance that names no target or matrix, an image without
the labels to compare with, and an SBOM of no components are each a failure naming what is missing; "nothing
equals nothing" used to verify. The statements are built as cosign hands them over (its verified payloads)."""

from __future__ import annotations

from typing import Any

import pytest

from imagebuild.release import verify as vf

SHA = "a" * 64
LABELS = {"io.imagebuild.target": "local-cpu", "io.imagebuild.matrix-sha256": SHA}


def provenance(target: object = "local-cpu", matrix: object = None) -> dict[str, Any]:
    params: dict[str, Any] = {}
    if target is not None:
        params["target"] = target
    if matrix is not None:
        params["matrix"] = matrix
    return {"predicate": {"buildDefinition": {"externalParameters": params}, "runDetails": {"builder": {"id": "b"}}}}


@pytest.mark.parametrize(
    ("statement", "labels", "words"),
    [
        (provenance(None, {"sha256": SHA}), LABELS, "names no target"),
        (provenance("local-cpu", None), LABELS, "names no matrix"),
        (provenance("local-cpu", {"sha256": ""}), LABELS, "names no matrix"),
        (provenance("local-cpu", "not-a-mapping"), LABELS, "names no matrix"),
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


def _bom(components: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "predicate": {
            "bomFormat": "CycloneDX",
            "specVersion": "1.6",
            "version": 1,
            "serialNumber": "urn:uuid:3e671687-395b-41f5-a30f-a58921a69b79",
            "components": components,
        }
    }


def test_an_sbom_of_no_components_fails() -> None:
    v = vf.Verification(ref="r")
    vf._check_sbom(v, [_bom([])])
    assert [(f.what, f.ok) for f in v.findings] == [("sbom", False)]
    assert "no components" in v.findings[0].detail
    v = vf.Verification(ref="r")
    vf._check_sbom(v, [_bom([{"type": "library", "name": "x", "bom-ref": "pypi:x@1", "version": "1"}])])
    assert [(f.what, f.ok) for f in v.findings] == [("sbom", True)], v.findings
