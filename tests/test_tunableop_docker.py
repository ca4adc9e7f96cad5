"""TunableOp against real images in a real engine: `check --image` and `bake` (no GPU here, so the
validators come from the image's torch without a GPU, or from its manifest, and what cannot be known is
reported)."""

from __future__ import annotations

import io
import json
import os
import shutil
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from imagebuild.cli import main
from imagebuild.tunableop import results as top
from imagebuild.tunableop import shapes as ts

pytestmark = pytest.mark.docker

DATA = Path(__file__).parent / "data" / "tunableop"
CUDA = DATA / "cuda_h200_torch2.11.csv"
ROCM0 = DATA / "rocm_gfx942_dev0.csv"
PREFIX = "imagebuild-test/tunableop"
BASE = "local/debian:bookworm"


@pytest.fixture(scope="module")
def engine() -> Iterator[Any]:
    docker = pytest.importorskip("docker")
    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException as exc:
        why = f"no container engine answers (DOCKER_HOST={os.environ.get('DOCKER_HOST')!r}): {exc}"
        if os.environ.get("IMAGEBUILD_REQUIRE_ENGINE") == "1":  # CI (scripts/test.sh) starts one
            pytest.fail(why)
        pytest.skip(why)
    yield client
    for image in client.images.list(name=PREFIX):
        for tag in image.tags:
            if tag.startswith(PREFIX) and "-derived" in tag:
                client.images.remove(tag, force=True)


def build(client: Any, tag: str, dockerfile: str, files: dict[str, bytes | Path]) -> str:
    with tempfile.TemporaryDirectory() as ctx:
        for name, content in files.items():
            if isinstance(content, Path):
                shutil.copy(content, Path(ctx, name))
            else:
                Path(ctx, name).write_bytes(content)
        Path(ctx, "Dockerfile").write_text(dockerfile)
        client.images.build(path=ctx, tag=tag, rm=True, network_mode="host", pull=False)
    return tag


def manifest(kind: str, torch_version: str, arches: list[str]) -> bytes:
    doc = {
        "schema_version": 1,
        "target": f"test-{kind}",
        "platform": {"name": kind, "kind": kind, "version": "x", "base_image": "scratch", "base_digest": None},
        "torch": {"version": torch_version, "obtained": "wheel", "patches": []},
        "gpu_arches": arches,
        "tunableop": {"enabled": True, "tuning": False, "filename": "/data/tunableop/tunableop_results%d.csv"},
        "versions": {"torch": torch_version, "python": "3.11"},
    }
    return json.dumps(doc).encode()


@pytest.fixture(scope="module")
def cuda_manifest_image(engine: Any) -> str:
    dockerfile = "FROM scratch\nCOPY manifest.json /opt/imagebuild/manifest.json\n"
    return build(
        engine, f"{PREFIX}:cuda-manifest", dockerfile, {"manifest.json": manifest("cuda", "2.11.0", ["sm_90"])}
    )


@pytest.fixture(scope="module")
def rocm_manifest_image(engine: Any) -> str:
    dockerfile = "FROM scratch\nCOPY manifest.json /opt/imagebuild/manifest.json\n"
    files = {"manifest.json": manifest("rocm", "2.3.0", ["gfx90a", "gfx942"])}
    return build(engine, f"{PREFIX}:rocm-manifest", dockerfile, files)


@pytest.fixture(scope="module")
def torch_cpu_image(engine: Any) -> tuple[str, str]:
    """python3 + the CPU torch wheel on bookworm (what the local-cpu target holds), and PT_VERSION read off
    the wheel's file name. Built once; the engine's cache makes later runs quick."""
    wheels = sorted(Path(os.environ.get("PIP_FIND_LINKS", "/opt/wheels")).glob("torch-*+cpu-cp311-*.whl"))
    if not wheels:
        pytest.fail("no CPU torch wheel under $PIP_FIND_LINKS (/opt/wheels): .ci/run must provide it")
    engine.images.get(BASE)  # .ci/run makes it (debootstrap + docker import); fail loudly if it did not
    wheel = wheels[-1]
    # bookworm's typing_extensions is older than torch needs; this host's (a pure-Python file) is new enough.
    import typing_extensions

    dockerfile = (
        f"FROM {BASE}\n"
        "RUN apt-get update && apt-get install -y --no-install-recommends python3 python3-pip "
        "python3-filelock python3-sympy python3-networkx python3-jinja2 python3-fsspec "
        "&& rm -rf /var/lib/apt/lists/*\n"
        "COPY typing_extensions.py /usr/local/lib/python3.11/dist-packages/typing_extensions.py\n"
        f"COPY {wheel.name} /tmp/{wheel.name}\n"
        f"RUN pip install --no-deps --no-index --break-system-packages /tmp/{wheel.name} && rm /tmp/{wheel.name}\n"
    )
    pt = top.pt_version_of(wheel.name.split("-")[1])
    assert pt
    files = {wheel.name: wheel, "typing_extensions.py": Path(typing_extensions.__file__)}
    return build(engine, f"{PREFIX}:torch-cpu", dockerfile, files), pt


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["tunableop", *args])
    return result.exit_code, result.stdout, result.stderr


def read_from_image(client: Any, image: str, path: str) -> bytes:
    container = client.containers.create(image, command=["true"], entrypoint=["true"])
    try:
        stream, _ = container.get_archive(path)
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
            member = tar.extractfile(Path(path).name)
            assert member is not None
            return member.read()
    finally:
        container.remove(force=True)


def test_check_against_cuda_image_manifest(cuda_manifest_image: str) -> None:
    code, out, _ = run("check", str(CUDA), "--image", cuda_manifest_image, "--gpu", "none")
    assert code == 0, out
    assert "ok       PT_VERSION = 2.11.0" in out and "manifest" in out
    code, out, errout = run("check", str(ROCM0), "--image", cuda_manifest_image, "--gpu", "none")
    assert code == 1
    assert "PT_VERSION: file has '2.3.0', expected '2.11.0'" in out
    for key in ("ROCM_VERSION", "HIPBLASLT_VERSION", "ROCBLAS_VERSION", "GCN_ARCH_NAME"):
        assert f"{key}: in the file but not registered" in out
    assert errout.startswith("error: ")


def test_check_against_rocm_image_without_gpu_reports_what_it_cannot_know(rocm_manifest_image: str) -> None:
    code, out, errout = run("check", str(ROCM0), "--image", rocm_manifest_image, "--gpu", "none")
    assert code == 1
    assert "ok       PT_VERSION = 2.3.0" in out
    for key in ("ROCM_VERSION", "HIPBLASLT_VERSION", "ROCBLAS_VERSION", "GCN_ARCH_NAME"):
        assert f"{key}: could not be determined" in out
    assert "image built for gfx90a, gfx942" in out
    rocm_keys = [
        a for k in top.load(ROCM0).validators.items() if k[0] != "PT_VERSION" for a in ("--expect", "=".join(k))
    ]
    code, out, _ = run("check", str(ROCM0), "--image", rocm_manifest_image, "--gpu", "none", *rocm_keys)
    assert code == 0, out


def test_check_asks_torch_inside_the_image(torch_cpu_image: tuple[str, str], tmp_path: Path) -> None:
    image, pt = torch_cpu_image
    good = tmp_path / "good.csv"
    good.write_text((DATA / "cuda_pt_only.csv").read_text().replace("PT_VERSION,2.13.0", f"PT_VERSION,{pt}"))
    code, out, _ = run("check", str(good), "--image", image, "--gpu", "none", "--json")
    report = json.loads(out)
    assert code == 0 and report["matched"] == ["PT_VERSION"]
    assert report["against"].startswith("torch ") and "(no GPU)" in report["against"]
    code, out, _ = run("check", str(ROCM0), "--image", image, "--gpu", "none", "--json")
    report = json.loads(out)
    assert code == 1 and report["extra"] == ["ROCM_VERSION", "HIPBLASLT_VERSION", "ROCBLAS_VERSION", "GCN_ARCH_NAME"]
    assert report["mismatched"] == [{"key": "PT_VERSION", "file": "2.3.0", "expected": pt}]


def test_bake_puts_a_validated_file_into_a_derived_image(engine: Any, cuda_manifest_image: str) -> None:
    tag = f"{PREFIX}:cuda-derived"
    code, out, errout = run("bake", cuda_manifest_image, str(CUDA), "--tag", tag, "--gpu", "none")
    assert code == 0, errout
    baked = read_from_image(engine, tag, "/opt/imagebuild/tunableop/tunableop_pt2.11.0.csv")
    assert baked.decode() == top.render(top.load(CUDA))
    assert engine.images.get(tag).labels["io.imagebuild.tunableop.baked"] == "tunableop_pt2.11.0.csv"


def test_bake_refuses_a_file_the_image_would_reject(engine: Any, cuda_manifest_image: str) -> None:
    import docker

    tag = f"{PREFIX}:rocm-derived"
    code, _, errout = run("bake", cuda_manifest_image, str(ROCM0), "--tag", tag, "--gpu", "none")
    assert code == 1 and "not baking" in errout and "PT_VERSION" in errout
    with pytest.raises(docker.errors.ImageNotFound):
        engine.images.get(tag)


def test_unknown_image_is_a_usage_error(engine: Any) -> None:
    code, _, errout = run("check", str(CUDA), "--image", f"{PREFIX}:does-not-exist", "--gpu", "none")
    assert code == 2 and "not found" in errout


def test_tune_needs_a_gpu_host(cuda_manifest_image: str, tmp_path: Path) -> None:
    shapes = DATA / "shapes_llama70b.txt"
    code, _, errout = run("tune", cuda_manifest_image, "--shapes", str(shapes), "--out", str(tmp_path))
    assert code == 2 and "needs a GPU host" in errout
    # asking for a GPU the engine cannot give is a usage error too, and nothing is written
    code, _, errout = run("tune", cuda_manifest_image, "--shapes", str(shapes), "--out", str(tmp_path), "--gpu", "cuda")
    assert code == 2 and "cannot run" in errout
    assert list(tmp_path.iterdir()) == []


def test_tuning_container_runs_the_mounted_script_and_reports_its_failure(
    engine: Any, torch_cpu_image: tuple[str, str], tmp_path: Path
) -> None:
    """The whole container path of `tune` short of a GPU: script mounted, shapes read, exit status surfaced."""
    from imagebuild.engine.sdk import DockerEngine
    from imagebuild.errors import BuildFailed
    from imagebuild.tunableop import tune as tt

    gemms = ts.parse_shapes("out=64 in=32 tokens=1,2\n")
    with pytest.raises(BuildFailed, match=r"failed \(exit 2\): error: no GPU visible to torch"):
        tt.run_tuning(DockerEngine(engine), torch_cpu_image[0], gemms, tmp_path, gpu="none")
    assert json.loads((tmp_path / "shapes.json").read_text())["gemms"][1]["tokens"] == 2


def test_entrypoint_in_a_baked_image_without_gpu(engine: Any, torch_cpu_image: tuple[str, str], tmp_path: Path) -> None:
    """Bake a file the image's own torch accepts, then start the derived image through the entrypoint: the
    results folder is made, nothing is installed without a GPU (said on stderr), and the command runs."""
    image, pt = torch_cpu_image
    results = tmp_path / "pt.csv"
    results.write_text((DATA / "cuda_pt_only.csv").read_text().replace("PT_VERSION,2.13.0", f"PT_VERSION,{pt}"))
    tag = f"{PREFIX}:torch-cpu-derived"
    code, _, errout = run("bake", image, str(results), "--tag", tag, "--gpu", "none")
    assert code == 0, errout
    scripts = Path(__file__).resolve().parents[1] / "image" / "tunableop"
    logs = engine.containers.run(
        tag,
        entrypoint=["python3", "/opt/imagebuild/bin/tunableop_entrypoint.py"],
        command=["sh", "-c", "ls -d /data/tunableop && ls /opt/imagebuild/tunableop"],
        environment={
            "PYTORCH_TUNABLEOP_ENABLED": "1",
            "PYTORCH_TUNABLEOP_FILENAME": "/data/tunableop/tunableop_results%d.csv",
        },
        # Where the final stage puts them: the entrypoint beside the contract package it imports.
        volumes={
            str(scripts): {"bind": "/opt/imagebuild/bin", "mode": "ro"},
            str(scripts.parents[1] / "imagecontract"): {"bind": "/opt/imagebuild/imagecontract", "mode": "ro"},
        },
        network_mode="host",
        remove=True,
        stdout=True,
        stderr=True,
    ).decode()
    assert "/data/tunableop" in logs and f"tunableop_pt{pt}.csv" in logs
    assert "no GPU visible; baked TunableOp results not installed" in logs
