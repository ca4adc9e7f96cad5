"""Signing, attestations and `imagebuild verify` with the real cosign and the loopback registry (issue 16).

The smoked local-cpu image of the session is published signed once (key pair made here, password from a file);
verify passes on it and fails, with a clear line, on an unsigned copy, with another key, on a re-tagged digest
(also when its signature and attestations are copied onto the new digest), and on an image whose smoke
attestation is missing or failed. The SBOM in the image validates against the CycloneDX 1.6 schema.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import _unavailable, docker, imagebuild, unique

from imagebuild.engine.cosign import read_password
from imagebuild.engine.registry import Registry, RepoRef
from imagebuild.release.sbom import IMAGE_PATH, validate

pytestmark = [pytest.mark.docker, pytest.mark.registry]


@dataclass
class Keys:
    key: Path
    pub: Path
    password_file: Path
    other_pub: Path


@dataclass
class Signed:
    repo: str
    digest: str
    out: Path
    run_output: str


def _cosign(*args: str, password_file: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ}
    if password_file is not None:
        env["COSIGN_PASSWORD"] = read_password(password_file)  # as imagebuild reads it: one newline dropped
    return subprocess.run(["cosign", *args], capture_output=True, text=True, env=env, timeout=120, check=False)


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    if shutil.which("cosign") is None:
        _unavailable("cosign is not installed")
    root = tmp_path_factory.mktemp("keys")
    password = root / "password"
    password.write_text("e2e-only password\n")
    for name, pw in (("cosign", password), ("other", password)):
        proc = _cosign("generate-key-pair", "--output-key-prefix", str(root / name), password_file=pw)
        assert proc.returncode == 0, proc.stderr
    return Keys(root / "cosign.key", root / "cosign.pub", password, root / "other.pub")


def _publish(image: str, registry: str, repo: str, out: Path, *extra: str) -> tuple[str, str]:
    one = ("--platform", "linux/amd64") if image == "local-cpu" else ()  # the amd64 image alone (index: own test)
    dest = ("--registry", f"{registry}/{repo}", "--tag", "v1", "--out", str(out))
    run = imagebuild("publish", image, *one, *dest, *extra)
    assert run.returncode == 0, run.output[-3000:]
    return json.loads(out.read_text())["digest"], run.output


@pytest.fixture(scope="module")
def signed(
    smoked_local_cpu: tuple[Any, Path], registry: str, keys: Keys, tmp_path_factory: pytest.TempPathFactory
) -> Signed:
    _, smoke_report = smoked_local_cpu
    out = tmp_path_factory.mktemp("signed") / "publish-report.json"
    repo = unique("e2e-signed")
    sign = ("--sign-key", str(keys.key), "--key-password-file", str(keys.password_file))
    digest, output = _publish("local-cpu", registry, repo, out, "--report", str(smoke_report), *sign)
    return Signed(repo, digest, out.parent, output)


def _verify(ref: str, pub: Path, *extra: str) -> tuple[int, str, str]:
    run = imagebuild("verify", ref, "--key", str(pub), *extra, timeout=300)
    return run.returncode, run.stdout, run.stderr.strip().splitlines()[-1] if run.stderr.strip() else ""


def test_the_image_holds_a_valid_cyclonedx_sbom(local_cpu: Any) -> None:
    text = docker("run", "--rm", "--network", "none", "--entrypoint", "cat", local_cpu.tags[0], IMAGE_PATH).stdout
    assert validate(text) is None
    doc = json.loads(text)
    kinds = {c["bom-ref"].split(":", 1)[0] for c in doc["components"]}
    assert kinds == {"deb", "pypi", "built"}
    names = {c["name"].lower() for c in doc["components"]}
    assert {"torch", "libc6", "python3.11", "imagebuild-kernels"} <= names
    beside = local_cpu.report_path.parent / "sbom" / "local-cpu.cdx.json"
    assert beside.read_text() == text  # the same document beside the build report


def test_signed_publish_verifies(signed: Signed, registry: str, keys: Keys) -> None:
    assert "signed " in signed.run_output and "smoke cpu" in signed.run_output
    assert "e2e-only password" not in signed.run_output
    code, out, last = _verify(f"{registry}/{signed.repo}:v1", keys.pub)
    assert code == 0, out + last
    assert [line.split()[0] for line in out.splitlines()[2:-1]] == ["ok"] * 4, out
    assert out.splitlines()[-1].startswith("verified ") and signed.digest in out.splitlines()[-1]
    code, out, _ = _verify(f"{registry}/{signed.repo}@{signed.digest}", keys.pub, "--json")
    report = json.loads(out)
    assert code == 0 and report["verified"] is True and report["arches"] == ["cpu"]
    assert {f["what"] for f in report["findings"]} == {"signature", "sbom", "provenance", "smoke cpu"}
    statement = json.loads((signed.out / "attestations" / "provenance.intoto.json").read_text())
    assert statement["subject"][0]["digest"] == {"sha256": signed.digest.split(":")[1]}


def test_unsigned_image_fails(smoked_local_cpu: tuple[Any, Path], registry: str, keys: Keys, tmp_path: Path) -> None:
    _, smoke_report = smoked_local_cpu
    repo = unique("e2e-unsigned")
    _publish("local-cpu", registry, repo, tmp_path / "p.json", "--report", str(smoke_report))
    code, _, last = _verify(f"{registry}/{repo}:v1", keys.pub)
    assert code == 1
    assert last.startswith(f"error: {registry}/{repo}:v1 is not verified: signature: none verifies with key")
    assert "no signatures found" in last


def test_signature_from_another_key_fails(signed: Signed, registry: str, keys: Keys) -> None:
    code, out, last = _verify(f"{registry}/{signed.repo}:v1", keys.other_pub)
    assert code == 1
    assert "is not verified: signature: none verifies with key" in last and str(keys.other_pub) in last
    assert "FAILED     smoke cpu" in out


def test_retagged_digest_fails_even_with_copied_signatures(signed: Signed, registry: str, keys: Keys) -> None:
    """The tag moves to another digest (same layers, one annotation more); then the signature and attestations
    of the signed digest are copied onto the new digest's cosign tags, which must not help."""
    reg = Registry(RepoRef.parse(f"{registry}/{signed.repo}"))
    body, media_type = reg.manifest(signed.repo, signed.digest)
    manifest = json.loads(body)
    manifest["annotations"] = {"io.imagebuild.e2e": "retagged"}
    new = reg.put_manifest(signed.repo, "v1", json.dumps(manifest).encode(), media_type)
    assert new and new != signed.digest
    code, _, last = _verify(f"{registry}/{signed.repo}:v1", keys.pub)
    assert code == 1 and "signature: none verifies" in last and "no signatures found" in last
    for suffix in ("sig", "att"):
        src = reg.digest(signed.repo, f"{signed.digest.replace(':', '-')}.{suffix}")
        assert src is not None
        reg.copy(signed.repo, src, signed.repo, f"{new.replace(':', '-')}.{suffix}")
    code, out, last = _verify(f"{registry}/{signed.repo}:v1", keys.pub)
    assert code == 1, out
    assert "signature: none verifies" in last, last
    assert "FAILED" in out and "ok         signature" not in out


@pytest.fixture(scope="module")
def failed_smoke(failing_image: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    report = tmp_path_factory.mktemp("failed-smoke") / "report.json"
    run = imagebuild("smoke", failing_image, "--gpu", "none", "--report", str(report))
    assert run.returncode == 4, run.output[-2000:]
    return report


def test_missing_then_failed_smoke_attestation_fails(
    failing_image: str, failed_smoke: Path, registry: str, keys: Keys, tmp_path: Path
) -> None:
    repo = unique("e2e-smokefail")
    sign = ("--sign-key", str(keys.key), "--key-password-file", str(keys.password_file))
    digest, output = _publish(
        failing_image, registry, repo, tmp_path / "p.json", "--allow-unsmoked", "--report", str(failed_smoke), *sign
    )
    assert "signature, sbom, provenance" in output and "smoke cpu" not in output.split("signed ")[1].splitlines()[0]
    code, out, last = _verify(f"{registry}/{repo}:v1", keys.pub)
    assert code == 1 and "ok         signature" in out and "ok         sbom" in out
    assert "FAILED     smoke cpu: no smoke attestation for cpu" in out
    # A failed smoke report attested by hand (publish never attests one): verify still refuses it.
    proc = _cosign(
        "attest",
        "--yes",
        "--key",
        str(keys.key),
        "--tlog-upload=false",
        "--allow-insecure-registry",
        "--type",
        "urn:imagebuild:smoke-report:v1",
        "--predicate",
        str(failed_smoke),
        f"{registry}/{repo}@{digest}",
        password_file=keys.password_file,
    )
    assert proc.returncode == 0, proc.stderr
    code, out, last = _verify(f"{registry}/{repo}:v1", keys.pub)
    assert code == 1
    assert "FAILED     smoke cpu: smoke report did not pass" in out
    assert last.endswith("smoke cpu: smoke report did not pass"), last


def test_promote_requires_signed_and_signs_the_public_digest(
    signed: Signed, smoked_local_cpu: tuple[Any, Path], registry: str, keys: Keys, tmp_path: Path
) -> None:
    _, smoke_report = smoked_local_cpu
    public = unique("e2e-signed-public")
    sign = ("--sign-key", str(keys.key), "--key-password-file", str(keys.password_file))
    source = f"{registry}/{signed.repo}@{signed.digest}"
    args = ("publish", "--promote", source, "--registry", f"{registry}/{public}", "--report", str(smoke_report))
    refused = imagebuild(
        *args, "--out", str(tmp_path / "r.json"), "--require-signed", "--verify-key", str(keys.other_pub), *sign
    )
    assert refused.returncode == 5 and "not signed as required" in refused.stderr.strip().splitlines()[-1]
    done = imagebuild(
        *args, "--out", str(tmp_path / "p.json"), "--require-signed", "--verify-key", str(keys.pub), *sign
    )
    assert done.returncode == 0, done.output[-3000:]
    code, out, last = _verify(f"{registry}/{public}:local-cpu", keys.pub)
    assert code == 0, out + last


def _wrong_password(tmp_path: Path) -> tuple[str, ...]:
    """Real cosign with the right key and a wrong password: `cosign sign` fails to decrypt the key."""
    wrong = tmp_path / "wrong-password"
    wrong.write_text("not the e2e password\n")
    return ("--key-password-file", str(wrong))


def test_cosign_failure_leaves_the_public_tags_unmoved(
    smoked_local_cpu: tuple[Any, Path], failing_image: str, registry: str, keys: Keys, tmp_path: Path
) -> None:
    """Signing runs on the staged digest before any tag moves: v1 keeps its old digest, v2 is never created."""
    _, smoke_report = smoked_local_cpu
    repo = unique("e2e-signfail")
    before, _ = _publish("local-cpu", registry, repo, tmp_path / "first.json", "--report", str(smoke_report))
    out = tmp_path / "p.json"
    dest = ("--registry", f"{registry}/{repo}", "--tag", "v1", "--tag", "v2", "--out", str(out))
    run = imagebuild(
        "publish", failing_image, *dest, "--allow-unsmoked", "--sign-key", str(keys.key), *_wrong_password(tmp_path)
    )
    assert run.returncode == 5, run.output[-3000:]
    errors = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(f"error: signing {registry}/{repo}@sha256:"), run.stderr
    assert "Traceback" not in run.output and "not the e2e password" not in run.output
    reg = Registry(RepoRef.parse(f"{registry}/{repo}"))
    assert reg.digest(repo, "v1") == before  # not moved onto the unsigned digest
    assert reg.digest(repo, "v2") is None  # never created
    report = json.loads(out.read_text())
    assert report["ok"] is False and report["refs"] == [] and report["digest"] not in (None, before)
    assert report["error"].startswith("signing ")


def test_cosign_failure_on_promote_creates_no_public_tag(
    signed: Signed, smoked_local_cpu: tuple[Any, Path], registry: str, keys: Keys, tmp_path: Path
) -> None:
    _, smoke_report = smoked_local_cpu
    public = unique("e2e-signfail-public")
    source = f"{registry}/{signed.repo}@{signed.digest}"
    run = imagebuild(
        "publish", "--promote", source, "--registry", f"{registry}/{public}", "--report", str(smoke_report),
        "--out", str(tmp_path / "p.json"), "--sign-key", str(keys.key), *_wrong_password(tmp_path),
    )  # fmt: skip
    assert run.returncode == 5, run.output[-3000:]
    errors = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(f"error: signing {registry}/{public}@{signed.digest}"), run.stderr
    assert Registry(RepoRef.parse(f"{registry}/{public}")).digest(public, "local-cpu") is None
