"""`imagebuild report --registry`: the page's release columns from a real registry's attestations, verified with
cosign the way `imagebuild verify` does (issue 25). The session's smoked local-cpu amd64 image is published signed
as `<repo>:local-cpu`; the page built from no local evidence shows it verified and passed (from its smoke
attestation), and its arm64 row not published.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import REPO, _unavailable, imagebuild, unique
from test_signing_e2e import _cosign

pytestmark = [pytest.mark.docker, pytest.mark.registry]


def test_registry_attestations_fill_the_release_columns(
    smoked_local_cpu: tuple[Any, Path], registry: str, tmp_path: Path
) -> None:
    if shutil.which("cosign") is None:
        _unavailable("cosign is not installed")
    _, smoke_report = smoked_local_cpu
    (tmp_path / "password").write_text("e2e-only password\n")
    proc = _cosign("generate-key-pair", "--output-key-prefix", str(tmp_path / "k"), password_file=tmp_path / "password")
    assert proc.returncode == 0, proc.stderr
    repo = f"{registry}/{unique('e2e-report')}"
    run = imagebuild(
        "publish", "local-cpu", "--platform", "linux/amd64", "--registry", repo, "--tag", "local-cpu",
        "--out", str(tmp_path / "publish-report.json"), "--report", str(smoke_report),
        "--sign-key", str(tmp_path / "k.key"), "--key-password-file", str(tmp_path / "password"),
    )  # fmt: skip
    assert run.returncode == 0, run.output[-3000:]
    shutil.copy(REPO / "matrix.yaml", tmp_path / "matrix.yaml")  # evidence root: tmp_path (no build/ there)
    run = imagebuild(
        "--matrix", str(tmp_path / "matrix.yaml"), "report", "--no-engine", "--registry", repo,
        "--key", str(tmp_path / "k.pub"),
    )  # fmt: skip
    assert run.returncode == 0, run.output[-3000:]
    assert f"compatibility page: {tmp_path / 'build/report/compat.html'}" in run.stdout
    rows = {r["id"]: r for r in json.loads((tmp_path / "build/report/compat.json").read_text())["rows"]}
    amd64, arm64 = rows["local-cpu|linux/amd64|cpu"]["release"], rows["local-cpu|linux/arm64|cpu"]["release"]
    assert amd64["published"] and amd64["refs"][0] == f"{repo}:local-cpu"
    for column in ("signature", "sbom", "provenance", "smoke_attestation"):
        assert amd64[column].startswith("verified ("), (column, amd64[column])
    assert not arm64["published"] and arm64["note"] == f"{repo}:local-cpu holds linux/amd64 only"
    # no local smoke report: the one attested on the digest (signature verified, bound to it, this image's ID)
    smoke = rows["local-cpu|linux/amd64|cpu"]["smoke"]
    assert rows["local-cpu|linux/amd64|cpu"]["verdict"] == "passed"
    assert smoke["report"].startswith(f"the smoke attestation of {repo}@sha256:") and smoke["tokens_per_s"] > 0
    assert (
        rows["rocm6.1-torch2.3|linux/amd64|gfx942"]["release"]["note"]
        == f"{repo}:rocm6.1-torch2.3: not in the registry"
    )
