"""Issue 21, class 8: every container the tool creates is removed with its anonymous volumes, on every path.

Two images carry `VOLUME /data` (as every image built here does): one without python3 (each probe fails to
start) and the local-cpu image when present (a probe that runs and passes). Each path is driven through the real
code: `imagebuild smoke` (start fails), the TunableOp probe and a run through `engine.run_removed` (start fails;
runs and exits 0; exits 1), `imagebuild coverage` and the SBOM collector (`docker run --rm` CLIs). Accounting is
by the engine's own event stream over the test's time window, so other helpers' containers on this shared
engine do not count: every container created from these images, and every volume mounted into one of them, must
be gone afterwards.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from e2e_helpers import CLI, DOCKER

LOCAL_CPU = "imagebuild-h21:local-cpu"


def _docker(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([DOCKER, *args], capture_output=True, text=True, timeout=300, check=False)


@pytest.fixture(scope="module")
def no_python(engine: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    ctx = tmp_path_factory.mktemp("img")
    tag = f"imagebuild-h21:volume-nopython-{uuid.uuid4().hex[:6]}"
    (ctx / "Dockerfile").write_text("FROM local/debian:bookworm\nVOLUME /data\n")
    built = subprocess.run(
        [DOCKER, "build", "-q", "--network", "host", "-t", tag, str(ctx)],
        capture_output=True,
        text=True,
        env={"DOCKER_BUILDKIT": "1", "PATH": "/usr/bin:/bin"},
        check=False,
    )
    assert built.returncode == 0, built.stderr
    yield tag
    _docker("rmi", "-f", tag)


def _created_and_mounted(since: float, until: float, images: set[str]) -> tuple[set[str], set[str]]:
    """Containers created from `images` in [since, until] and the volumes mounted into them (engine events)."""
    out = _docker("events", "--since", f"{since:.3f}", "--until", f"{until:.3f}", "--format", "{{json .}}")
    containers: set[str] = set()
    mounts: list[tuple[str, str]] = []
    for line in out.stdout.splitlines():
        event = json.loads(line)
        attrs = (event.get("Actor") or {}).get("Attributes") or {}
        if event.get("Type") == "container" and event.get("Action") == "create" and attrs.get("image") in images:
            containers.add(event["Actor"]["ID"])
        if event.get("Type") == "volume" and event.get("Action") == "mount":
            mounts.append((event["Actor"]["ID"], attrs.get("container", "")))
    return containers, {volume for volume, container in mounts if container in containers}


def test_every_path_removes_its_container_and_anonymous_volume(no_python: str, tmp_path: Path) -> None:
    from imagebuild.engine import docker as engine
    from imagebuild.tunableop import tune

    images = {no_python}
    client = engine.docker_client()
    since = time.time() - 1
    # 1. imagebuild smoke IMAGE: the smoke container cannot start (no python3)
    smoke = subprocess.run(
        [*CLI, "smoke", no_python, "--gpu", "none", "--report", str(tmp_path / "smoke" / "report.json")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert smoke.returncode != 0 and "could not start the smoke container" in smoke.stderr, smoke.stderr
    # 2. the TunableOp probe (was containers.run(remove=True): a failed start stayed Created)
    assert tune._run_probe(client, no_python, "none") is None
    # 3. imagebuild coverage IMAGE (docker run --rm): an image without python3 is "not scanned"
    subprocess.run([*CLI, "coverage", no_python, "--json"], capture_output=True, text=True, timeout=300)
    # 4. run_removed: runs and exits 0, exits 1 (the local-cpu image, when built here)
    if _docker("image", "inspect", LOCAL_CPU).returncode == 0:
        images.add(LOCAL_CPU)
        ok = engine.run_removed(client, LOCAL_CPU, entrypoint=["python3"], command=["-c", "print('ran')"])
        bad = engine.run_removed(client, LOCAL_CPU, entrypoint=["python3"], command=["-c", "raise SystemExit(1)"])
        assert (ok.exit_code, ok.stdout.strip(), bad.exit_code) == (0, b"ran", 1)
    time.sleep(1)
    containers, volumes = _created_and_mounted(since, time.time(), images)
    assert len(containers) >= 2, containers  # the smoke container and the probe, at least
    left = [c for c in containers if _docker("container", "inspect", c).returncode == 0]
    assert left == [], f"containers left behind: {left}"
    kept = [v for v in volumes if _docker("volume", "inspect", v).returncode == 0]
    assert kept == [], f"anonymous volumes left behind: {kept}"
    for image in images:
        assert _docker("ps", "-a", "-q", "--filter", f"ancestor={image}").stdout.strip() == ""


def test_a_created_never_started_container_leaves_no_volume(no_python: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """signing.read_image_file reads a file from a created container: its create makes the /data volume (no
    mount event: accounted through the container's own Mounts, recorded as it is created)."""
    from docker.models.containers import ContainerCollection

    from imagebuild.engine import docker as engine
    from imagebuild.release import signing

    seen: list[str] = []
    create = ContainerCollection.create

    def recording(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202 - the real create, volumes noted
        container = create(self, *args, **kwargs)
        container.reload()
        seen.extend(m["Name"] for m in container.attrs.get("Mounts", []) if m.get("Type") == "volume")
        return container

    monkeypatch.setattr(ContainerCollection, "create", recording)
    assert signing.read_image_file(engine.docker_client(), no_python, "/etc/debian_version")
    assert seen, "the test image declares VOLUME /data: its create made a volume"
    assert [v for v in seen if _docker("volume", "inspect", v).returncode == 0] == []
