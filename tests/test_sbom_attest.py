"""SBOM, provenance and signing options without an engine: the CycloneDX document built from the committed ROCm
manifest and the matrix pins validates against the CycloneDX 1.6 schema the library ships, carries the pinned
commits as pedigree, and is deterministic; the provenance names matrix, manifest and pins; usage errors of the
signing options come before anything is pushed."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from imagebuild.engine.cosign import Signer, is_loopback, read_password
from imagebuild.release import attest
from imagebuild.release.sbom import Inventory, render, validate
from imagebuild.release.sbom_image import COLLECTOR, component_sources
from imagecontract.models import Manifest
from imagecontract.models.manifest import Patch

REPO = Path(__file__).resolve().parents[1]
ROCM = "rocm6.1-torch2.3"


@pytest.fixture(scope="module")
def inventory() -> Inventory:
    manifest = Manifest.from_dict(json.loads((REPO / "dockerfiles" / ROCM / "manifest.json").read_text()))
    labels = {
        "io.imagebuild.target": ROCM,
        "io.imagebuild.arches": "gfx90a;gfx942",
        "io.imagebuild.matrix-sha256": "ab" * 32,
        "org.opencontainers.image.revision": "c" * 40 + "-dirty",
        "org.opencontainers.image.created": "2026-01-02T03:04:05+00:00",
    }
    dpkg = [
        {"Package": "libc6", "Version": "2.35-0ubuntu3.8", "Architecture": "amd64", "Status": "install ok installed"},
        {"Package": "gone", "Version": "1", "Architecture": "amd64", "Status": "deinstall ok config-files"},
    ]
    dists = [
        {"name": "torch", "version": "2.3.0+rocm6.1", "location": "/usr/lib/python3/dist-packages"},
        {"name": "Jinja2", "version": "3.1.6", "location": "/a"},
        {"name": "jinja2", "version": "3.1.6", "location": "/b"},  # the same distribution seen twice on sys.path
    ]
    return Inventory(
        image_id="sha256:" + "1" * 64,
        labels=labels,
        os_release={"ID": "ubuntu", "VERSION_ID": "22.04"},
        dpkg=dpkg,
        dists=dists,
        manifest=manifest,
        component_sources=component_sources(REPO / "matrix.yaml"),
    )


def test_sbom_validates_and_holds_os_python_and_built_components(inventory: Inventory) -> None:
    text = render(inventory)
    assert validate(text) is None
    doc = json.loads(text)
    assert doc["bomFormat"] == "CycloneDX" and doc["specVersion"] == "1.6"
    refs = {c["bom-ref"]: c for c in doc["components"]}
    assert refs["deb:libc6:amd64"]["purl"] == "pkg:deb/debian/libc6@2.35-0ubuntu3.8?arch=amd64&distro=ubuntu-22.04"
    assert "deb:gone:amd64" not in refs  # removed packages are not in the image
    assert [r for r in refs if r.startswith("pypi:jinja2")] == ["pypi:jinja2@3.1.6"]
    torch = refs["built:torch"]
    assert torch["pedigree"]["commits"][0]["uid"] == "ceaa1e4a7b66e818ea4e56925bb4a5dff8c56055"
    assert torch["purl"] == "pkg:github/fxmarty/pytorch@ceaa1e4a7b66e818ea4e56925bb4a5dff8c56055"
    vllm = refs["built:vllm-rocm"]
    assert vllm["purl"] == "pkg:github/fxmarty/rocm-vllm@ca6913b3c2ffacdcb7d15e914dc34adbc6c89479"
    assert {"name": "imagebuild:arches", "value": '["gfx90a", "gfx942"]'} in vllm["properties"]
    assert "built:flash-attention" not in refs  # not included for ROCm: not in the image
    tgi = refs["built:text-generation-inference"]
    assert tgi["pedigree"]["commits"][0]["uid"] == "232e8d522713f43834d48ae45d1330b0e6dd367e"
    kernels = refs["built:imagebuild-kernels"]
    assert {"name": "imagebuild:source", "value": "this repository: kernels"} in kernels["properties"]
    assert doc["metadata"]["component"]["type"] == "container"
    assert doc["metadata"]["timestamp"].startswith("2026-01-02T03:04:05")


def test_sbom_patches_are_pedigree(inventory: Inventory) -> None:
    patched = copy.deepcopy(inventory)
    assert patched.manifest is not None
    patched.manifest.torch.patches = [Patch(name="fix-hip", url="https://example.invalid/fix.patch", sha256="d" * 64)]
    doc = json.loads(render(patched))
    torch = {c["bom-ref"]: c for c in doc["components"]}["built:torch"]
    assert torch["pedigree"]["patches"][0]["diff"]["url"] == "https://example.invalid/fix.patch"
    assert "sha256=" + "d" * 64 in torch["pedigree"]["notes"]


def test_sbom_is_a_function_of_the_image(inventory: Inventory) -> None:
    assert render(inventory) == render(copy.deepcopy(inventory))
    other = copy.deepcopy(inventory)
    other.image_id = "sha256:" + "2" * 64
    assert json.loads(render(other))["serialNumber"] != json.loads(render(inventory))["serialNumber"]


def test_schema_rejects_a_broken_document(inventory: Inventory) -> None:
    doc = json.loads(render(inventory))
    doc["components"][0]["type"] = "not-a-type"
    assert "not-a-type" in (validate(json.dumps(doc)) or "")
    del doc["bomFormat"]
    assert validate(json.dumps(doc)) is not None


def test_collector_is_stdlib_python_that_runs_here() -> None:
    """The collector runs in the image's python3 with -I; here it must at least run and print the fields."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-I", "-c", COLLECTOR], capture_output=True, text=True, check=True).stdout
    data = json.loads(out)
    assert {"os_release", "dpkg", "dists", "manifest", "kernels"} <= set(data)
    assert any(d["name"].lower() == "pip" or d["name"] == "click" for d in data["dists"])


def test_provenance_names_matrix_manifest_pins_and_revision(inventory: Inventory) -> None:
    pred = attest.provenance(inventory.labels, inventory.manifest, "matrix.yaml", inventory.component_sources)
    params = pred["buildDefinition"]["externalParameters"]
    lock = params.pop("lock")  # the inventory's labels carry no io.imagebuild.lock: recorded as such
    assert lock["state"] == "unrecorded" and "without a lock record" in lock["refused_because"]
    assert params == {"target": ROCM, "matrix": {"path": "matrix.yaml", "sha256": "ab" * 32}, "arches": "gfx90a;gfx942"}
    assert pred["buildDefinition"]["internalParameters"]["manifest"]["target"] == ROCM
    deps = {d["name"]: d for d in pred["buildDefinition"]["resolvedDependencies"]}
    assert deps["imagebuild checkout"]["digest"] == {"gitCommit": "c" * 40}
    assert deps["torch"]["uri"] == "git+https://github.com/fxmarty/pytorch@ceaa1e4a7b66e818ea4e56925bb4a5dff8c56055"
    assert deps["flash-attention-ck"]["digest"]["gitCommit"] == "2554f490101742ccdc56620a938f847f61754be6"
    assert "runtime:text-generation-inference" in deps
    stmt = {"subject": [{"name": "h/r", "digest": {"sha256": "e" * 64}}], "predicate": pred}  # as cosign makes it
    assert attest.subject_matches(stmt, "sha256:" + "e" * 64)
    assert not attest.subject_matches(stmt, "sha256:" + "f" * 64)


def test_claimed_arches() -> None:
    assert attest.claimed_arches({"io.imagebuild.arches": "gfx90a;gfx942"}) == ["gfx90a", "gfx942"]
    assert attest.claimed_arches({"io.imagebuild.arches": "none"}) == ["cpu"]
    assert attest.arch_base("gfx942:sramecc+:xnack-") == "gfx942"


def test_password_from_a_file_reaches_cosign_only_in_its_environment(tmp_path: Path) -> None:
    secret = tmp_path / "pw"
    secret.write_text("s3cret pass\n")
    signer = Signer(key=tmp_path / "k.key", password=read_password(secret))
    assert signer.env() == {"COSIGN_PASSWORD": "s3cret pass"}
    assert not any("s3cret" in arg for arg in signer.flags())
    assert is_loopback("127.0.0.1:5000") and is_loopback("localhost") and is_loopback("[::1]:5000")
    assert not is_loopback("registry.example.com:5000") and not is_loopback("10.0.0.1:5000")


def test_publish_signing_usage_errors_come_first(cli, tmp_path: Path) -> None:
    key = tmp_path / "k.key"
    key.write_text("not used")
    base = ("publish", "local-cpu", "--registry", "127.0.0.1:9/never", "--allow-unsmoked")
    no_password = cli(*base, "--sign-key", str(key))
    assert no_password.exit_code == 2 and "--key-password-file" in no_password.stderr
    missing = cli(*base, "--sign-key", str(tmp_path / "absent.key"), "--key-password-file", str(key))
    assert missing.exit_code == 2 and "not found" in missing.stderr
    both = cli(*base, "--sign-key", str(key), "--keyless")
    assert both.exit_code == 2 and "exclude" in both.stderr


def test_verify_usage_errors_exit_2(cli, tmp_path: Path) -> None:
    assert cli("verify", "127.0.0.1:5000/x:y").exit_code == 2
    nokey = cli("verify", "127.0.0.1:5000/x:y", "--key", str(tmp_path / "absent.pub"))
    assert nokey.exit_code == 2 and "not found" in nokey.stderr
    bad = cli("verify", "no ref", "--key", str(tmp_path / "absent.pub"))
    assert bad.exit_code == 2


def test_dpkg_and_os_release_parsers() -> None:
    from imagebuild.release.sbom_image import parse_dpkg, parse_os_release

    status = (
        "Package: libc6\nStatus: install ok installed\nVersion: 2.36-9\nArchitecture: amd64\n"
        "Description: GNU C Library\n Package: not-a-field (continuation)\n\n"
        "Package: zlib1g\nSource: zlib (1:1.2.13)\nVersion: 1:1.2.13\nArchitecture: amd64\n"
        "Status: install ok installed\n"
    )
    assert parse_dpkg(status) == [
        {"Package": "libc6", "Status": "install ok installed", "Version": "2.36-9", "Architecture": "amd64"},
        {"Package": "zlib1g", "Source": "zlib (1:1.2.13)", "Version": "1:1.2.13", "Architecture": "amd64",
         "Status": "install ok installed"},
    ]  # fmt: skip
    assert parse_os_release('# c\nID=debian\nVERSION_ID="12"\n') == {"ID": "debian", "VERSION_ID": "12"}
