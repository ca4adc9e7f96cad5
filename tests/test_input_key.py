"""The input key of a leg (issue 33 item 4): one test per kind of input showing that changing it changes the key,
and that what the leg does not read leaves the key as it was. The reuse record is written to and read from the
real loopback registry (skipped, saying so, when it does not answer)."""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

import pytest
import requests

from imagebuild.building.buildkit import BuildSpec
from imagebuild.building.input_key import (
    copied_paths,
    find_reusable,
    input_key,
    parts_of,
    record_smoked,
)
from imagebuild.errors import ConfigError

REPO = Path(__file__).resolve().parent.parent
REGISTRY = "127.0.0.1:5000"
DOCKERFILE = """\
FROM --platform=linux/amd64 local/debian:bookworm AS os-amd64
# a comment naming COPY not/read/ /x
COPY kernels/ /src/kernels/
RUN --mount=type=bind,source=dockerfiles/t/requirements/base.txt,target=/tmp/r.txt \\
    --mount=type=bind,from=os-amd64,source=/,target=/target \\
    pip install -r /tmp/r.txt
COPY --from=os-amd64 /etc/os-release /os-release
"""


@pytest.fixture
def context(tmp_path: Path) -> Path:
    """A build context: the real lock, a Dockerfile, the files it copies, one it does not, and ignored ones."""
    shutil.copy(REPO / "matrix.lock.json", tmp_path / "matrix.lock.json")
    (tmp_path / "kernels" / "__pycache__").mkdir(parents=True)
    (tmp_path / "kernels" / "ops.py").write_text("def silu(): ...\n")
    (tmp_path / "kernels" / "__pycache__" / "ops.cpython-311.pyc").write_bytes(b"\x00compiled")
    (tmp_path / "dockerfiles" / "t" / "requirements").mkdir(parents=True)
    (tmp_path / "dockerfiles" / "t" / "requirements" / "base.txt").write_text("pip==24.0 --hash=sha256:00\n")
    (tmp_path / "dockerfiles" / "t" / "Dockerfile").write_text(DOCKERFILE)
    (tmp_path / "README.md").write_text("not copied\n")
    (tmp_path / ".dockerignore").write_text("**/__pycache__\n**/*.pyc\n")
    return tmp_path


def spec(context: Path, platform: str = "linux/amd64", **changes: object) -> BuildSpec:
    made = BuildSpec(
        target="local-cpu" if platform == "linux/amd64" else "local-cpu-linux-arm64",
        context=context,
        dockerfile=context / "dockerfiles" / "t" / "Dockerfile",
        tags=["imagebuild:local-cpu"],
        platform=platform,
        build_args={"A": "1"},
        base_substitution=[
            {"public": "local/debian:bookworm", "used": "127.0.0.1:5000/b:amd64", "used_digest": "sha256:" + "a" * 64}
        ],
    )
    for name, value in changes.items():
        setattr(made, name, value)
    return made


def test_copied_paths_reads_copy_and_bind_mounts_not_from_stages() -> None:
    assert copied_paths(DOCKERFILE) == ["dockerfiles/t/requirements/base.txt", "kernels/"]


def test_the_lock_entries_of_its_target_and_platform_change_the_key(context: Path) -> None:
    before_amd, before_arm = input_key(spec(context)), input_key(spec(context, "linux/arm64"))
    lock = json.loads((context / "matrix.lock.json").read_text())
    lock["inputs"]["pip:local-cpu@linux/amd64:base"]["where"] = "moved"  # any byte of a listed entry
    (context / "matrix.lock.json").write_text(json.dumps(lock))
    assert input_key(spec(context)) != before_amd
    assert input_key(spec(context, "linux/arm64")) == before_arm  # an amd64 entry is not an arm64 leg's input


def test_the_dockerfile_changes_the_key(context: Path) -> None:
    before = input_key(spec(context))
    path = context / "dockerfiles" / "t" / "Dockerfile"
    path.write_text(DOCKERFILE + "ENV X=1\n")
    assert input_key(spec(context)) != before


def test_a_rendered_dockerfile_not_yet_written_is_what_is_hashed(context: Path) -> None:
    written = input_key(spec(context))
    assert input_key(spec(context, rendered_files={"Dockerfile": DOCKERFILE})) == written
    assert input_key(spec(context, rendered_files={"Dockerfile": DOCKERFILE + "\n"})) != written


def test_a_copied_context_file_changes_the_key_an_ignored_or_unread_one_does_not(context: Path) -> None:
    before = input_key(spec(context))
    (context / "README.md").write_text("changed, but no COPY reads it\n")
    (context / "kernels" / "__pycache__" / "ops.cpython-311.pyc").write_bytes(b"\x00other")  # .dockerignore'd
    assert input_key(spec(context)) == before
    (context / "kernels" / "ops.py").write_text("def silu(): return 1\n")
    assert input_key(spec(context)) != before
    after_copy = input_key(spec(context))
    (context / "dockerfiles" / "t" / "requirements" / "base.txt").write_text("pip==24.1 --hash=sha256:01\n")
    assert input_key(spec(context)) != after_copy  # a bind-mounted file is read by the build too
    (context / "kernels" / "new.py").write_text("")
    assert "kernels/new.py" in parts_of(spec(context))["context"]


def test_build_args_and_platform_change_the_key(context: Path) -> None:
    before = input_key(spec(context))
    assert input_key(spec(context, build_args={"A": "2"})) != before
    assert input_key(spec(context, build_args={"A": "1", "B": "1"})) != before
    assert input_key(spec(context, source_date_epoch=1)) == before  # the commit time decides only times


def test_base_digests_change_the_key(context: Path) -> None:
    before = input_key(spec(context))
    other = [{"public": "local/debian:bookworm", "used": "127.0.0.1:5000/b:amd64", "used_digest": "sha256:" + "b" * 64}]
    assert input_key(spec(context, base_substitution=other)) != before
    lock = json.loads((context / "matrix.lock.json").read_text())
    image = next(k for k in lock["targets"]["local-cpu"]["linux/amd64"] if k.startswith("image:"))
    lock["inputs"][image]["image_id"] = "sha256:" + "c" * 64  # the lock's pinned local base
    (context / "matrix.lock.json").write_text(json.dumps(lock))
    assert input_key(spec(context)) != before


def _registry_up() -> bool:
    try:
        return requests.get(f"http://{REGISTRY}/v2/", timeout=3).status_code == 200
    except requests.RequestException:
        return False


PASSED = {
    "schema_version": 1,
    "passed": True,
    "checks": [{"name": "import", "status": "passed"}],
    "image_id": "sha256:" + "d" * 64,
}


@pytest.mark.skipif(not _registry_up(), reason=f"no registry answers at {REGISTRY} (scripts/setup.sh starts it)")
def test_reuse_record_round_trips_through_the_registry_and_refuses_a_failed_smoke() -> None:
    from imagebuild.engine.registry import Registry, RepoRef

    repo = RepoRef.parse(f"{REGISTRY}/h8-ik-{uuid.uuid4().hex[:8]}")
    registry = Registry(repo)
    base = RepoRef.parse(f"{REGISTRY}/imagebuild-base/debian")
    digest = registry.digest(base.repo, "bookworm-arm64")
    if digest is None:
        pytest.skip("the loopback registry has no imagebuild-base/debian:bookworm-arm64 (scripts/setup.sh pushes it)")
    digest = registry.copy(base.repo, digest, repo.repo, "staged")  # a staged image of our own
    key = "e" * 64
    passed = {**PASSED, "image_id": digest}  # smoked on the containerd store: the manifest digest is the image ID
    try:
        assert find_reusable(registry, repo.repo, key) is None
        with pytest.raises(ConfigError, match="did not pass"):
            record_smoked(registry, repo.repo, key, digest, {**passed, "passed": False})
        with pytest.raises(ConfigError, match="is for sha256:d"):
            record_smoked(registry, repo.repo, key, digest, PASSED)  # a passing report of another image
        assert find_reusable(registry, repo.repo, key) is None
        record_smoked(registry, repo.repo, key, digest, passed)
        found = find_reusable(registry, repo.repo, key)
        assert found is not None and found.ref == f"{repo.host}/{repo.repo}@{digest}"
        assert found.report["image_id"] == digest
        assert find_reusable(registry, repo.repo, "f" * 64) is None  # another key: nothing to reuse
    finally:
        for tag in ("staged", "ik-" + key):
            found_digest = registry.digest(repo.repo, tag)
            if found_digest:
                registry.delete_manifest(repo.repo, found_digest)


def test_the_wheelhouse_the_build_fills_counts_by_the_wheels_staged_not_by_what_the_folder_holds(context: Path) -> None:
    """Seen on two real nodes: a key taken before the first build (no build/wheelhouse yet) differed from the one
    taken after it, so nothing was ever reused. The staged wheels are hashed at their source instead."""
    text = DOCKERFILE + "RUN --mount=type=bind,source=build/wheelhouse,target=/wheelhouse true\n"
    (context / "dockerfiles" / "t" / "Dockerfile").write_text(text)
    wheel = context / "src-wheels" / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
    wheel.parent.mkdir()
    wheel.write_bytes(b"wheel one")
    before = input_key(spec(context, wheels=[wheel]))
    (context / "build" / "wheelhouse").mkdir(parents=True)
    shutil.copy(wheel, context / "build" / "wheelhouse" / wheel.name)  # what buildkit.prepare stages
    (context / "build" / "wheelhouse" / "other-target.whl").write_bytes(b"staged by another target")
    assert input_key(spec(context, wheels=[wheel])) == before
    wheel.write_bytes(b"wheel two")
    assert input_key(spec(context, wheels=[wheel])) != before
