"""`imagebuild publish local-cpu`: one OCI index per tag of the smoked linux/amd64 and linux/arm64 images (issue 15).

Real engine, loopback registry and cosign. The arm64 image is the session's (built once by `local_cpu`, smoked once
under emulation by `smoked_arm64`). A failed arm64 smoke report blocks the index before anything is pushed; the
published tag is the index (never one platform's image), children exactly the smoked image IDs; verify passes on the
index tag; promotion copies the index with its children, gated on its signature.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import skopeo
from e2e_helpers import _unavailable, imagebuild, unique

from imagebuild.engine.docker import find_engine
from imagebuild.engine.registry import Registry, RepoRef
from imagebuild.release.ociindex import DOCKER_LIST, OCI_INDEX, read_index

pytestmark = [pytest.mark.docker, pytest.mark.registry]


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(private key, public key, password file): a throwaway pair made with the real cosign."""
    root = tmp_path_factory.mktemp("index-keys")
    password = root / "password"
    password.write_text("e2e-only password")
    try:
        proc = subprocess.run(
            ["cosign", "generate-key-pair", "--output-key-prefix", str(root / "cosign")],
            env={"COSIGN_PASSWORD": "e2e-only password", "PATH": "/usr/local/bin:/usr/bin:/bin"},
            capture_output=True,
            text=True,
            timeout=120,
        )
    except FileNotFoundError:
        _unavailable("cosign is not installed")
    assert proc.returncode == 0, proc.stderr
    return root / "cosign.key", root / "cosign.pub", password


def test_failed_arm64_smoke_blocks_the_index(
    smoked_local_cpu: tuple[Any, Path], smoked_arm64: Path, registry: str, tmp_path: Path
) -> None:
    _, amd64 = smoked_local_cpu
    failed = json.loads(smoked_arm64.read_text())
    failed["passed"] = False  # the arm64 report of this very image, as a failed run writes it
    failed["checks"][1].update(status="failed", reason="wrong answer (planted by the test)")
    (tmp_path / "arm64").mkdir()
    (tmp_path / "arm64" / "report.json").write_text(json.dumps(failed))
    repo = f"{registry}/{unique('e2e-index-blocked')}"
    given = ("--report", str(amd64), "--report", str(tmp_path / "arm64" / "report.json"))
    run = imagebuild("publish", "local-cpu", "--registry", repo, *given)
    assert run.returncode == 5, run.output[-3000:]
    error = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and "linux/arm64" in error[0] and "no passing smoke report" in error[0], run.stderr
    assert Registry(RepoRef.parse(repo)).digest(RepoRef.parse(repo).repo, "local-cpu") is None  # nothing published


def test_index_published_signed_verified_and_promoted(
    local_cpu: Any,
    smoked_local_cpu: tuple[Any, Path],
    smoked_arm64: Path,
    registry: str,
    keys: tuple[Path, Path, Path],
    tmp_path: Path,
) -> None:
    key, pub, password = keys
    sign = ("--sign-key", str(key), "--key-password-file", str(password))
    reports = ("--report", str(smoked_local_cpu[1]), "--report", str(smoked_arm64))
    repo = RepoRef.parse(f"{registry}/{unique('e2e-index')}")
    out = tmp_path / "publish" / "publish-report.json"
    run = imagebuild("publish", "local-cpu", "--registry", str(repo), "--tag", "v1", "--out", str(out), *reports, *sign)
    assert run.returncode == 0, run.output[-4000:]
    published = json.loads(out.read_text())
    smoked = {
        "linux/amd64": json.loads(smoked_local_cpu[1].read_text())["image_id"],
        "linux/arm64": json.loads(smoked_arm64.read_text())["image_id"],
    }
    reg = Registry(repo)
    # The bare tag is the index (read_index refuses one platform's image); its children are the smoked images.
    children = read_index(reg, repo.repo, "v1")
    assert children == published["platforms"] and sorted(children) == sorted(smoked)
    assert reg.digest(repo.repo, "v1") == published["digest"]
    # An independent client (skopeo) reads the same index: its media type and each child's (OCI on the current
    # engine, Docker's on 20.10), each child's platform and digest; the publish report recorded what it read back.
    index_type = OCI_INDEX if find_engine().has("oci-media-types") else DOCKER_LIST
    assert skopeo.published_as_read(str(repo), "v1", index_type) == children
    assert published["media_type"] == index_type and published["attestations"] == []
    assert published["platform_media_types"] == dict.fromkeys(children, skopeo.MANIFEST_OF[index_type])
    for platform, digest in children.items():
        image_id, config = reg.config(repo.repo, digest)
        # the ID smoke recorded: the config digest (20.10), the manifest digest (containerd image store), or the
        # one-platform index the containerd store keeps when BuildKit attached attestations, which lists this child
        assert f"{config['os']}/{config['architecture']}" == platform
        if smoked[platform] not in (image_id, digest):
            assert read_index(reg, repo.repo, smoked[platform]) == {platform: digest}, smoked[platform]
        child = json.loads((out.parent / platform.replace("/", "-") / "publish-report.json").read_text())
        assert child["digest"] == digest and child["ok"], child
        attached = json.loads((out.parent / platform.replace("/", "-") / "signing.json").read_text())["attached"]
        assert attached == ["signature", "sbom", "provenance", "smoke cpu"], attached
    assert json.loads((out.parent / "signing.json").read_text())["attached"] == ["signature"]  # the index
    verify = imagebuild("verify", f"{repo}:v1", "--key", str(pub), timeout=600)
    assert verify.returncode == 0, verify.output[-4000:]
    for line in ("ok         signature", "ok         linux/arm64 smoke cpu", "ok         linux/amd64 provenance"):
        assert line in verify.stdout, verify.stdout
    # Promotion: gated on the index's signature, copies the index and its children, same digests.
    public = RepoRef.parse(f"{registry}/{unique('e2e-index-public')}")
    promote = imagebuild(
        "publish", "--promote", f"{repo}@{published['digest']}", "--registry", str(public), "--tag", "v1",
        "--require-signed", "--verify-key", str(pub), "--out", str(tmp_path / "promoted" / "publish-report.json"),
        *reports, *sign,
    )  # fmt: skip
    assert promote.returncode == 0, promote.output[-4000:]
    assert reg.digest(public.repo, "v1") == published["digest"]
    assert read_index(reg, public.repo, "v1") == children
    verify = imagebuild("verify", f"{public}:v1", "--key", str(pub), timeout=600)
    assert verify.returncode == 0, verify.output[-4000:]


def test_cosign_failure_publishes_no_index_tag(
    smoked_local_cpu: tuple[Any, Path], smoked_arm64: Path, registry: str, keys: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    """The children and the index are signed before the tag is written: a cosign failure leaves no tag at all."""
    wrong = tmp_path / "wrong-password"
    wrong.write_text("not the e2e password")
    repo = RepoRef.parse(f"{registry}/{unique('e2e-index-signfail')}")
    reports = ("--report", str(smoked_local_cpu[1]), "--report", str(smoked_arm64))
    sign = ("--sign-key", str(keys[0]), "--key-password-file", str(wrong))
    run = imagebuild("publish", "local-cpu", "--registry", str(repo), "--tag", "v1", *reports, *sign)
    assert run.returncode == 5, run.output[-3000:]
    errors = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(f"error: signing {repo}@sha256:"), run.stderr
    assert Registry(repo).digest(repo.repo, "v1") is None


def test_ci_path_staged_platform_digests_promoted_as_one_index(
    smoked_local_cpu: tuple[Any, Path], smoked_arm64: Path, registry: str, tmp_path: Path
) -> None:
    """The workflow's path: each build job stages one platform's digest, the publish job promotes them as one index."""
    staging = f"{registry}/{unique('e2e-index-staging')}"
    refs = []
    for platform in ("linux/amd64", "linux/arm64"):
        out = tmp_path / platform.replace("/", "-") / "staged.json"
        run = imagebuild(
            "publish", "local-cpu", "--platform", platform, "--registry", staging, "--allow-unsmoked", "--out", str(out)
        )
        assert run.returncode == 0, run.output[-3000:]
        refs += ["--index-of", json.loads(out.read_text())["digest_ref"]]
    public = RepoRef.parse(f"{registry}/{unique('e2e-index-ci')}")
    reports = ("--report", str(smoked_local_cpu[1]), "--report", str(smoked_arm64))
    out = tmp_path / "published.json"
    run = imagebuild("publish", "--promote", "-", *refs, "--registry", str(public), *reports, "--out", str(out))
    assert run.returncode == 0, run.output[-3000:]
    published = json.loads(out.read_text())
    children = read_index(Registry(public), public.repo, "local-cpu")  # the tag from the children's target label
    assert sorted(children) == ["linux/amd64", "linux/arm64"] and published["platforms"] == children
    assert [r.split("@")[1] for r in refs[1::2]] == [children["linux/amd64"], children["linux/arm64"]]
    # one leg without its report: refused, then promoted with --allow-unsmoked, and the publish report says which
    # leg went unsmoked (it used to record nothing: bench/vllm_cuda_publish.sh's arm64 leg, issue 31)
    again = RepoRef.parse(f"{registry}/{unique('e2e-index-ci-unsmoked')}")
    half = ("--report", str(smoked_local_cpu[1]))
    refused = imagebuild("publish", "--promote", "-", *refs, "--registry", str(again), *half)
    assert refused.returncode != 0 and "linux/arm64" in refused.stderr, refused.output[-2000:]
    out = tmp_path / "unsmoked.json"
    run = imagebuild(
        "publish", "--promote", "-", *refs, "--registry", str(again), *half, "--allow-unsmoked", "--out", str(out)
    )
    assert run.returncode == 0, run.output[-3000:]
    record = json.loads(out.read_text())
    assert record["allow_unsmoked"] is True and record["warning"].startswith("linux/arm64 "), record
