"""The image side of TunableOp: the entrypoint that installs baked results, and the in-image tuning script."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from imagebuild.tunableop import results as top
from imagebuild.tunableop import shapes as ts

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "image" / "tunableop"
DATA = Path(__file__).parent / "data" / "tunableop"
ROCM0 = DATA / "rocm_gfx942_dev0.csv"
ROCM_GFX90A = DATA / "rocm_gfx90a_dev0.csv"


def load_script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


entry = load_script("tunableop_entrypoint")


@pytest.mark.parametrize(
    ("pattern", "device", "want"),
    [
        ("/data/tunableop/tunableop_results%d.csv", 3, "/data/tunableop/tunableop_results3.csv"),
        ("/data/tunableop/results.csv", 1, "/data/tunableop/results1.csv"),
        ("/data/tune.d/results", 2, "/data/tune.d/results2"),
    ],
)
def test_filename_rule_is_torchs(pattern: str, device: int, want: str) -> None:
    assert entry.resolve_filename(pattern, device) == want


def test_entrypoint_reads_validators_like_torch() -> None:
    assert entry.read_validators(ROCM0) == top.load(ROCM0).validators


def _baked(tmp_path: Path) -> Path:
    baked = tmp_path / "baked"
    baked.mkdir()
    (baked / "tunableop_gfx90a.csv").write_bytes(ROCM_GFX90A.read_bytes())
    (baked / "tunableop_gfx942.csv").write_bytes(ROCM0.read_bytes())
    return baked


def _env(tmp_path: Path) -> dict[str, str]:
    return {
        "PYTORCH_TUNABLEOP_ENABLED": "1",
        "PYTORCH_TUNABLEOP_FILENAME": str(tmp_path / "data" / "tunableop" / "tunableop_results%d.csv"),
    }


def test_entrypoint_installs_the_matching_baked_file_per_device_mocked_amd_gpu(tmp_path: Path) -> None:
    # No AMD GPU here: the probe that would ask torch on an MI300 returns what it would say there.
    live = top.load(ROCM0).validators

    written = entry.prepare(_env(tmp_path), _baked(tmp_path), probe=lambda: (live, [0, 1]))
    folder = tmp_path / "data" / "tunableop"
    assert written == [str(folder / "tunableop_results0.csv"), str(folder / "tunableop_results1.csv")]
    assert (folder / "tunableop_results1.csv").read_bytes() == ROCM0.read_bytes()
    assert sorted(p.name for p in folder.iterdir()) == ["tunableop_results0.csv", "tunableop_results1.csv"]


def test_entrypoint_never_overwrites_users_results_mocked_amd_gpu(tmp_path: Path) -> None:
    folder = tmp_path / "data" / "tunableop"
    folder.mkdir(parents=True)
    (folder / "tunableop_results0.csv").write_text("mine\n")
    calls = []

    def probe() -> tuple[dict[str, str], list[int]]:
        calls.append(1)
        return top.load(ROCM0).validators, [0]

    assert entry.prepare(_env(tmp_path), _baked(tmp_path), probe=probe) == []
    assert (folder / "tunableop_results0.csv").read_text() == "mine\n"
    assert calls == []  # torch is not even started when results are already there


def test_entrypoint_installs_nothing_when_no_baked_file_matches_mocked_amd_gpu(tmp_path: Path) -> None:
    other = dict(top.load(ROCM0).validators, HIPBLASLT_VERSION="0.8.0-different")
    assert entry.prepare(_env(tmp_path), _baked(tmp_path), probe=lambda: (other, [0])) == []
    assert list((tmp_path / "data" / "tunableop").iterdir()) == []  # folder made for torch, nothing copied


def test_entrypoint_creates_the_folder_even_when_tunableop_is_off(tmp_path: Path) -> None:
    env = dict(_env(tmp_path), PYTORCH_TUNABLEOP_ENABLED="0")
    assert entry.prepare(env, _baked(tmp_path), probe=lambda: pytest.fail("torch must not be asked")) == []
    assert (tmp_path / "data" / "tunableop").is_dir()


def test_entrypoint_execs_the_command_with_its_exit_code(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", **_env(tmp_path), "IMAGEBUILD_TUNABLEOP_BAKED_DIR": str(tmp_path / "none")}
    script = str(SCRIPTS / "tunableop_entrypoint.py")
    proc = subprocess.run(
        [sys.executable, script, "sh", "-c", 'echo "$0 $1"; exit 7', "a", "b"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 7 and proc.stdout == "a b\n"
    assert (tmp_path / "data" / "tunableop").is_dir()
    missing = subprocess.run([sys.executable, script, "no-such-program-xyz"], env=env, capture_output=True, text=True)
    assert missing.returncode == 127 and "cannot run 'no-such-program-xyz'" in missing.stderr
    usage = subprocess.run([sys.executable, script], env=env, capture_output=True, text=True)
    assert usage.returncode == 2


def test_entrypoint_without_gpu_starts_the_command_and_installs_nothing(tmp_path: Path) -> None:
    """The real probe (this host's torch, no GPU): a warning, no file, and the command still runs."""
    env = {"PATH": "/usr/bin:/bin", **_env(tmp_path), "IMAGEBUILD_TUNABLEOP_BAKED_DIR": str(_baked(tmp_path))}
    proc = subprocess.run(
        [sys.executable, str(SCRIPTS / "tunableop_entrypoint.py"), "true"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this host has a GPU; the GPU path is covered by bench/gpu_tunableop.sh")
    assert "baked TunableOp results not installed" in proc.stderr
    assert list((tmp_path / "data" / "tunableop").iterdir()) == []


def test_tuning_script_refuses_without_a_gpu(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this host has a GPU: see test_tuning_script_on_gpu")
    shapes = tmp_path / "shapes.json"
    shapes.write_text(ts.shapes_json(ts.parse_shapes("out=64 in=32 tokens=1\n")))
    proc = subprocess.run(
        [sys.executable, str(SCRIPTS / "tune_gemms.py"), f"--shapes={shapes}", f"--out={tmp_path}/r%d.csv"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2 and "no GPU visible" in proc.stderr


@pytest.mark.gpu
def test_tuning_script_on_gpu(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU (bench/gpu_tunableop.sh ran this on an H200; results in bench/results/)")
    shapes = tmp_path / "shapes.json"
    shapes.write_text(ts.shapes_json(ts.parse_shapes("out=256 in=128 tokens=1,2\n")))
    report = tmp_path / "report.json"
    subprocess.run(
        [
            sys.executable,
            str(SCRIPTS / "tune_gemms.py"),
            f"--shapes={shapes}",
            f"--out={tmp_path}/r%d.csv",
            f"--report={report}",
            "--timing-iters=3",
        ],
        check=True,
        timeout=600,
    )
    results = top.load(tmp_path / "r0.csv")
    assert results.validators == json.loads(report.read_text())["validators"]
    assert sorted(r.shape.tokens for r in results.rows) == [1, 2]
