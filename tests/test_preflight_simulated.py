"""The in-image preflight and the driver reader on simulated hosts: fake sysfs KFD topologies and /dev trees.

Simulated: no AMD GPU is here; each tree is laid out as the amdkfd driver lays out /sys/class/kfd (properties files
with gfx_target_version and drm_render_minor, a CPU node with version 0) and /dev (kfd, dri/renderD*), with the
node's group and mode set for real (chown), judged for a given container identity. The NVIDIA host is the driver
query's CSV output.
"""

from __future__ import annotations

import importlib.util
import io
import os
import sys
import time
from pathlib import Path

import pytest

from imagecontract import preflight
from imagecontract.driver import Identity, cuda_gpus, device_node, gfx_name, rocm_gpus

ROOT = Path(__file__).resolve().parents[1]
CONTAINER = Identity(1000, (44,))  # a non-root container user in the image's `video` group (GID 44)


def rocm_host(tmp: Path, versions: list[int], render_gid: int = 44, kfd: bool = True) -> Path:
    """A KFD topology: node 0 the CPU, then one node per GPU (render minors 128, 136, ...), and their /dev nodes."""
    nodes = tmp / "sys/class/kfd/kfd/topology/nodes"
    (nodes / "0").mkdir(parents=True)
    (nodes / "0/properties").write_text("cpu_cores_count 64\nsimd_count 0\ngfx_target_version 0\ndrm_render_minor 0\n")
    (tmp / "dev/dri").mkdir(parents=True)
    for i, version in enumerate(versions, start=1):
        (nodes / str(i)).mkdir()
        minor = 128 + 8 * (i - 1)
        props = f"cpu_cores_count 0\nsimd_count 304\ngfx_target_version {version}\ndrm_render_minor {minor}\n"
        (nodes / str(i) / "properties").write_text(props)
        node = tmp / f"dev/dri/renderD{minor}"
        node.write_bytes(b"")
        os.chown(node, 0, render_gid)
        node.chmod(0o660)
    if kfd:
        (tmp / "dev/kfd").write_bytes(b"")
        os.chown(tmp / "dev/kfd", 0, 44)
        (tmp / "dev/kfd").chmod(0o660)
    return tmp


def manifest(arches: list[str], kind: str = "rocm", experimental: list[str] | None = None) -> dict[str, object]:
    return {
        "target": "rocm6.1-torch2.3" if kind == "rocm" else "cuda12.1-torch2.3",
        "platform": {"kind": kind},
        "gpu_arches": arches,
        "experimental_arches": experimental or [],
    }


def findings(root: Path, arches: list[str], env: dict[str, str] | None = None, **kw: object) -> list[tuple[str, str]]:
    found = preflight.check(manifest(arches, **kw), env or {}, root, who=CONTAINER)  # type: ignore[arg-type]
    return [(f.level, f.message) for f in found]


def refused(found: list[tuple[str, str]]) -> list[str]:
    return [message for level, message in found if level == "refuse"]


def test_simulated_gfx_target_version_names() -> None:
    assert [gfx_name(v) for v in (90402, 90010, 90008, 110000, 110001, 0)] == [
        "gfx942",
        "gfx90a",
        "gfx908",
        "gfx1100",
        "gfx1101",
        None,
    ]


def test_simulated_mi300x_eight_gpus_fit(tmp_path: Path) -> None:
    root = rocm_host(tmp_path, [90402] * 8)
    gpus = rocm_gpus(root)
    assert [g.arch for g in gpus] == ["gfx942"] * 8 and gpus[7].render == "/dev/dri/renderD184"
    assert findings(root, ["gfx90a", "gfx942:sramecc+:xnack-"]) == []


def test_simulated_mi250_two_gcds_on_a_gfx942_image(tmp_path: Path) -> None:
    root = rocm_host(tmp_path, [90010, 90010])
    bad = refused(findings(root, ["gfx942"]))
    assert len(bad) == 2
    assert bad[1].startswith("GPU 1 (MI210/MI250/MI250X, gfx90a) is not covered: this image (rocm6.1-torch2.3)")
    assert (
        "holds code for gfx942; use an image built for it (imagebuild build rocm6.1-torch2.3 --arch gfx90a)" in bad[0]
    )


def test_simulated_mi100_fits_only_where_gfx908_was_built(tmp_path: Path) -> None:
    root = rocm_host(tmp_path, [90008])
    assert "--arch gfx908" in refused(findings(root, ["gfx90a", "gfx942"]))[0]
    assert findings(root, ["gfx90a", "gfx942"], experimental=["gfx908"]) == []


def test_simulated_consumer_gfx1100(tmp_path: Path) -> None:
    root = rocm_host(tmp_path, [110000])
    assert "Radeon PRO W7900/RX 7900 XTX/RX 7900 XT, gfx1100" in refused(findings(root, ["gfx90a", "gfx942"]))[0]
    assert findings(root, ["gfx1100"]) == []


def test_simulated_mixed_host_and_visible_devices(tmp_path: Path) -> None:
    root = rocm_host(tmp_path, [90402, 110000])
    bad = refused(findings(root, ["gfx942"]))
    assert len(bad) == 1 and bad[0].startswith("GPU 1 (")
    assert findings(root, ["gfx942"], {"HIP_VISIBLE_DEVICES": "0"}) == []
    assert len(refused(findings(root, ["gfx942"], {"ROCR_VISIBLE_DEVICES": "1"}))) == 1


@pytest.mark.parametrize(
    ("versions", "value", "image", "level", "words"),
    [
        ([90010], "9.4.2", ["gfx90a", "gfx942"], "refuse", "a stale override"),  # MI210 reporting as an MI300
        ([90402], "11.0.0", ["gfx942", "gfx1100"], "refuse", "another ISA family"),
        ([90402], "9.4.2", ["gfx942"], "warn", "changes nothing"),
        ([110001], "11.0.0", ["gfx1100"], "warn", "not supported by AMD"),  # gfx1101 run as gfx1100
        ([90402], "", ["gfx942"], "warn", "set but empty"),
        ([90402], "gfx942", ["gfx942"], "refuse", "not MAJOR.MINOR.STEPPING"),
    ],
)
def test_simulated_override_table(
    tmp_path: Path, versions: list[int], value: str, image: list[str], level: str, words: str
) -> None:
    found = findings(rocm_host(tmp_path, versions), image, {"HSA_OVERRIDE_GFX_VERSION": value})
    assert [lvl for lvl, msg in found if words in msg] == [level], found


def test_simulated_override_to_an_arch_the_image_lacks(tmp_path: Path) -> None:
    found = findings(rocm_host(tmp_path, [110001]), ["gfx942"], {"HSA_OVERRIDE_GFX_VERSION": "11.0.0"})
    assert any("is not covered" in m and "--arch gfx1100" in m for m in refused(found))


def test_simulated_wrong_render_gid(tmp_path: Path) -> None:
    root = rocm_host(tmp_path, [90402], render_gid=109)  # the host's render group is 109, the image's video 44
    bad = refused(findings(root, ["gfx942"]))
    assert bad == [
        "cannot open /dev/dri/renderD128 (permission denied (mode bits); owned by group 109, crw-rw----"
        "): run it with --group-add 109".replace("crw", "-rw")
    ]
    ok = preflight.check(manifest(["gfx942"]), {}, root, who=Identity(1000, (44, 109)))
    assert ok == []
    assert device_node(root, "/dev/dri/renderD128", Identity(0, ())).openable  # root passes the mode bits


def test_simulated_no_gpu(tmp_path: Path) -> None:
    root = rocm_host(tmp_path, [], kfd=False)
    found = findings(root, ["gfx942"])
    assert found == [
        ("warn", "no AMD GPU passed to this container (no /dev/kfd): run it with --device /dev/kfd --device /dev/dri")
    ]


def test_simulated_cuda_driver_query(tmp_path: Path) -> None:
    (tmp_path / "dev").mkdir()
    for name in ("nvidiactl", "nvidia0"):
        (tmp_path / "dev" / name).write_bytes(b"")
        (tmp_path / "dev" / name).chmod(0o666)

    def h200() -> str:
        return "0, NVIDIA H200, 9.0\n"

    def a10() -> str:
        return "0, NVIDIA A10, 8.6\n"

    assert [g.arch for g in cuda_gpus(tmp_path, h200)] == ["sm_90"]
    image = manifest(["sm_80", "sm_90"], kind="cuda")
    assert preflight.check(image, {}, tmp_path, who=CONTAINER, query=h200) == []
    assert preflight.check(image, {}, tmp_path, who=CONTAINER, query=a10) == []  # sm_80 SASS runs on sm_86
    only90 = manifest(["sm_90"], kind="cuda")
    bad = [f.message for f in preflight.check(only90, {}, tmp_path, who=CONTAINER, query=a10)]
    assert bad == [
        "GPU 0 (NVIDIA A10, sm_86) is not covered: this image (cuda12.1-torch2.3) holds code for sm_90; "
        "use an image built for it (imagebuild build cuda12.1-torch2.3 --arch sm_86)"
    ]
    assert preflight.check(manifest(["sm_80+PTX"], kind="cuda"), {}, tmp_path, who=CONTAINER, query=h200) == []


def test_simulated_run_exit_code_skip_and_speed(tmp_path: Path) -> None:
    root = rocm_host(tmp_path / "host", [90010])
    path = tmp_path / "manifest.json"
    path.write_text(__import__("json").dumps(manifest(["gfx942"])))
    out = io.StringIO()
    started = time.monotonic()
    assert preflight.run({}, root, path, out) == preflight.EXIT_REFUSED
    assert time.monotonic() - started < 0.5
    assert out.getvalue().startswith("preflight: refused: GPU 0 (MI210/MI250/MI250X, gfx90a) is not covered")
    out = io.StringIO()
    assert preflight.run({"IMAGEBUILD_SKIP_PREFLIGHT": "1"}, root, path, out) == 0
    assert out.getvalue() == "preflight: skipped (IMAGEBUILD_SKIP_PREFLIGHT=1)\n"


def test_simulated_entrypoint_refuses_before_exec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The image entrypoint runs the preflight first: on a refusal it returns 78 and never execs the server."""
    root = rocm_host(tmp_path / "host", [110000], render_gid=0)
    path = tmp_path / "manifest.json"
    path.write_text(__import__("json").dumps(manifest(["gfx942"])))
    spec = importlib.util.spec_from_file_location("ep", ROOT / "image/tunableop/tunableop_entrypoint.py")
    assert spec and spec.loader
    ep = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ep)
    monkeypatch.setattr(preflight, "ROOT", root)
    monkeypatch.setattr(preflight, "MANIFEST", path)
    monkeypatch.delenv("IMAGEBUILD_SKIP_PREFLIGHT", raising=False)
    execs: list[list[str]] = []
    monkeypatch.setattr(ep.os, "execvp", lambda prog, argv: execs.append(argv))
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    assert ep.main(["entrypoint", "--", "text-generation-launcher"]) == 78
    assert execs == [] and "gfx1100" in err.getvalue()
    monkeypatch.setenv("IMAGEBUILD_SKIP_PREFLIGHT", "1")
    monkeypatch.delenv("PYTORCH_TUNABLEOP_FILENAME", raising=False)
    ep.main(["entrypoint", "--", "text-generation-launcher"])
    assert execs == [["text-generation-launcher"]]
