"""The OCI index against the real engine and loopback registry: two platforms' images pushed and verified by
digest, one index whose children are exactly those digests, its read-back check, and promotion copying it.

The images are tiny (a file on each platform's base): the arm64 one is built under emulation (qemu binfmt, which
setup.sh installs). No skip: without emulation or the arm64 base this test fails, naming what is missing.
"""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import pytest
from e2e_helpers import DOCKER

from imagebuild.engine.registry import Registry, RepoRef
from imagebuild.release.ociindex import Child, IndexMismatch, assemble, read_index, verify_index

BASES = {"linux/amd64": "local/debian:bookworm", "linux/arm64": "127.0.0.1:5000/imagebuild-base/debian:bookworm-arm64"}


def _build_and_push(tmp: Path, platform: str, ref: str) -> str:
    """Build a one-file image for platform, push it, return the registry's digest."""
    ctx = tmp / platform.replace("/", "-")
    ctx.mkdir()
    (ctx / "Dockerfile").write_text(f"FROM {BASES[platform]}\nRUN uname -m > /machine\n")
    env = {"DOCKER_BUILDKIT": "1", "PATH": "/usr/bin:/bin"}
    subprocess.run(
        [DOCKER, "build", "-q", "--network", "host", "--platform", platform, "-t", ref, str(ctx)],
        check=True,
        env=env,
        capture_output=True,
    )
    machine = subprocess.run(
        [DOCKER, "run", "--rm", "--platform", platform, ref, "cat", "/machine"], capture_output=True, text=True
    )
    assert machine.stdout.strip() == {"linux/amd64": "x86_64", "linux/arm64": "aarch64"}[platform], machine.stderr
    subprocess.run([DOCKER, "push", "-q", ref], check=True, capture_output=True)
    out = subprocess.run(
        [DOCKER, "image", "inspect", "--format", '{{join .RepoDigests "\\n"}}', ref],
        check=True,
        capture_output=True,
        text=True,
    )
    repo = ref.rsplit(":", 1)[0]
    return next(line.split("@", 1)[1] for line in out.stdout.split() if line.startswith(repo + "@"))


def test_index_of_two_platforms_verified_and_promoted(registry: str, tmp_path: Path) -> None:
    repo = RepoRef.parse(f"{registry}/oci-index-{uuid.uuid4().hex[:8]}")
    reg = Registry(repo)
    children = [Child(p, _build_and_push(tmp_path, p, f"{repo}:{p.replace('/', '-')}")) for p in BASES]
    # A child standing for the wrong platform is refused before anything is written.
    with pytest.raises(IndexMismatch, match="is a linux/amd64 image, not linux/arm64"):
        assemble(reg, repo.repo, "bad", [Child("linux/arm64", children[0].digest)])
    digest = assemble(reg, repo.repo, "v1", children)
    verify_index(reg, repo.repo, "v1", digest, children)
    assert read_index(reg, repo.repo, "v1") == {c.platform: c.digest for c in children}
    # The bare tag must be the index, never one platform's image.
    with pytest.raises(IndexMismatch, match="is a single image"):
        verify_index(reg, repo.repo, "linux-amd64", reg.digest(repo.repo, "linux-amd64") or "", children)
    # Promotion copies the index and its children, no rebuild: same digests in the other repository.
    public = RepoRef.parse(f"{registry}/oci-public-{uuid.uuid4().hex[:8]}")
    reg.copy(repo.repo, digest, public.repo, "v1")
    verify_index(reg, public.repo, "v1", digest, children)
    for child in children:
        assert reg.digest(public.repo, child.digest) == child.digest
    # Pulling the promoted tag per platform gives that platform's image.
    for child in children:
        pulled = subprocess.run(
            [DOCKER, "run", "--rm", "--platform", child.platform, f"{public}:v1", "uname", "-m"],
            capture_output=True,
            text=True,
        )
        assert pulled.stdout.strip() == {"linux/amd64": "x86_64", "linux/arm64": "aarch64"}[child.platform]
