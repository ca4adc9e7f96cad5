"""Builds record the lock they were built from (io.imagebuild.lock); publish refuses (exit 5) an image built from
unlocked inputs unless --allow-unlocked, and the provenance records the lock."""

from __future__ import annotations

import io
import json
import uuid
from pathlib import Path

import pytest

from imagebuild.lock import stages
from imagebuild.matrix import load_matrix
from imagebuild.matrix.oci import for_oci
from imagebuild.release import attest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def matrix():
    return load_matrix(REPO / "matrix.yaml")


def _placed(matrix, name: str, oci: str = "linux/amd64"):
    return for_oci(matrix.target(name), matrix.model.oci_platforms, oci)


def _label(matrix, name: str) -> dict:
    dockerfile = (REPO / "dockerfiles" / name / "Dockerfile").read_text()
    return json.loads(stages.label(REPO, _placed(matrix, name), dockerfile)[stages.LABEL])


def test_the_build_label_names_the_lock_and_what_it_left_unpinned(matrix) -> None:
    cpu = _label(matrix, "local-cpu")
    lock = json.loads((REPO / "matrix.lock.json").read_text())
    assert cpu["unlocked"] == [] and len(cpu["sha256"]) == 64  # local bases count as pinned (recorded as local)
    rocm = _label(matrix, "rocm6.1-torch2.3")
    expected = sorted(
        k for k in lock["targets"]["rocm6.1-torch2.3"]["linux/amd64"] if lock["inputs"][k]["status"] == "unresolved"
    )
    assert rocm["unlocked"] == expected and expected  # this machine reaches neither Docker Hub nor GitHub


def test_an_image_with_one_unhashed_pip_step_is_not_called_fully_locked(matrix) -> None:
    """The label of a build records its Dockerfile's pip steps that were not from a hashed set; publish calls an
    image fully locked only when every input is pinned AND that list is empty."""
    cpu = _placed(matrix, "local-cpu")
    committed = (REPO / "dockerfiles" / "local-cpu" / "Dockerfile").read_text()
    record, refusal = stages.publish_gate(stages.label(REPO, cpu, committed))
    assert (record["state"], record["unhashed"], refusal) == ("locked", [], None)  # every step hashed or local
    # the same Dockerfile with one step that resolves from the index without hashes
    one_more = committed.replace(
        "FROM base AS final-amd64\n", "FROM base AS final-amd64\nRUN pip install --no-deps requests==2.31.0\n", 1
    )
    assert one_more != committed
    labels = stages.label(REPO, cpu, one_more)
    assert json.loads(labels[stages.LABEL])["unhashed"] == ["final-amd64: pip install --no-deps requests==2.31.0"]
    record, refusal = stages.publish_gate(labels)
    assert record["state"] == "unlocked" and record["unlocked"] == []
    assert (
        refusal == "1 pip step(s) of its Dockerfile were not from a hashed set: final-amd64: pip install --no-deps "
        "requests==2.31.0"
    )


def test_the_seed_labels_name_the_steps_the_lock_cannot_hash_yet(matrix) -> None:
    """rocm6.1-torch2.3: the torch source build's requirements, the built wheel's requirements and
    pytorch-triton-rocm (GitHub and download.pytorch.org do not answer here); the server steps are hashed."""
    rocm = _label(matrix, "rocm6.1-torch2.3")
    assert [s.split(":")[0] for s in rocm["unhashed"]] == ["torch-build", "torch", "torch"]
    cuda = _label(matrix, "cuda12.1-torch2.3")
    assert [s.split(":")[0] for s in cuda["unhashed"]] == ["torch"]


def test_no_lock_file_means_everything_is_unlocked(tmp_path: Path, matrix) -> None:
    assert stages.unlocked(tmp_path, _placed(matrix, "local-cpu")) == (None, ["matrix.lock.json"])


@pytest.mark.parametrize(
    ("labels", "state", "refused"),
    [
        ({stages.LABEL: '{"sha256":"ab","unlocked":[],"unhashed":[]}'}, "locked", False),
        # every input pinned, but one pip step resolved live: not fully locked
        ({stages.LABEL: '{"sha256":"ab","unlocked":[],"unhashed":["final: pip install x"]}'}, "unlocked", True),
        # a record that does not list its pip steps cannot say they were all hashed
        ({stages.LABEL: '{"sha256":"ab","unlocked":[]}'}, "unlocked", True),
        ({stages.LABEL: '{"sha256":"ab","unlocked":[],"unhashed":"x"}'}, "unreadable", True),
        ({stages.LABEL: '{"sha256":"ab","unlocked":["image:rust:1.78.0-bookworm"]}'}, "unlocked", True),
        ({"io.imagebuild.target": "local-cpu"}, "unrecorded", True),  # an imagebuild build without the record
        ({stages.LABEL: "not json"}, "unreadable", True),
        ({}, "unknown", False),  # not built by imagebuild: no claim either way
    ],
)
def test_publish_gate(labels: dict[str, str], state: str, refused: bool) -> None:
    record, refusal = stages.publish_gate(labels)
    assert record["state"] == state and (refusal is not None) == refused


def test_provenance_records_the_lock() -> None:
    labels = {"io.imagebuild.target": "x", stages.LABEL: '{"sha256":"ab","unlocked":["git:u@c"]}'}
    predicate = attest.provenance(labels, {}, "matrix.yaml", {})
    lock = predicate["buildDefinition"]["externalParameters"]["lock"]
    assert lock["state"] == "unlocked" and lock["unlocked"] == ["git:u@c"] and "refused_because" in lock


@pytest.fixture
def labelled_image():
    """A scratch image carrying imagebuild's target label and a lock record listing one unlocked input."""
    docker = pytest.importorskip("docker")
    try:
        client = docker.from_env(timeout=30)
        client.ping()
    except Exception as exc:  # no engine here: the unit tests above still ran
        pytest.skip(f"no container engine: {exc}")
    tag = f"imagebuild-h23:unlocked-{uuid.uuid4().hex[:8]}"
    record = json.dumps({"sha256": "ab", "unlocked": ["image:rust:1.78.0-bookworm"]}).replace('"', '\\"')
    dockerfile = f'FROM scratch\nLABEL io.imagebuild.target="local-cpu" io.imagebuild.lock="{record}"\n'
    image, _ = client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=tag, rm=True)
    yield tag
    client.images.remove(image.id, force=True)


@pytest.mark.docker
def test_publish_refuses_an_image_built_from_unlocked_inputs(labelled_image: str, cli, tmp_path: Path) -> None:
    out = tmp_path / "publish-report.json"
    dest = ("--registry", "127.0.0.1:9/never", "--allow-unsmoked", "--out", str(out))  # port 9: nothing listens
    refused = cli("publish", labelled_image, *dest)
    assert refused.exit_code == 5 and refused.exception is None
    assert "built from 1 unlocked input(s): image:rust:1.78.0-bookworm" in refused.stderr
    assert json.loads(out.read_text())["ok"] is False
    allowed = cli("publish", labelled_image, *dest, "--allow-unlocked")
    assert "(--allow-unlocked)" in allowed.stderr and "unlocked input(s)" not in allowed.stderr.split("error:")[-1]
    report = json.loads(out.read_text())
    assert report["lock"]["state"] == "unlocked" and report["lock"]["allowed_by"] == "--allow-unlocked"
