"""Issue 21, class 8: every container the tool creates is removed with its anonymous volumes, on every path.

Two images carry `VOLUME /data` (as every image built here does): one without python3 (each probe fails to
start) and the local-cpu image when present (a probe that runs and passes). Each path is driven through the real
code: `imagebuild smoke` (start fails), the TunableOp probe and a run through `DockerEngine.run` (start fails;
runs and exits 0; exits 1), `imagebuild coverage` (a `docker run --rm` that fails, then a created, never
started container exported) and the SBOM collector (the same two for an image without python3). Accounting is
by the engine's own event stream over the test's time window, so other helpers' containers on this shared
engine do not count: every container created from these images, and every volume mounted into one of them, must
be gone afterwards; each path must have created at least one of them.

A container's `image` attribute in the events is the reference it was created from, as given (both engines):
the image ID (`sha256:...`) for smoke and coverage, which create from the ID they resolved, the tag for the probe
and the SBOM collector here; so both are matched. A container created and never started has no volume mount
event: its volume is known by its content, a token the test image keeps in /data (copied into each anonymous
volume at create).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from e2e_helpers import CLI, DOCKER

LOCAL_CPU = "imagebuild-h21:local-cpu"
BASE = "local/debian:bookworm"
OWNER_FILE = "/data/.imagebuild-h21-owner"
TOKEN = uuid.uuid4().hex


def _docker(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([DOCKER, *args], capture_output=True, text=True, timeout=300, check=False)


@pytest.fixture(scope="module")
def no_python(engine: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    ctx = tmp_path_factory.mktemp("img")
    tag = f"imagebuild-h21:volume-nopython-{uuid.uuid4().hex[:6]}"
    (ctx / "Dockerfile").write_text(f"FROM {BASE}\nRUN mkdir -p /data && echo {TOKEN} > {OWNER_FILE}\nVOLUME /data\n")
    where = {"DOCKER_HOST": os.environ["DOCKER_HOST"]} if "DOCKER_HOST" in os.environ else {}  # docker20 too
    built = subprocess.run(
        [DOCKER, "build", "-q", "--network", "host", "-t", tag, str(ctx)],
        capture_output=True,
        text=True,
        env={"DOCKER_BUILDKIT": "1", "PATH": "/usr/bin:/bin", **where},
        check=False,
    )
    assert built.returncode == 0, built.stderr
    yield tag
    _docker("rmi", "-f", tag)


def _references(images: set[str]) -> set[str]:
    """The names and the IDs of `images`: what a container event's `image` attribute may say."""
    ids = {_docker("image", "inspect", "--format", "{{.Id}}", image).stdout.strip() for image in images}
    return images | (ids - {""})


@dataclass
class Seen:
    created: dict[str, int] = field(default_factory=dict)  # container ID -> its create's timeNano
    mounted: set[str] = field(default_factory=set)  # volumes mounted into those containers
    volumes: set[str] = field(default_factory=set)  # every volume created in the window (anyone's)


def _events(since: float, until: float, images: set[str]) -> Seen:
    """Containers created from `images` in [since, until], their volumes, the window's volumes (engine events)."""
    out = _docker("events", "--since", f"{since:.3f}", "--until", f"{until:.3f}", "--format", "{{json .}}")
    references, seen, mounts = _references(images), Seen(), []
    for line in out.stdout.splitlines():
        event = json.loads(line)
        actor, kind, action = event.get("Actor") or {}, event.get("Type"), event.get("Action")
        attrs = actor.get("Attributes") or {}
        if kind == "container" and action == "create" and attrs.get("image") in references:
            seen.created[actor["ID"]] = int(event["timeNano"])
        elif kind == "volume" and action == "create":
            seen.volumes.add(actor["ID"])
        elif kind == "volume" and action == "mount":
            mounts.append((actor["ID"], attrs.get("container", "")))
    seen.mounted = {volume for volume, container in mounts if container in seen.created}
    return seen


def _left_with_our_token(volumes: set[str]) -> list[str]:
    """Of `volumes`, those still there, used by no container, holding this test's token: left by our images."""
    dangling = set(_docker("volume", "ls", "-q", "--filter", "dangling=true").stdout.split())
    read = ["run", "--rm", "--network", "none", "--entrypoint", "cat"]
    return [
        volume
        for volume in sorted(volumes & dangling)
        if _docker(*read, "-v", f"{volume}:/data:ro", BASE, OWNER_FILE).stdout.strip() == TOKEN
    ]


def _per_step(seen: Seen, marks: list[tuple[str, float]]) -> dict[str, int]:
    """How many of the containers seen each step created (a step's window ends at its mark)."""
    counts = dict.fromkeys((step for step, _ in marks), 0)
    for created in seen.created.values():
        step = next((step for step, mark in marks if created <= mark * 1e9), None)
        if step is not None:
            counts[step] += 1
    return counts


def _drive_every_path(image: str, tmp_path: Path, marks: list[tuple[str, float]]) -> set[str]:
    """Each path once against `image` (and the local-cpu image when present); the images used."""
    from imagebuild.engine import docker as engine
    from imagebuild.engine.interface import RunSpec
    from imagebuild.engine.sdk import docker_engine
    from imagebuild.release import sbom_image
    from imagebuild.tunableop import tune

    client = docker_engine()
    # 1. imagebuild smoke IMAGE: the smoke container cannot start (no python3)
    report = str(tmp_path / "smoke" / "report.json")
    argv = [*CLI, "smoke", image, "--gpu", "none", "--report", report]
    smoke = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert smoke.returncode != 0 and "could not start the smoke container" in smoke.stderr, smoke.stderr
    marks.append(("smoke", time.time()))
    # 2. the TunableOp probe (was containers.run(remove=True): a failed start stayed Created)
    assert tune._run_probe(client, image, "none") is None
    marks.append(("probe", time.time()))
    # 3. imagebuild coverage IMAGE: `docker run --rm` fails (no python3), the exported filesystem is scanned
    coverage = subprocess.run([*CLI, "coverage", image, "--json"], capture_output=True, text=True, timeout=300)
    assert coverage.returncode == 0, coverage.stderr
    marks.append(("coverage", time.time()))
    # 4. the SBOM collector: `docker run --rm` fails, the files are read from a created, never started container
    assert sbom_image.collect(engine.find_engine(), image, {}).dpkg
    marks.append(("sbom", time.time()))
    if _docker("image", "inspect", LOCAL_CPU).returncode != 0:
        return {image}
    # 5. DockerEngine.run: runs and exits 0, exits 1 (the local-cpu image, when built here)
    ok = client.run(RunSpec(LOCAL_CPU, entrypoint=("python3",), command=("-c", "print('ran')")))
    bad = client.run(RunSpec(LOCAL_CPU, entrypoint=("python3",), command=("-c", "raise SystemExit(1)")))
    assert (ok.exit_code, ok.stdout.strip(), bad.exit_code) == (0, b"ran", 1)
    marks.append(("run_removed", time.time()))
    return {image, LOCAL_CPU}


def test_every_path_removes_its_container_and_anonymous_volume(no_python: str, tmp_path: Path) -> None:
    since, marks = time.time() - 1, []
    images = _drive_every_path(no_python, tmp_path, marks)
    time.sleep(1)
    seen = _events(since, time.time(), images)
    per_step = _per_step(seen, marks)
    assert all(per_step.values()), f"a path created no container the events show: {per_step}"
    assert per_step.get("run_removed", 2) == 2, per_step  # exit 0 and exit 1, when the local-cpu image is here
    left = [c for c in seen.created if _docker("container", "inspect", c).returncode == 0]
    assert left == [], f"containers left behind: {left}"
    kept = [v for v in seen.mounted if _docker("volume", "inspect", v).returncode == 0]
    assert kept == [], f"anonymous volumes left behind: {kept}"
    dangling = _left_with_our_token(seen.volumes)
    assert dangling == [], f"volumes of created, never started containers left behind: {dangling}"
    for image in images:
        assert _docker("ps", "-a", "-q", "--filter", f"ancestor={image}").stdout.strip() == ""


def test_a_created_never_started_container_leaves_no_volume(no_python: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """ContainerEngine.read_file (signing's SBOM and manifest) reads a file from a created container: its create
    makes the /data volume (no mount event: accounted through the container's own Mounts, recorded as it is
    created)."""
    from docker.models.containers import ContainerCollection

    from imagebuild.engine.sdk import docker_engine

    seen: list[str] = []
    create = ContainerCollection.create

    def recording(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202 - the real create, volumes noted
        container = create(self, *args, **kwargs)
        container.reload()
        seen.extend(m["Name"] for m in container.attrs.get("Mounts", []) if m.get("Type") == "volume")
        return container

    monkeypatch.setattr(ContainerCollection, "create", recording)
    assert docker_engine().read_file(no_python, "/etc/debian_version")
    assert seen, "the test image declares VOLUME /data: its create made a volume"
    assert [v for v in seen if _docker("volume", "inspect", v).returncode == 0] == []
