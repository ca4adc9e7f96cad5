"""Every container imagebuild runs writes no core file (issue 31): torch's aarch64 build crashed under qemu-user in
the CUDA image's emulated smoke, and the core dump of that 10 GB process, written into the container's layer, filled
the host's disk. Checked on the real engine: the limit the container's shell sees through DockerEngine.run (the
coverage scan's `docker run` passes `--ulimit core=0` too)."""

from __future__ import annotations

import pytest

from imagebuild.engine import docker as engine_mod
from imagebuild.engine.interface import RunSpec
from imagebuild.engine.sdk import DockerEngine

pytestmark = pytest.mark.docker
BASE = "local/debian:bookworm"  # scripts/setup.sh


def test_a_container_run_by_the_engine_has_no_core_files(engine: str) -> None:
    client = engine_mod.docker_client()
    try:
        client.images.get(BASE)
    except Exception:  # noqa: BLE001 - the SDK's NotFound and connection errors alike
        pytest.skip(f"{BASE} is not here (scripts/setup.sh makes it)")
    result = DockerEngine(client).run(RunSpec(BASE, command=("-c", "ulimit -c; ulimit -Hc"), entrypoint=("sh",)))
    assert result.exit_code == 0 and result.stdout.decode().split() == ["0", "0"], result
