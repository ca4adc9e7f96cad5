"""Issue 31 item 1: the vLLM on CUDA 13 / torch 2.14 target, rendered and locked, its base substitution and the vllm
runtime kind. No multi-GB build here: the committed files, the lock, the plan and a tiny real build FROM a
substituted base (the local Debian base) are what is checked; bench/ builds the image itself.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from imagebuild.building import base_substitute, post_cache
from imagebuild.building.specs import PlanOptions, plan
from imagebuild.errors import ConfigError
from imagebuild.lock import inputs as lock_inputs
from imagebuild.lock import lockfile
from imagebuild.lock.pipsets import name_of
from imagebuild.matrix import RUNTIME_KINDS, load_matrix
from imagebuild.matrix.runtime_vllm import VllmRuntime
from imagebuild.prove.coverage import Required, required_libraries
from imagecontract.models import Manifest
from tests.test_smoke_helpers import checks_by_name, run_smoke

REPO = Path(__file__).resolve().parents[1]
TARGET = "cuda13.0-torch2.14"
FOLDER = REPO / "dockerfiles" / TARGET
PLATFORMS = {"linux/amd64": "x86_64", "linux/arm64": "aarch64"}
SUBSTITUTES = (
    "debian:bookworm-slim=local/debian:bookworm",
    "debian:bookworm-slim=127.0.0.1:5000/imagebuild-base/debian:bookworm-arm64,platform=linux/arm64",
)


@pytest.fixture(scope="module")
def matrix():
    return load_matrix(REPO / "matrix.yaml")


@pytest.fixture(scope="module")
def lock() -> dict:
    return lockfile.read(REPO / "matrix.lock.json")[0]


def _stages(dockerfile: str) -> dict[str, str]:
    """stage name -> its text (FROM line to the next FROM)."""
    out: dict[str, str] = {}
    for block in re.split(r"\n(?=FROM )", dockerfile):
        found = re.match(r"FROM (?:--platform=\S+ )?\S+ AS (\S+)", block)
        if found:
            out[found.group(1)] = block
    return out


# ---- rendering ----


def test_one_dockerfile_for_both_platforms_from_the_public_debian_base() -> None:
    text = (FOLDER / "Dockerfile").read_text()
    assert "FROM --platform=linux/amd64 debian:bookworm-slim AS os-amd64" in text
    assert "FROM --platform=linux/arm64 debian:bookworm-slim AS os-arm64" in text
    assert "nvidia/cuda" not in text  # a wheel stack: only the driver comes from the host
    assert 'ENV TORCH_CUDA_ARCH_LIST="8.0;9.0;10.0;12.0"' in text  # what JIT builds in the image compile for


def test_pip_runs_only_on_the_build_platform_with_hashes_and_compiles_byte_code() -> None:
    stages = _stages((FOLDER / "Dockerfile").read_text())
    emulated = {"os-amd64", "os-arm64", "base", "final-amd64", "final-arm64", "final"}  # the target's own stages
    for name in emulated & set(stages):
        assert "pip install" not in stages[name], name
    for arch, machine in (("amd64", "x86_64"), ("arm64", "aarch64")):
        suffix = "" if arch == "amd64" else ".linux-arm64"
        for stage, file in ((f"torch-{arch}", "torch"), (f"venv-{arch}", "runtime")):
            body = stages[stage]
            assert f"requirements/{file}{suffix}.txt" in body, stage
            assert "--no-deps --require-hashes" in body and f"cross.py platforms {machine}" in body, stage
        assert "compileall -q -j 0 --invalidation-mode checked-hash /opt/venv/lib" in stages[f"venv-{arch}"]


def test_manifests_name_the_vllm_runtime_and_the_arches() -> None:
    for name, oci in (("manifest.json", "linux/amd64"), ("manifest.linux-arm64.json", "linux/arm64")):
        data = json.loads((FOLDER / name).read_text())
        manifest = Manifest.from_dict(data)  # fits the contract the smoke suite reads
        assert manifest.to_dict() == data
        runtime = data["runtime"]
        assert runtime["kind"] == "vllm" and runtime["entrypoint"] == "vllm" and runtime["api"] == "openai"
        assert runtime["serve"][:3] == ["vllm", "serve", "{model}"] and "{port}" in runtime["serve"]
        assert data["platform"]["oci"] == oci
        assert data["gpu_arches"] == ["sm_80", "sm_90", "sm_100", "sm_120"]


def test_dry_run_shows_the_arch_variables_for_both_platforms(cli) -> None:
    result = cli("build", TARGET, "--dry-run")
    assert result.exit_code == 0, result.stderr
    finals = [line for line in result.stdout.splitlines() if re.match(r"\s+stage\s+final\s", line)]
    assert len(finals) == 2, result.stdout
    for line in finals:
        assert "TORCH_CUDA_ARCH_LIST=8.0;9.0;10.0;12.0" in line
        assert "CMAKE_CUDA_ARCHITECTURES=80-real;90-real;100-real;120-real" in line
    assert "--platform linux/amd64" in result.stdout and "--platform linux/arm64" in result.stdout


# ---- the lock ----


def test_every_input_of_the_target_is_in_the_lock(matrix, lock) -> None:
    wanted = {k for k, item in lock_inputs.collect(matrix, [TARGET]).items()}
    assert wanted == {"image:debian:bookworm-slim"} | {
        f"pip:{TARGET}@{oci}:{stage}" for oci in PLATFORMS for stage in ("base", "torch", "runtime", "cuda-compiler")
    }
    for oci in PLATFORMS:
        assert sorted(lock["targets"][TARGET][oci]) == sorted(k for k in wanted if "@" not in k or oci in k)
    image = lock["inputs"]["image:debian:bookworm-slim"]
    assert image["status"] == "unresolved" and image["why"]  # Docker Hub does not answer here: said, not invented


@pytest.mark.parametrize("oci", list(PLATFORMS))
def test_the_locked_sets_pin_vllm_torch_and_cuda_wheels_once_each(lock, oci: str) -> None:
    machine = PLATFORMS[oci]
    sets = {stage: lock["inputs"][f"pip:{TARGET}@{oci}:{stage}"] for stage in ("base", "torch", "runtime")}
    for stage, entry in sets.items():
        assert entry["status"] == "locked", stage
        assert entry["spec"]["platform"] == f"{machine}-manylinux_2_36" and entry["spec"]["python"] == "3.11"
        for pkg in entry["packages"]:
            assert pkg["files"] and all(re.fullmatch(r"[0-9a-f]{64}", f["sha256"]) for f in pkg["files"]), pkg
    versions = {stage: {name_of(p["name"]): p["version"] for p in e["packages"]} for stage, e in sets.items()}
    assert versions["torch"]["torch"] == "2.14.0" and versions["torch"]["nvidia-nccl-cu13"] == "2.30.7"
    assert versions["torch"]["nvidia-cudnn-cu13"] == "9.24.0.43"
    assert versions["runtime"]["vllm"] == "0.33.0" and versions["runtime"]["flashinfer-python"] == "0.7.2.post1"
    assert versions["runtime"]["nvidia-ml-py"]  # an nvidia-* package of vLLM's, not torch's: kept in its set
    assert not set(versions["torch"]) & set(versions["runtime"])  # what the torch stage placed is not placed again
    torch_files = [f["file"] for p in sets["torch"]["packages"] if p["name"] == "torch" for f in p["files"]]
    assert torch_files == [f"torch-2.14.0-cp311-cp311-manylinux_2_28_{machine}.whl"]
    assert len(set(versions["torch"]) | set(versions["runtime"])) == 198  # vLLM 0.33.0's closure on 3.11
    suffix = "" if oci == "linux/amd64" else ".linux-arm64"
    for stage, entry in sets.items():  # the committed requirement files are the lock's lines
        lines = (FOLDER / "requirements" / f"{stage}{suffix}.txt").read_text().splitlines()
        assert [line for line in lines if not line.startswith("#")] == entry["requirements"]


# ---- base substitution ----


def test_substitution_parses_and_refuses_in_one_line() -> None:
    sub = base_substitute.parse("debian:bookworm-slim=local/debian:bookworm,platform=linux/arm64")
    assert (sub.public, sub.local, sub.platform) == ("debian:bookworm-slim", "local/debian:bookworm", "linux/arm64")
    for bad, why in [
        ("debian:bookworm-slim", "expected PUBLIC=LOCAL"),
        ("debian:bookworm-slim=local/x;rm -rf /", "is not an image reference"),
        ("debian:bookworm-slim=local/x\nRUN id", "is not an image reference"),
        ("debian:bookworm-slim=local/x,platform=linux/s390x", "platform=<linux/amd64 or linux/arm64>"),
        ("debian:bookworm-slim@sha256:" + "a" * 64 + "=local/x", "without its digest"),
    ]:
        with pytest.raises(ConfigError, match=re.escape(why)):
            base_substitute.parse(bad)


def test_substitution_replaces_each_platforms_from_and_keeps_the_rest() -> None:
    text = (FOLDER / "Dockerfile").read_text()
    subs = base_substitute.parse_all(list(SUBSTITUTES))
    out, records = base_substitute.apply(text, subs, "linux/arm64", "linux/amd64")
    assert "FROM --platform=linux/amd64 local/debian:bookworm AS os-amd64" in out
    assert "FROM --platform=linux/arm64 127.0.0.1:5000/imagebuild-base/debian:bookworm-arm64 AS os-arm64" in out
    assert "debian:bookworm-slim" not in out
    assert out.count("\n") == text.count("\n") and len(out.splitlines()) == len(text.splitlines())
    assert [(r["platform"], r["used"]) for r in records] == [
        ("linux/amd64", "local/debian:bookworm"),
        ("linux/arm64", "127.0.0.1:5000/imagebuild-base/debian:bookworm-arm64"),
    ]
    # the amd64 build reads only its own stage: the arm64 line is substituted but not recorded for it
    _, records = base_substitute.apply(text, subs, "linux/amd64", "linux/amd64")
    assert [r["platform"] for r in records] == ["linux/amd64"]
    pinned = text.replace("debian:bookworm-slim AS", "debian:bookworm-slim@sha256:" + "b" * 64 + " AS")
    _, records = base_substitute.apply(pinned, subs, "linux/amd64", "linux/amd64")
    assert records[0]["public_digest"] == "sha256:" + "b" * 64


def test_plan_builds_a_substituted_copy_and_leaves_the_committed_dockerfile(matrix) -> None:
    committed = (FOLDER / "Dockerfile").read_bytes()
    specs = plan(matrix, [TARGET], PlanOptions(base_substitutes=SUBSTITUTES))
    assert [s.platform for s in specs] == list(PLATFORMS)
    for spec in specs:
        assert spec.dockerfile == REPO / "build/render/base-substituted" / spec.target / "Dockerfile"
        assert "local/debian:bookworm AS os-amd64" in spec.rendered_files["Dockerfile"]
        assert {r["used"] for r in spec.base_substitution} >= {"local/debian:bookworm"}
    assert (FOLDER / "Dockerfile").read_bytes() == committed
    with pytest.raises(ConfigError, match="no FROM of the builds planned names debian:bookworm-slim"):
        plan(matrix, ["local-cpu"], PlanOptions(base_substitutes=SUBSTITUTES[:1]))


def test_dry_run_names_both_bases_and_the_digest_used(cli) -> None:
    result = cli("build", TARGET, "--platform", "linux/amd64", "--dry-run", "--base-substitute", SUBSTITUTES[0])
    assert result.exit_code == 0, result.stderr
    line = next(x for x in result.stdout.splitlines() if x.startswith("# base substitution"))
    assert "debian:bookworm-slim -> local/debian:bookworm (sha256:" in line  # the local image's ID, read now
    assert "--label 'io.imagebuild.base-substitution=" in result.stdout
    bad = cli("build", TARGET, "--dry-run", "--base-substitute", "debian:bookworm-slim=Local/$(id)")
    assert bad.exit_code == 2 and bad.exception is None
    assert bad.stderr.startswith("error: --base-substitute") and len(bad.stderr.strip().splitlines()) == 1


def test_a_real_build_from_the_substituted_base_records_it_in_report_label_and_provenance(tmp_path: Path) -> None:
    """A tiny real build (the engine here): FROM the public name, substituted by the local Debian base."""
    from imagebuild.building.buildkit import BuildSpec, run_build, write_report
    from imagebuild.building.secrets import Secrets
    from imagebuild.engine.docker import find_engine
    from imagebuild.release import attest

    engine = find_engine()
    dockerfile = "FROM --platform=linux/amd64 debian:bookworm-slim AS os-amd64\nFROM os-amd64\nRUN true\n"
    subs = base_substitute.parse_all([SUBSTITUTES[0]])
    text, records = base_substitute.apply(dockerfile, subs, "linux/amd64", "linux/amd64")
    records = base_substitute.resolve_used(records)
    (tmp_path / "Dockerfile").write_text(text)
    tag = "h11-base-substitute:test"
    spec = BuildSpec(
        target="h11-base-substitute",
        context=tmp_path,
        dockerfile=tmp_path / "Dockerfile",
        tags=[tag],
        labels=base_substitute.label(records),
        log_path=tmp_path / "build.log",
        platform="linux/amd64",
        base_substitution=records,
    )
    secrets = Secrets()
    try:
        result = run_build(spec, engine, secrets)
        assert result.ok, result.log_tail
        write_report(tmp_path / "report.json", engine, [result])
        entry = json.loads((tmp_path / "report.json").read_text())["targets"][0]
        local_id = subprocess.run(
            ["docker", "image", "inspect", "--format", "{{.Id}}", "local/debian:bookworm"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        assert entry["base_substitution"] == [
            {
                "platform": "linux/amd64",
                "public": "debian:bookworm-slim",
                "public_digest": None,
                "used": "local/debian:bookworm",
                "used_digest": local_id,
            }
        ]
        labels = json.loads(
            subprocess.run(
                ["docker", "image", "inspect", "--format", "{{json .Config.Labels}}", tag],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )
        assert json.loads(labels[base_substitute.LABEL]) == entry["base_substitution"]
        pred = attest.provenance(labels, None, "matrix.yaml", {})
        assert pred["buildDefinition"]["externalParameters"]["base_substitution"] == entry["base_substitution"]
        deps = {d["uri"]: d for d in pred["buildDefinition"]["resolvedDependencies"]}
        assert deps["docker-image:local/debian:bookworm"]["digest"] == {"sha256": local_id.removeprefix("sha256:")}
    finally:
        secrets.cleanup()
        subprocess.run(["docker", "image", "rm", "-f", tag], capture_output=True, check=False)


def test_provenance_without_a_substitution_says_nothing_of_one() -> None:
    from imagebuild.release import attest

    pred = attest.provenance({"io.imagebuild.target": TARGET}, None, "matrix.yaml", {})
    assert "base_substitution" not in pred["buildDefinition"]["externalParameters"]
    odd = attest.provenance({base_substitute.LABEL: "[1, 2]"}, None, "matrix.yaml", {})
    assert "unreadable" in odd["buildDefinition"]["externalParameters"]["base_substitution"][0]


# ---- the vllm runtime kind ----


def _vllm(**fields) -> dict:
    base = {"kind": "vllm", "packages": ["vllm==0.33.0"], "serve": ["serve", "{model}", "--port", "{port}"]}
    return {**base, **fields}


def test_the_vllm_kind_is_registered_and_checked() -> None:
    assert "vllm" in RUNTIME_KINDS
    runtime = VllmRuntime.model_validate(_vllm())
    assert runtime.entrypoint == "vllm" and runtime.api == "openai" and runtime.startup_timeout_s == 900
    for fields, why in [
        ({"requirements": "runtimes/x.txt", "packages": []}, "not a requirements file"),
        ({"requirements": "runtimes/x.txt"}, "give either requirements"),
        ({"packages": ["transformers==5.24.0"]}, "packages must pin vllm"),
        ({"serve": ["--model", "{model}"]}, "serve must start with the `serve` subcommand"),
        ({"packages": ["vllm>=0.33"]}, "should match pattern"),
    ]:
        with pytest.raises(ValueError, match=re.escape(why)):
            VllmRuntime.model_validate(_vllm(**fields))


def test_the_serve_check_is_skipped_with_its_reason_on_a_cpu(tmp_path: Path) -> None:
    """The committed manifest of the image, on this CPU machine: vllm serve has no CPU path, the check says so
    (on a GPU runner the same check starts `vllm serve` and runs the OpenAI-API requests)."""
    model = tmp_path / "model"
    model.mkdir()
    report = tmp_path / "report.json"
    manifest = FOLDER / "manifest.json"
    proc = run_smoke(
        tmp_path,
        "--manifest",
        str(manifest),
        "--only",
        "runtime",
        "--report",
        str(report),
        env={"IMAGEBUILD_SMOKE_MODEL": str(model)},
    )
    check = checks_by_name(report)["runtime"]
    assert check["status"] == "skipped", (proc.stdout, proc.stderr, check)
    assert "serves on the image's GPU and none is usable" in check["reason"]
    assert check["numbers"]["kind"] == "vllm"


# ---- coverage rule wiring ----


def test_the_required_libraries_reach_the_coverage_hook_and_its_cache_key(matrix) -> None:
    specs = plan(matrix, [TARGET], PlanOptions())
    required = required_libraries(specs)
    want = [
        "torch",
        "vllm:_C_stable_libtorch*",
        "vllm:_moe_C_stable_libtorch*",
        "nvidia-nccl-cu13",
        "nvidia-cudnn-cu13",
        "imagebuild-kernels",  # ours, compiled in the build for exactly the list (issue 31 item 2)
    ]
    assert {name: [str(r) for r in libs] for name, libs in required.items()} == {s.target: want for s in specs}
    assert required_libraries(plan(matrix, ["local-cpu"], PlanOptions())) == {}
    key = post_cache.hooks_key()
    assert post_cache.target_key(key, []) == key  # a target without a list keeps its old records
    one = post_cache.target_key(key, [Required.parse(n) for n in want])
    assert one != key and one == post_cache.target_key(key, [Required.parse(n) for n in reversed(want)])
    assert one != post_cache.target_key(key, [Required.parse(n) for n in want[:-1]])
