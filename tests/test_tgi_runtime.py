"""The TGI serving runtime of the ROCm and CUDA images: its stages, its entrypoint, its manifest section, and the
check that TGI enables flash / paged attention as promised. No network, no GPU: the rendered files are read as
text, the entrypoint runs here, and TGI itself is a stand-in package written into tmp_path where named so."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

from imagebuild.errors import ConfigError
from imagebuild.matrix import TgiRuntime, load_matrix, load_text
from imagebuild.plan import manifest as manifest_mod

REPO = Path(__file__).resolve().parents[1]
GPU_TARGETS = ["rocm6.1-torch2.3", "cuda12.1-torch2.3"]
# Upstream facts these tests hold the matrix to (huggingface/text-generation-inference@232e8d52):
TGI_RUST_CHANNEL = "1.78.0"  # rust-toolchain.toml:4
TGI_SERVER = {  # Dockerfile_amd:191-192, Dockerfile:225-226
    "rocm": ("requirements_rocm.txt", "accelerate,peft,outlines"),
    "cuda": ("requirements_cuda.txt", "bnb,accelerate,quantize,peft,outlines"),
}


def _stages(dockerfile: str) -> dict[str, str]:
    parts = re.split(r"^FROM \S+ AS (\S+)\n", dockerfile, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def _dockerfile(target: str) -> str:
    return (REPO / "dockerfiles" / target / "Dockerfile").read_text()


def _manifest(target: str) -> dict:
    return json.loads((REPO / "dockerfiles" / target / "manifest.json").read_text())


@pytest.fixture(scope="module")
def matrix():
    return load_matrix(REPO / "matrix.yaml")


def _tgi(matrix) -> TgiRuntime:
    runtime = matrix.model.runtimes["text-generation-inference"]
    assert isinstance(runtime, TgiRuntime)
    return runtime


# ---- stages ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("target", GPU_TARGETS)
def test_runtime_server_has_proto_beside_server(target: str) -> None:
    """`make gen-server` reads ../proto/generate.proto (TGI server/Makefile:15-16): proto/ must sit beside server/."""
    stage = _stages(_dockerfile(target))["runtime-server"]
    assert "COPY --from=runtime-source /src/runtime/proto /src/runtime/proto" in stage
    assert "COPY --from=runtime-source /src/runtime/server /src/runtime/server" in stage
    assert "WORKDIR /src/runtime/server" in stage
    assert stage.index("/src/runtime/proto") < stage.index("make gen-server")
    assert "test -s text_generation_server/pb/generate_pb2.py" in stage


@pytest.mark.parametrize("target", GPU_TARGETS)
def test_rust_builder_matches_rust_toolchain_toml(matrix, target: str) -> None:
    runtime = _tgi(matrix)
    assert runtime.rust_toolchain == TGI_RUST_CHANNEL
    stages = _stages(_dockerfile(target))
    for name in ("runtime-source", "runtime-build"):
        assert re.search(rf"^FROM rust:{re.escape(TGI_RUST_CHANNEL)}-\S+ AS {name}$", _dockerfile(target), re.M), name
    assert "runtime/rust-toolchain.toml" in stages["runtime-source"]
    assert f"!= {TGI_RUST_CHANNEL} ]" in stages["runtime-source"]  # the file is read and compared
    assert f"\"$(rustc --version | cut -d' ' -f2)\" != {TGI_RUST_CHANNEL} ]" in stages["runtime-build"]
    assert "cargo build --release --locked" in stages["runtime-build"]
    for binary in ("text-generation-launcher", "text-generation-router", "text-generation-benchmark"):
        assert f"target/release/{binary}" in stages["runtime-build"]
        assert f"/usr/local/bin/{binary}" in stages["final"]


def test_a_builder_without_the_toolchain_is_a_config_error() -> None:
    text = (REPO / "matrix.yaml").read_text()
    bad = text.replace(f"builder_image: rust:{TGI_RUST_CHANNEL}-bookworm", "builder_image: rust:1.75-bookworm")
    assert bad != text
    with pytest.raises(ConfigError, match=r"does not carry Rust 1\.78\.0"):
        load_text(bad, REPO / "matrix.yaml")


@pytest.mark.parametrize("target", GPU_TARGETS)
def test_server_installed_from_its_locked_set_with_extras(target: str) -> None:
    """Upstream installs requirements_<kind>.txt, then the server with its extras (Dockerfile_amd:191-192,
    Dockerfile:225-226); here both are one set the lock resolved from that file and the server package with those
    extras under this torch (issue 32 item 4), installed by hash, then the server wheel (and the git requirement the
    set keeps, built as a wheel from its commit) without dependencies: nothing in the final stage resolves."""
    kind = "rocm" if target.startswith("rocm") else "cuda"
    requirements, extras = TGI_SERVER[kind]
    lock = json.loads((REPO / "matrix.lock.json").read_text())
    entry = lock["inputs"][f"pip:{target}@linux/amd64:runtime-server"]
    source = entry["spec"]["from_source"]
    assert (source["file"], ",".join(source["extras"])) == (f"server/{requirements}", extras)
    stages = _stages(_dockerfile(target))
    server = stages["runtime-server"]
    assert "PIP_NO_INDEX=1 make gen-server" in server
    assert "pip wheel --no-deps --no-build-isolation -w /wheels ." in server
    assert "pip wheel --no-deps --no-build-isolation -w /wheels/vcs 'transformers @ git+https://" in server
    final = stages["final"]
    locked = f"source=dockerfiles/{target}/requirements/runtime-server.txt,target=/tmp/imagebuild-lock/requirements.txt"
    assert locked in final
    installs = re.findall(r"pip install ([^\\\n]+)", final)
    assert (
        installs[0].strip() == "--no-deps --require-hashes --only-binary=:all: -r /tmp/imagebuild-lock/requirements.txt"
    )
    assert installs[-2:] == [
        "--no-deps /tmp/wheels/runtime-server/vcs/*.whl ",
        "--no-deps /tmp/wheels/runtime-server/*.whl",
    ]
    assert all(i.startswith("--no-deps ") for i in installs)


@pytest.mark.parametrize("target", GPU_TARGETS)
def test_final_stage_env_libraries_entrypoint_and_cmd(target: str) -> None:
    final = _stages(_dockerfile(target))["final"]
    for needle in ('HUGGINGFACE_HUB_CACHE="/data"', 'HF_HUB_ENABLE_HF_TRANSFER="1"', 'PORT="80"'):
        assert needle in final, needle
    assert "apt-get install -y --no-install-recommends libssl3 ca-certificates" in final
    assert "grep 'not found' /tmp/ldd.txt" in final
    entry = re.search(r"^ENTRYPOINT (.*)$", final, re.M)
    cmd = re.search(r"^CMD (.*)$", final, re.M)
    assert entry and cmd
    assert json.loads(entry.group(1)) == [
        "/opt/imagebuild/bin/tunableop-entrypoint",
        "--default-command",
        "text-generation-launcher",
        "--ldconfig",
        "--",
    ]
    assert json.loads(cmd.group(1)) == ["--json-output"]


def test_local_cpu_keeps_running_its_smoke_suite() -> None:
    final = _stages(_dockerfile("local-cpu"))["final"]
    assert 'ENTRYPOINT ["/opt/imagebuild/bin/tunableop-entrypoint"]' in final
    assert "text-generation-launcher" not in final


# ---- manifest ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("target", GPU_TARGETS)
def test_manifest_runtime_section_carries_what_the_smoke_check_needs(target: str) -> None:
    runtime = _manifest(target)["runtime"]
    assert runtime["name"] == "text-generation-inference" and runtime["kind"] == "tgi"
    assert runtime["entrypoint"] == "text-generation-launcher"
    serve = runtime["serve"]
    assert serve[0] == "text-generation-launcher"
    assert serve[serve.index("--model-id") + 1] == "{model}" and serve[serve.index("--port") + 1] == "{port}"
    assert serve[serve.index("--hostname") + 1] == "127.0.0.1"
    max_input = int(serve[serve.index("--max-input-tokens") + 1])
    max_total = int(serve[serve.index("--max-total-tokens") + 1])
    prefill = int(serve[serve.index("--max-batch-prefill-tokens") + 1])
    assert max_input < max_total and prefill >= max_input  # the launcher's own argument checks
    assert runtime["health"] == "/health" and runtime["api"] == "tgi"
    assert runtime["serve_env"] == {"HF_HUB_OFFLINE": "1"} and runtime["startup_timeout_s"] > 0
    arches = _manifest(target)["gpu_arches"]
    assert set(runtime["attention"]) == set(arches)
    assert all(set(p) == {"flash", "paged"} for p in runtime["attention"].values())


def test_attention_promises_follow_the_components_built_for_each_arch(matrix) -> None:
    target = matrix.target("rocm6.1-torch2.3")
    default = manifest_mod.tgi_attention_promises(target, target.resolve(env={}))
    assert default == {"gfx90a": {"flash": True, "paged": True}, "gfx942": {"flash": True, "paged": True}}
    # gfx908: CK flash-attention (optional) is left out, vLLM's fork is experimental there: nothing promised
    mixed = target.resolve("gfx908;gfx942", env={}, allow_experimental=True)
    promises = manifest_mod.tgi_attention_promises(target, mixed)
    assert promises["gfx942"] == {"flash": False, "paged": True}  # flash needs CK, left out for the whole build
    assert promises["gfx908"]["flash"] is False


def test_attention_needs_name_known_components() -> None:
    text = (REPO / "matrix.yaml").read_text()
    bad = text.replace("paged: {rocm: [vllm-rocm]", "paged: {rocm: [vllm-rocn]")
    assert bad != text
    with pytest.raises(ConfigError, match=r"unknown component 'vllm-rocn'; did you mean 'vllm-rocm'\?"):
        load_text(bad, REPO / "matrix.yaml")


# ---- entrypoint --------------------------------------------------------------------------------------------


def _entry_module() -> ModuleType:
    path = REPO / "image" / "tunableop" / "tunableop_entrypoint.py"
    spec = importlib.util.spec_from_file_location("tunableop_entrypoint", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("argv", "want"),
    [
        (["--default-command", "tgl", "--ldconfig", "--", "--model-id", "X"], (["tgl", "--model-id", "X"], True)),
        (["--default-command", "tgl", "--ldconfig", "--", "--json-output"], (["tgl", "--json-output"], True)),
        (["--default-command", "tgl", "--"], (["tgl"], False)),
        (["--default-command", "tgl", "--", "python3", "-m", "smoke"], (["python3", "-m", "smoke"], False)),
        (["python3", "-m", "smoke"], (["python3", "-m", "smoke"], False)),
        (["--", "--not-an-option"], (["--not-an-option"], False)),
    ],
)
def test_entrypoint_command_line(argv: list[str], want: tuple[list[str], bool]) -> None:
    assert _entry_module().command_line(argv) == want


def test_entrypoint_runs_flags_as_the_default_command_and_commands_as_given(tmp_path: Path) -> None:
    """What `docker run IMAGE --model-id X` and `docker run IMAGE python3 -m smoke` do, with a stand-in launcher."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    launcher = bindir / "standin-launcher"
    launcher.write_text('#!/bin/sh\necho "launcher $*"\n')
    launcher.chmod(0o755)
    script = str(REPO / "image" / "tunableop" / "tunableop_entrypoint.py")
    env = {"PATH": f"{bindir}:/usr/bin:/bin", "PYTORCH_TUNABLEOP_FILENAME": str(tmp_path / "t" / "r%d.csv")}
    head = [sys.executable, script, "--default-command", "standin-launcher", "--"]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*head, *args], env=env, capture_output=True, text=True, timeout=60)

    assert run("--model-id", "X").stdout == "launcher --model-id X\n"
    assert run("--json-output").stdout == "launcher --json-output\n"
    assert run().stdout == "launcher \n"
    assert run("sh", "-c", "echo direct").stdout == "direct\n"


# ---- TGI attention check -----------------------------------------------------------------------------------

STANDIN_FLASH_ATTN = """
try:
    import flash_attn_2_cuda  # noqa: F401
except ImportError:
    raise ImportError("Flash Attention V2 is not installed.")
"""
STANDIN_PAGED = """
try:
    from vllm._C import ops  # noqa: F401
except Exception as e:
    raise ImportError(f"Could not import vllm paged attention. Complete error: {e}")
"""
STANDIN_REGISTRY = """
FLASH_ATTENTION = True
try:
    from text_generation_server.utils import flash_attn, paged_attention  # noqa: F401
except ImportError:
    FLASH_ATTENTION = False
"""


def _write_standin_tgi(root: Path, *, flash: bool, paged: bool) -> None:
    """A stand-in text_generation_server (and kernel modules) shaped like TGI@232e8d52's import decisions."""
    pkg = root / "text_generation_server"
    for sub, files in {
        "": {},
        "utils": {"flash_attn.py": STANDIN_FLASH_ATTN, "paged_attention.py": STANDIN_PAGED},
        "models": {"__init__.py": STANDIN_REGISTRY},
    }.items():
        (pkg / sub).mkdir(parents=True, exist_ok=True)
        init = pkg / sub / "__init__.py"
        if not init.exists():
            init.write_text("")
        for name, text in files.items():
            (pkg / sub / name).write_text(textwrap.dedent(text))
    if flash:
        (root / "flash_attn_2_cuda.py").write_text("")
    if paged:
        (root / "vllm").mkdir()
        (root / "vllm" / "__init__.py").write_text("")
        (root / "vllm" / "_C.py").write_text("ops = object()\n")


def _probe(root: Path, promises: dict, arch: str) -> tuple[int, dict]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(REPO)])}
    proc = subprocess.run(
        [sys.executable, "-m", "smoke.tgi_attention", "--promises", json.dumps(promises), "--arch", arch],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=root,
    )
    return proc.returncode, json.loads(proc.stdout.strip().splitlines()[-1])


PROMISED = {"gfx942": {"flash": True, "paged": True}}


def test_tgi_attention_promised_and_enabled_passes_with_standin_tgi_package(tmp_path: Path) -> None:
    _write_standin_tgi(tmp_path, flash=True, paged=True)
    code, out = _probe(tmp_path, PROMISED, "gfx942")
    assert code == 0 and out["failures"] == []
    assert out["state"]["flash"] is True and out["state"]["paged"] is True


def test_tgi_attention_promised_but_disabled_fails_naming_the_module_with_standin_tgi_package(tmp_path: Path) -> None:
    _write_standin_tgi(tmp_path, flash=False, paged=True)
    code, out = _probe(tmp_path, PROMISED, "gfx942")
    assert code == 1 and len(out["failures"]) == 1
    assert out["failures"][0].startswith("flash attention promised for gfx942 but TGI disabled it")
    assert "'flash_attn_2_cuda'" in out["failures"][0]
    second = tmp_path / "paged"
    _write_standin_tgi(second, flash=True, paged=False)
    code, out = _probe(second, PROMISED, "gfx942")
    assert code == 1 and len(out["failures"]) == 2  # no paged attention: the registry turns flash off too
    assert all("'vllm'" in f or "'vllm._C'" in f for f in out["failures"]), out["failures"]


def test_tgi_attention_not_promised_is_no_failure_with_standin_tgi_package(tmp_path: Path) -> None:
    _write_standin_tgi(tmp_path, flash=False, paged=False)
    for promises, arch in (({"gfx942": {"flash": False, "paged": False}}, "gfx942"), (PROMISED, "gfx90a"), ({}, "")):
        code, out = _probe(tmp_path, promises, arch)
        assert code == 0 and out["failures"] == [], (promises, arch)
        assert out["state"]["flash"] is False and out["state"]["flash_error"]


def test_tgi_attention_check_isolated_with_standin_tgi_package(tmp_path: Path, monkeypatch) -> None:
    """The entry point the smoke runtime check calls: a child process, the stand-in found through PYTHONPATH."""
    from smoke import tgi_attention

    _write_standin_tgi(tmp_path, flash=False, paged=True)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    broken, state = tgi_attention.check_isolated(PROMISED, "gfx942", timeout_s=60)
    assert state is not None and state.paged and not state.flash
    assert len(broken) == 1 and "'flash_attn_2_cuda'" in broken[0]
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "nowhere"))
    broken, state = tgi_attention.check_isolated(PROMISED, "gfx942", timeout_s=60)
    assert state is not None and not state.flash and not state.paged
    assert any("'text_generation_server'" in f for f in broken), broken


def test_tgi_attention_promises_found_for_a_device_arch_with_features() -> None:
    from smoke import tgi_attention

    off = tgi_attention.AttentionState(False, True, "x: module 'flash_attn_2_cuda' cannot be imported", None)
    broken = tgi_attention.failures(PROMISED, "gfx942:sramecc+:xnack-", off)
    assert len(broken) == 1 and "flash attention promised for gfx942:sramecc+:xnack-" in broken[0]
    assert tgi_attention.failures(PROMISED, "gfx90a:sramecc+:xnack-", off) == []
    assert tgi_attention.failures(PROMISED, None, off) == []
