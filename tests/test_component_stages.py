"""Torch and kernel component stages: each sets exactly the arch variables its build reads, pins what it builds,
installs what its setup.py imports, compiles locally, and the versions the image reports agree."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from imagebuild.errors import ConfigError
from imagebuild.matrix import arches, load_matrix, load_text
from imagebuild.plan import manifest as manifest_mod
from imagebuild.render import dockerfile as render

REPO = Path(__file__).resolve().parents[1]
GPU_TARGETS = ["rocm6.1-torch2.3", "cuda12.1-torch2.3"]
ARCH_LINE = re.compile(r'^\s*(?:ENV\s+)?([A-Z_]+)="([^"]*)"', re.M)


@pytest.fixture(scope="module")
def matrix():
    return load_matrix(REPO / "matrix.yaml")


def _stages(dockerfile: str) -> dict[str, str]:
    parts = re.split(r"^FROM \S+ AS (\S+)\n", dockerfile, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


LOCKED_INSTALL = "pip install --no-deps --require-hashes --only-binary=:all: -r /tmp/imagebuild-lock/requirements.txt"


def _locked_pins(target_name: str, stage: str) -> set[str]:
    """name==version of each package the stage installs from the lock (matrix.lock.json, rendered beside it)."""
    entry = json.loads((REPO / "matrix.lock.json").read_text())["inputs"][f"pip:{target_name}@linux/amd64:{stage}"]
    return {line.split(" ", 1)[0] for line in entry["requirements"]}


def _arch_vars_set(stage: str) -> dict[str, str]:
    """The arch variables (and only those) an ENV of this stage sets."""
    return {k: v for k, v in ARCH_LINE.findall(stage) if k in arches.ARCH_VARIABLES}


def _render(matrix, target_name: str, arch: str | None = None):
    target = matrix.target(target_name)
    resolution = target.resolve(arch, env={}, allow_experimental=True)
    rendered = render.render_target(matrix, target, resolution, manifest_path="build/render/x/manifest.json")
    return target, resolution, _stages(rendered.files["Dockerfile"]), json.loads(rendered.files["manifest.json"])


@pytest.mark.parametrize(
    ("target_name", "arch"),
    [
        ("rocm6.1-torch2.3", None),
        ("rocm6.1-torch2.3", "gfx90a;gfx942:sramecc+:xnack-"),
        ("cuda12.1-torch2.3", None),
        ("cuda12.1-torch2.3", "8.0;8.6;9.0+PTX"),
    ],
)
def test_each_compiling_stage_sets_exactly_the_variables_its_build_reads(matrix, target_name, arch) -> None:
    target, resolution, stages, manifest = _render(matrix, target_name, arch)
    vendor = arches.PLATFORM_VENDOR[target.platform.kind]
    for name, component in target.components:
        plan = resolution.components[name]
        if not plan.included:
            continue
        wanted = {v: f for v, f in component.arch_vars.items() if arches.ARCH_VARIABLES[v][0] == vendor}
        expected = {v: arches.format_variable(v, f, resolution.arches) for v, f in wanted.items()}
        assert _arch_vars_set(stages[f"component-{name}"]) == expected, name
        assert manifest["components"][name]["arch_vars"] == expected, name
    torch_stage = "torch-build" if target.torch_build.obtain == "source" else "torch"
    torch_vars = {v: arches.format_variable(v, f, resolution.arches) for v, f in target.torch_build.arch_vars.items()}
    if target.torch_build.obtain == "source":
        assert _arch_vars_set(stages[torch_stage]) == torch_vars
    assert manifest["torch"]["arch_vars"] == torch_vars


def test_features_reach_only_the_builds_that_accept_them(matrix) -> None:
    """vLLM's CMake keeps exact names and CK flash-attention asserts bare names: both get gfx942, not the ID."""
    _, _, stages, manifest = _render(matrix, "rocm6.1-torch2.3", "gfx90a;gfx942:sramecc+:xnack-")
    assert 'PYTORCH_ROCM_ARCH="gfx90a;gfx942"' in stages["component-vllm-rocm"]
    assert 'GPU_ARCHS="gfx90a;gfx942"' in stages["component-flash-attention-ck"]
    assert "PYTORCH_ROCM_ARCH" not in stages["component-flash-attention-ck"]
    assert 'PYTORCH_ROCM_ARCH="gfx90a;gfx942:sramecc+:xnack-"' in stages["component-imagebuild-kernels"]
    assert 'PYTORCH_ROCM_ARCH="gfx90a;gfx942"' in stages["torch-build"]
    assert manifest["components"]["vllm-rocm"]["arch_vars"] == {"PYTORCH_ROCM_ARCH": "gfx90a;gfx942"}


def test_flash_attention_cuda_reads_no_arch_variable_and_records_its_fixed_arches(matrix) -> None:
    _, _, stages, manifest = _render(matrix, "cuda12.1-torch2.3")
    stage = stages["component-flash-attention"]
    assert _arch_vars_set(stage) == {}
    assert manifest["components"]["flash-attention"]["fixed_arches"] == ["sm_80", "sm_90"]
    assert manifest["components"]["flash-attention"]["arch_vars"] == {}


def test_flash_attention_cuda_is_built_locally_never_downloaded(matrix) -> None:
    _, _, stages, _ = _render(matrix, "cuda12.1-torch2.3")
    stage = stages["component-flash-attention"]
    assert 'FLASH_ATTENTION_FORCE_BUILD="TRUE"' in stage
    # psutil: setup_requires, which setuptools would otherwise fetch itself; packaging: imported at the top
    install = stage.index(LOCKED_INSTALL)  # packaging and psutil, by hash from the lock
    assert stage.index("requirements/component-flash-attention.txt") < install < stage.index("pip wheel --no-build")
    assert {"packaging==24.0", "psutil==5.9.8"} <= _locked_pins("cuda12.1-torch2.3", "component-flash-attention")


@pytest.mark.parametrize("target_name", GPU_TARGETS)
def test_every_python_ext_stage_installs_its_imports_and_proves_it_compiled(matrix, target_name) -> None:
    target, _, stages, _ = _render(matrix, target_name)
    exts = [(n, c) for n, c in target.components if c.kind == "python-ext"]
    assert len(exts) == {"rocm6.1-torch2.3": 2, "cuda12.1-torch2.3": 4}[target_name]
    for name, component in exts:
        stage = stages[f"component-{name}"]
        assert component.source.commit and f"fetch -q --depth 1 origin {component.source.commit}" in stage
        assert stage.index(LOCKED_INSTALL) < stage.index("pip wheel")
        assert "packaging==24.0" in _locked_pins(target_name, f"component-{name}")
        assert "find build -name '*.o'" in stage, f"{name}: no proof the build compiled here"
        assert "no compiled module in the wheel" in stage
        assert "requirements-rocm.txt" not in stage


def test_cuda_target_builds_the_paged_attention_tgi_imports(matrix) -> None:
    """TGI's utils/paged_attention.py imports vllm._C on CUDA: the CUDA image builds Narsil/vllm at TGI's pin."""
    target = matrix.target("cuda12.1-torch2.3")
    components = dict(target.components)
    assert components["vllm-cuda"].source.git == "https://github.com/Narsil/vllm"
    assert components["vllm-cuda"].source.commit == "b5dfc61db88a81069e45b44f7cc99bd9e62a60fa"
    assert components["vllm-cuda"].optional is False
    assert "cmake" in target.platform.apt_packages  # vLLM's setup.py drives CMake


# TGI@232e8d52 server/Makefile-flash-att:1 (flash_att_commit), :11-12 (the two subdirectories it builds).
FLASH_ATT_V1 = "3a9bfd076f98746c73362328958dbc68d145fbec"
CSRC_MODULES = {"flash-attention-rotary": "csrc/rotary", "flash-attention-layer-norm": "csrc/layer_norm"}


@pytest.mark.parametrize("arch", [None, "sm_80;sm_86;sm_89;sm_90"])
def test_cuda_target_builds_rotary_and_layer_norm_from_flash_attention_csrc(matrix, arch) -> None:
    """TGI's layers/rotary.py:9 imports rotary_emb and layers/layernorm.py:37 dropout_layer_norm on CUDA: both are
    built from their csrc/ directory of flash-attention at TGI's pin, for every arch, with the arches they hard-code."""
    target, resolution, stages, manifest = _render(matrix, "cuda12.1-torch2.3", arch)
    components = dict(target.components)
    for name, subdir in CSRC_MODULES.items():
        source = components[name].source
        assert (source.git, source.commit, source.subdir) == (
            "https://github.com/Dao-AILab/flash-attention",
            FLASH_ATT_V1,
            subdir,
        ), name
        plan = resolution.components[name]
        assert plan.included and [t.id for t in plan.arches] == [t.id for t in resolution.arches], name
        stage = stages[f"component-{name}"]
        assert f"fetch -q --depth 1 origin {FLASH_ATT_V1}" in stage
        workdir = stage.index(f"WORKDIR /src/{name}/{subdir}\n")
        assert workdir < stage.index(LOCKED_INSTALL) < stage.index("pip wheel --no-build-isolation")
        assert "packaging==24.0" in _locked_pins("cuda12.1-torch2.3", f"component-{name}")
        assert stage.count("\nWORKDIR ") == 2, "the build must run in the subdirectory, nowhere else"
        # setup.py:98-104 (rotary) / :105-111 (layer_norm) hard-code these; torch then reads no arch variable
        assert _arch_vars_set(stage) == {}
        assert manifest["components"][name]["fixed_arches"] == ["sm_70", "sm_80", "sm_90"]
        assert manifest["components"][name]["arch_vars"] == {}
        assert f"/tmp/wheels/component-{name}/*.whl" in stages["final"], f"{name} is built but not shipped"


def test_cuda_flash_promise_needs_rotary_and_layer_norm(tmp_path: Path) -> None:
    """Without either module TGI's flash models fail to import on CUDA, so the manifest must not promise flash."""
    flash_cuda = "cuda: [flash-attention, vllm-cuda, flash-attention-rotary, flash-attention-layer-norm]"
    assert flash_cuda in GOOD, "fixture drift: the CUDA flash needs"
    listed = "flash-attention,\n                 flash-attention-rotary, flash-attention-layer-norm]"
    assert listed in GOOD, "fixture drift: the target's component list"
    for dropped in CSRC_MODULES:
        kept = ", ".join(n for n in CSRC_MODULES if n != dropped)
        text = GOOD.replace(listed, f"flash-attention, {kept}]", 1)
        changed = load_text(text, tmp_path / "matrix.yaml")
        target = changed.target("cuda12.1-torch2.3")
        assert dropped not in dict(target.components)
        promises = manifest_mod.tgi_attention_promises(target, target.resolve(env={}))
        assert promises and all(not p["flash"] and p["paged"] for p in promises.values()), dropped
    full = load_matrix(REPO / "matrix.yaml").target("cuda12.1-torch2.3")
    assert all(p["flash"] for p in manifest_mod.tgi_attention_promises(full, full.resolve(env={})).values())


def test_torch_source_build_pins_the_fork_commit_and_applies_no_unpinned_patch(matrix) -> None:
    _, _, stages, manifest = _render(matrix, "rocm6.1-torch2.3")
    stage = stages["torch-build"]
    assert "remote add origin https://github.com/fxmarty/pytorch" in stage
    assert "fetch -q --depth 1 origin ceaa1e4a7b66e818ea4e56925bb4a5dff8c56055" in stage
    assert "curl" not in stage and "git apply" not in stage
    assert manifest["torch"]["patches"] == []
    for flag in ("BUILD_CAFFE2", "USE_FBGEMM", "USE_NNPACK", "USE_QNNPACK", "USE_XNNPACK"):
        assert f'{flag}="0"' in stage, flag
    assert '_GLIBCXX_USE_CXX11_ABI="1"' in stage
    # NumPy 1 before torch's own requirements, so pip cannot pick NumPy 2 for a torch 2.3 build
    assert "-c /tmp/torch-build-pins.txt numpy==1.26.4" in stage


@pytest.mark.parametrize("target_name", GPU_TARGETS)
def test_reported_torch_version_agrees_everywhere(matrix, target_name) -> None:
    target, _, stages, manifest = _render(matrix, target_name)
    version = manifest["torch"]["version"]
    assert version == manifest["versions"]["torch"]
    assert re.fullmatch(r"2\.3\.0\+(rocm6\.1|cu121)", version)
    final = stages["final"]
    assert f'io.imagebuild.torch="{version}"' in final
    if target.torch_build.obtain == "source":
        assert f"PYTORCH_BUILD_VERSION={version} " in stages["torch-build"]
        assert "PYTORCH_BUILD_NUMBER=1" in stages["torch-build"]
    else:
        assert f" torch=={version}\n" in stages["torch"]
    assert f" torch=={version} " in stages["torch"] and "ENV PIP_CONSTRAINT=" in stages["torch"]
    assert f"expected {{want}}\")' {version}\n" in stages["torch"]  # the version is the check's argument


def test_rocm_image_carries_a_pinned_triton_recorded_in_the_manifest(matrix) -> None:
    _, _, stages, manifest = _render(matrix, "rocm6.1-torch2.3")
    assert (
        "pip install --no-deps --index-url https://download.pytorch.org/whl/rocm6.0 pytorch-triton-rocm==2.3.0"
        in stages["torch"]
    )
    assert " pytorch-triton-rocm==2.3.0 " in stages["torch"].split("constraints.txt")[0]
    assert [(c["name"], c["version"]) for c in manifest["torch"]["companions"]] == [("pytorch-triton-rocm", "2.3.0")]


def test_local_cpu_torch_stage_gets_no_constraint(matrix) -> None:
    _, _, stages, manifest = _render(matrix, "local-cpu")
    # one torch stage per OCI platform, placed on the build platform (issue 22)
    assert {"torch-amd64", "torch-arm64"} <= set(stages)
    assert all("PIP_CONSTRAINT" not in stages[name] for name in ("torch-amd64", "torch-arm64"))
    assert manifest["torch"]["companions"] == []


GOOD = (REPO / "matrix.yaml").read_text()


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            "arch_vars: {GPU_ARCHS: bare}",
            "arch_vars: {GPU_ARCHS: bare, TORCH_CUDA_ARCH_LIST: full}",
            "TORCH_CUDA_ARCH_LIST is not read on rocm",
        ),
        ("arch_vars: {GPU_ARCHS: bare}", "arch_vars: {}", "needs arch_vars"),
        ("arch_vars: {GPU_ARCHS: bare}", "arch_vars: {GPU_ARCHS: stripped}", "expected 'bare' or 'full'"),
        ("build_requires: [packaging==24.0, psutil==5.9.8]", "build_requires: [packaging, psutil]", "pattern"),
        ("subdir: csrc/rotary", "subdir: ../rotary", "subdir: String should match pattern"),
        ("subdir: csrc/rotary", "subdir: csrc/../../etc", "subdir: String should match pattern"),
        ("subdir: csrc/rotary", "subdir: /src/rotary", "subdir: String should match pattern"),
        ("subdir: csrc/rotary", "subdir: csrc/.hidden", "subdir: String should match pattern"),
        ("source: {path: kernels}", "source: {path: kernels, subdir: csrc}", "subdir belong to a git source"),
    ],
)
def test_component_arch_and_build_fields_are_checked(tmp_path: Path, old: str, new: str, message: str) -> None:
    assert old in GOOD, f"fixture drift: {old!r}"
    with pytest.raises(ConfigError) as info:
        load_text(GOOD.replace(old, new, 1), tmp_path / "matrix.yaml")
    assert message in str(info.value)


def test_cross_installed_venv_places_component_wheels_without_their_dependencies(matrix) -> None:
    """local-cpu's pip steps run on the build platform (issue 22): each platform's venv stage installs the runtime's
    pinned set by hash for that platform's wheel tags, then the component wheels with --no-deps; final copies it."""
    target, _, stages, _ = _render(matrix, "local-cpu")
    for arch in ("amd64", "arm64"):
        venv = stages[f"venv-{arch}"]
        assert "--no-deps --require-hashes -r /src/runtime-pip/requirements.txt" in venv
        assert f"cross.py platforms {'x86_64' if arch == 'amd64' else 'aarch64'}" in venv
        for name, _component in target.components:
            assert f"pip install --target /tmp/site --no-compile --no-deps /tmp/wheels/component-{name}/*.whl" in venv
    assert "pip install" not in stages["final"] and "COPY --from=venv /opt/venv /opt/venv" in stages["final"]


@pytest.mark.parametrize("target_name", ["rocm6.1-torch2.3", "cuda12.1-torch2.3"])
def test_final_stage_installs_component_wheels_without_their_dependencies(matrix, target_name) -> None:
    """Upstream copies each kernel build's build/lib (TGI@232e8d52 Dockerfile:190-213, Dockerfile_amd:170-183):
    the wheels' own requirement files (Narsil/vllm requirements-cuda.txt pulls ray, xformers, vllm-nccl-cu12)
    must not be resolved into the image; only the runtime's pinned requirements are, under the torch constraint."""
    target, _, stages, _ = _render(matrix, target_name)
    final = stages["final"]
    no_deps = re.search(r"pip install --no-deps (/tmp/wheels/component-[^\\\n]+)", final)
    assert no_deps, "component wheels must be installed with --no-deps"
    for name, _component in target.components:
        assert f"/tmp/wheels/component-{name}/*.whl" in no_deps.group(1)
    # the runtime's requirements come from the locked set, by hash; nothing in the final stage resolves
    assert not re.findall(r"pip install (?!--no-deps)[^\\\n]+", final)


@pytest.mark.parametrize("target_name", ["rocm6.1-torch2.3", "cuda12.1-torch2.3"])
def test_tgi_server_wheel_is_proven_to_hold_its_grpc_stubs_and_extras_keep_the_pins(matrix, target_name) -> None:
    """TGI@232e8d52 server/text_generation_server/pb/.gitignore ignores *.py, and poetry-core leaves ignored files
    out of a wheel built in a git work tree (seen in bench/results/tgi_server_stage.log): the stage proves the stubs
    are in the wheel. An extras install resolved live would move pins (setuptools past 80 drops pkg_resources,
    which opentelemetry 1.15 imports): the requirements and the extras are one locked set, installed by hash."""
    _, _, stages, _ = _render(matrix, target_name)
    assert "text_generation_server/pb/generate_pb2.py" in stages["runtime-server"].split("pip wheel", 1)[1]
    # the extras cannot move a pin: they are part of the one locked set (setuptools stays 69.5.1)
    lock = (REPO / "dockerfiles" / target_name / "requirements" / "runtime-server.txt").read_text()
    assert "\nsetuptools==69.5.1 --hash=sha256:" in lock
