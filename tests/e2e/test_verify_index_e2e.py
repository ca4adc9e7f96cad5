"""Issue 21, class 2: `imagebuild verify` checks what a pull gets. Indexes crafted in the loopback registry
(children are a tiny amd64 image pushed there): two entries for one (os, architecture, variant), two for one
os/architecture differing only by a default or other variant, and an entry without a platform are each refused
by read_index, and `verify` of such an index is a failure naming it, exit 1, before any signature is asked for.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import uuid
from pathlib import Path

import pytest
from e2e_helpers import CLI, DOCKER

from imagebuild.engine.registry import Registry, RepoRef
from imagebuild.release.ociindex import OCI_INDEX, IndexMismatch, read_index


def _push_image(tmp: Path, ref: str, text: str, arm64: bool = False) -> str:
    ctx = tmp / uuid.uuid4().hex[:6]
    ctx.mkdir()
    if arm64:  # the arm64 base as is, labelled (no RUN: nothing emulated); its config says linux/arm64
        (ctx / "Dockerfile").write_text(f"FROM local/debian:bookworm-arm64\nLABEL which={text}\n")
    else:
        (ctx / "Dockerfile").write_text(f"FROM local/debian:bookworm\nRUN echo {text} > /which\n")
    env = {"DOCKER_BUILDKIT": "1", "PATH": "/usr/bin:/bin"}
    platform = ["--platform", "linux/arm64"] if arm64 else []
    subprocess.run(
        [DOCKER, "build", "-q", *platform, "--network", "host", "-t", ref, str(ctx)],
        check=True,
        env=env,
        capture_output=True,
    )
    subprocess.run([DOCKER, "push", "-q", ref], check=True, capture_output=True)
    out = subprocess.run(
        [DOCKER, "image", "inspect", "--format", '{{join .RepoDigests "\\n"}}', ref],
        check=True,
        capture_output=True,
        text=True,
    )
    subprocess.run([DOCKER, "rmi", "-f", ref], check=False, capture_output=True)
    repo = ref.rsplit(":", 1)[0]
    return next(line.split("@", 1)[1] for line in out.stdout.split() if line.startswith(repo + "@"))


def _entry(reg: Registry, repo: str, digest: str, platform: dict[str, str] | None) -> dict[str, object]:
    body, media_type = reg.manifest(repo, digest)
    entry: dict[str, object] = {"mediaType": media_type, "digest": digest, "size": len(body)}
    if platform is not None:
        entry["platform"] = platform
    return entry


@pytest.fixture(scope="module")
def pushed(registry: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[RepoRef, Registry, str, str]:
    repo = RepoRef.parse(f"{registry}/imagebuild-h21-index-{uuid.uuid4().hex[:8]}")
    tmp = tmp_path_factory.mktemp("images")
    first = _push_image(tmp, f"{repo}:first", "first")
    second = _push_image(tmp, f"{repo}:second", "second")
    return repo, Registry(repo), first, second


AMD64 = {"os": "linux", "architecture": "amd64"}
CASES = {
    "same-platform-twice": [AMD64, AMD64],
    "default-variant-and-none": [AMD64, {**AMD64, "variant": "v1"}],
    "another-variant": [AMD64, {**AMD64, "variant": "v3"}],
    "no-platform": [AMD64, None],
    "no-architecture": [AMD64, {"os": "linux"}],
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_an_ambiguous_index_is_refused_and_does_not_verify(
    pushed: tuple[RepoRef, Registry, str, str], case: str, tmp_path: Path
) -> None:
    repo, reg, first, second = pushed
    manifests = [_entry(reg, repo.repo, d, p) for d, p in zip((first, second), CASES[case], strict=True)]
    body = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": manifests}).encode()
    reg.put_manifest(repo.repo, case, body, OCI_INDEX)
    # issue 34: a variant the child's own config does not say is refused as that, before the two are compared
    with pytest.raises(IndexMismatch, match="two entries for linux/amd64|without os and architecture|config says"):
        read_index(reg, repo.repo, case)
    key = tmp_path / "cosign.pub"
    key.write_text("-----BEGIN PUBLIC KEY-----\nMFkw\n-----END PUBLIC KEY-----\n")  # never reached
    proc = subprocess.run(
        [*CLI, "verify", f"{repo}:{case}", "--key", str(key)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "index" in errors[0], proc.stderr
    assert "signature" not in proc.stdout  # refused before cosign was asked
    digest = "sha256:" + hashlib.sha256(body).hexdigest()
    assert reg.digest(repo.repo, case) == digest


def test_a_plain_index_reads_with_the_arm64_default_variant_folded(
    pushed: tuple[RepoRef, Registry, str, str], tmp_path: Path
) -> None:
    repo, reg, first, _ = pushed
    arm = _push_image(tmp_path, f"{repo}:arm64", "arm64", arm64=True)  # an entry's platform is its config's
    manifests = [
        _entry(reg, repo.repo, first, AMD64),
        _entry(reg, repo.repo, arm, {"os": "linux", "architecture": "arm64", "variant": "v8"}),
    ]
    body = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": manifests}).encode()
    reg.put_manifest(repo.repo, "plain", body, OCI_INDEX)
    assert read_index(reg, repo.repo, "plain") == {"linux/amd64": first, "linux/arm64": arm}
