"""Issue 34, the CLI under signals and odd input: SIGTERM to `imagebuild smoke` cleans up as SIGINT does.

`docker stop`, systemd, a CI runner's cancel and `timeout` send SIGTERM; round four found that it left the smoke
container, its anonymous volume and the `.smoke-*` folder behind. The smoke here runs for real on the engine,
in an image FROM the local base whose `python3` sleeps (the suite never finishes) and which carries `VOLUME /data`
as every image built here does; the signal arrives while the CLI waits for the container.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BASE = "local/debian:bookworm"
CLI = [sys.executable, "-c", "import sys; from imagebuild.cli import main; sys.exit(main())"]


def _docker(*args: str, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, check=False)


def _build(ctx: Path, tag: str) -> None:
    """docker build of a small test image from the local base (BuildKit, host network)."""
    built = subprocess.run(
        ["docker", "build", "-q", "--network", "host", "-t", tag, str(ctx)],
        capture_output=True,
        text=True,
        env={**os.environ, "DOCKER_BUILDKIT": "1"},
        timeout=600,
        check=False,
    )
    assert built.returncode == 0, built.stderr


@pytest.fixture(scope="module")
def sleeping_image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """FROM the local base: a `python3` that sleeps (the smoke suite that never ends) and VOLUME /data."""
    if _docker("version", "--format", "{{.Server.Version}}", timeout=30).returncode != 0:
        pytest.skip("no Docker engine answers; run scripts/setup.sh")
    ctx = tmp_path_factory.mktemp("sleeping")
    (ctx / "python3").write_text("#!/bin/sh\nexec sleep 600\n")
    (ctx / "Dockerfile").write_text(
        f"FROM {BASE}\nCOPY --chmod=755 python3 /usr/local/bin/python3\nRUN mkdir -p /data\nVOLUME /data\n"
    )
    tag = f"imagebuild-h34cli:sleeping-{uuid.uuid4().hex[:8]}"
    _build(ctx, tag)
    yield tag
    _docker("rmi", "-f", tag)


def _containers(image: str, every: bool = True) -> list[str]:
    args = ["ps", "-q", "--no-trunc", "--filter", f"ancestor={image}"]
    return _docker(*args, *(["-a"] if every else [])).stdout.split()


def _volumes(container: str) -> list[str]:
    out = _docker("inspect", "--format", "{{range .Mounts}}{{if .Name}}{{.Name}} {{end}}{{end}}", container).stdout
    return out.split()


@pytest.mark.docker
@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_during_smoke_removes_the_container_its_volume_and_the_smoke_folder(
    sleeping_image: str, tmp_path: Path, sig: signal.Signals, code: int
) -> None:
    reports = tmp_path / "reports"
    before = set(_containers(sleeping_image))  # another case's leftovers (on a failure) are not this one's
    argv = [*CLI, "smoke", sleeping_image, "--gpu", "none", "--report", str(reports / "report.json")]
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        running: list[str] = []
        while not running and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.3)
            running = [c for c in _containers(sleeping_image, every=False) if c not in before]
        assert running, f"no smoke container started: {proc.poll()} {proc.stderr.read() if proc.stderr else ''}"
        volumes = _volumes(running[0])
        assert volumes, "the image's VOLUME /data made no volume: nothing would be checked"
        assert [p.name for p in reports.glob(".smoke-*")], "the smoke folder was not made"
        proc.send_signal(sig)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    assert proc.returncode == code, stderr[-2000:]
    assert stderr.strip().splitlines()[-1].startswith("error: "), stderr[-2000:]
    assert "Traceback" not in stderr
    assert running[0] not in _containers(sleeping_image), "the smoke container is still there"
    left = [v for v in volumes if _docker("volume", "inspect", v).returncode == 0]
    assert left == [], f"its anonymous volume is still there: {left}"
    assert list(reports.glob(".smoke-*")) == [], "the .smoke-* folder is still there"


@pytest.mark.docker
def test_an_interrupt_between_create_and_its_answer_still_removes_the_container(
    sleeping_image: str, tmp_path: Path
) -> None:
    """The signal lands after the engine created the container but before the SDK returned it to run_smoke:
    the real engine creates it, then the interrupt is raised there (what SIGTERM does at that instant)."""
    from imagebuild.engine.docker import docker_client
    from imagebuild.engine.sdk import DockerEngine
    from imagebuild.prove.smoke import run_smoke
    from imagebuild.signals import Terminated

    client = docker_client()

    class Interrupted:  # the real engine's containers, whose create returns only after the signal
        def __getattr__(self, name: str) -> object:
            return getattr(client.containers, name)

        def create(self, *args: object, **kwargs: object) -> object:
            client.containers.create(*args, **kwargs)
            raise Terminated()

    class Client:
        containers = Interrupted()
        images = client.images

    engine = DockerEngine(Client())
    image = engine.image(sleeping_image)
    report = tmp_path / "reports" / "report.json"
    with pytest.raises(Terminated):
        run_smoke(engine, image, "none", report, report.with_name("junit.xml"), sleeping_image)
    assert _containers(sleeping_image) == [], "the container created before the interrupt is still there"
    assert list(report.parent.glob(".smoke-*")) == []


# --- terminal controls from files are printed as `?`, never acted on (issue 34, LOW) -----------------------

CONTROLS = "\x1b[2J\x1b]0;owned\x07\x9b31m\u202e"  # clear screen, OSC retitle + BEL, C1 CSI, a bidi override
HOSTILE_CSV = (
    f"Validator,PT_VERSION,2.5.0{CONTROLS}\n"
    f"Validator,GCN_ARCH_NAME{CONTROLS},gfx942\n"
    f"GemmTunableOp_Half_TN,tn_8192_7_28672,Gemm_Rocblas_1{CONTROLS}\x00,0.09\n"
)


def _no_controls(text: str) -> None:
    assert not [c for c in text if not c.isprintable() and c != "\n"], repr(text[:400])


@pytest.mark.parametrize(
    "args",
    [
        ("inspect",),
        ("check", "--expect", f"PT_VERSION=2.5.0{CONTROLS}"),  # matched: the value is printed
        ("check", "--expect", "PT_VERSION=2.6.0"),  # differs: named in a problem and the error line
    ],
)
def test_tunableop_prints_a_files_control_characters_as_question_marks(cli, tmp_path: Path, args) -> None:  # noqa: ANN001
    results = tmp_path / "tunableop_results0.csv"
    results.write_text(HOSTILE_CSV)
    out = cli("tunableop", *args[:1], str(results), *args[1:])
    assert out.exception is None and out.exit_code in (0, 1), out.stdout + out.stderr
    _no_controls(out.stdout)
    _no_controls(out.stderr)
    assert ("Gemm_Rocblas_1" if args[0] == "inspect" else "PT_VERSION") in out.stdout


def test_tunableop_merge_names_differing_validators_without_their_controls(cli, tmp_path: Path) -> None:  # noqa: ANN001
    one, two = tmp_path / "a.csv", tmp_path / "b.csv"
    one.write_text(HOSTILE_CSV)
    two.write_text(HOSTILE_CSV.replace("GCN_ARCH_NAME", "GCN_ARCH_NAMF"))
    out = cli("tunableop", "merge", "--out", str(tmp_path / "m.csv"), str(one), str(two))
    assert out.exit_code == 1 and "validators differ" in out.stderr, out.stdout + out.stderr
    _no_controls(out.stderr)


# --- kernels explain --table: a file that is not a regular file is refused, not "no table installed" -------


@pytest.mark.parametrize("kind", ["/dev/zero", "fifo", "missing", "oversize"])
def test_kernels_explain_refuses_a_table_that_is_not_a_readable_file(cli_subprocess, tmp_path: Path, kind: str) -> None:  # noqa: ANN001
    table = {"/dev/zero": Path("/dev/zero"), "missing": tmp_path / "none.json"}.get(kind, tmp_path / "t.json")
    if kind == "fifo":
        os.mkfifo(table)
    elif kind == "oversize":
        table.write_bytes(b" " * ((16 << 20) + 1))
    out = cli_subprocess("kernels", "explain", "4096", "4096", "1", "fp16", "--table", str(table))
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert out.exit_code == 2 and len(errors) == 1 and str(table) in errors[0], out.stdout + out.stderr
    assert "no measured table" not in out.stdout and "Traceback" not in out.stderr


def test_kernels_explain_refuses_a_fifo_named_by_the_environment(cli_subprocess, tmp_path: Path) -> None:  # noqa: ANN001
    fifo = tmp_path / "table.json"
    os.mkfifo(fifo)
    out = cli_subprocess("kernels", "explain", "4096", "4096", "1", "fp16", env={"IMAGEBUILD_SKINNY_TABLE": str(fifo)})
    assert out.exit_code == 2 and "IMAGEBUILD_SKINNY_TABLE" in out.stderr and "FIFO" in out.stderr, out.stderr


def _image_whose_python_prints(tmp_path: Path, text: str) -> str:
    """FROM the local base: a `python3` that prints `text` and exits 0 (the image's torch probe's answer)."""
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "answer").write_text(text)
    (ctx / "python3").write_text("#!/bin/sh\ncat /answer\n")
    (ctx / "Dockerfile").write_text(f"FROM {BASE}\nCOPY answer /answer\nCOPY --chmod=755 python3 /usr/local/bin/\n")
    tag = f"imagebuild-h34cli:probe-{uuid.uuid4().hex[:8]}"
    _build(ctx, tag)
    return tag


@pytest.mark.docker
@pytest.mark.parametrize(
    "answer",
    [
        'IMAGEBUILD-JSON {"torch": "2.5.0\\u001b]0;owned\\u0007", "error": "\\u001b[2Jno GPU\\u0000"}\n',
        "IMAGEBUILD-JSON [1, 2]\n",  # not an object: as if the image said nothing
        "IMAGEBUILD-JSON {not json\n",
    ],
)
def test_tunableop_check_prints_what_an_image_says_without_its_controls(
    sleeping_image: str, cli_subprocess, tmp_path: Path, answer: str
) -> None:  # noqa: ANN001
    tag = _image_whose_python_prints(tmp_path, answer)
    try:
        results = tmp_path / "r.csv"
        results.write_text("Validator,PT_VERSION,2.5.0\nGemmTunableOp_Half_TN,tn_8192_7_28672,Gemm_Rocblas_1,0.09\n")
        out = cli_subprocess("tunableop", "check", str(results), "--image", tag, "--gpu", "none")
        assert "Traceback" not in out.stderr and out.exit_code in (0, 1, 2), out.stdout + out.stderr
        _no_controls(out.stdout)
        _no_controls(out.stderr)
    finally:
        _docker("rmi", "-f", tag)


# --- ports: 1 to 65535, wherever one is parsed -------------------------------------------------------------


@pytest.mark.parametrize("port", ["99999", "65536", "0"])
def test_a_registry_port_outside_1_to_65535_is_refused(cli, port: str) -> None:  # noqa: ANN001
    from imagebuild.engine.registry import RepoRef

    with pytest.raises(ValueError, match="port outside 1 to 65535"):
        RepoRef.parse(f"127.0.0.1:{port}/imagebuild")
    out = cli("verify", f"127.0.0.1:{port}/x:y", "--key", "/dev/null")
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert out.exit_code == 2 and len(errors) == 1 and "port is not 1 to 65535" in errors[0], out.stderr
    assert RepoRef.parse("[::1]:65535/imagebuild").host == "[::1]:65535"
